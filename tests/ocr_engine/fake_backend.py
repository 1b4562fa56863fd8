"""A backend that exists only in tests: it implements the interface (``Backend``) and nothing
else, so whatever the engine and the service say about it they can only have read from there."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pymupdf

from ocr_engine.backends.interface import BackendLimits, Call
from ocr_engine.backends.registry import BUILTIN, Registration, Registry
from ocr_engine.api.pages import PageResult, PageStatus, count_chars
from ocr_engine.api.limits import TokenBudget
from ocr_engine.unlimited.kv_budget import SequenceBound

NAME = "fake"
PRIOR_S = 7.5  # its seconds-per-page prior, far from every built-in one
PER_CALL = 3
BUDGET = TokenBudget(context_length=4096, visual_tokens_per_page=50, prompt_tokens=5, output_tokens_per_page=100)
BOUND = SequenceBound(bytes_per_token=1000, window=8, prompt_tokens=5, visual_tokens_per_page=50)
CAPACITY = 4 * BOUND.bytes(PER_CALL) + 123  # four typical calls, and a little over
MAX_BATCH = 4


class FakeBackend:
    """Reads each page as one line naming it. With ``kv``, it declares a KV bound and capacity."""

    name = NAME
    model_version = "fake-ocr-1"
    weights_digest = "f" * 64

    def __init__(self, kv: bool = True) -> None:
        self.kv = kv
        self.calls: list[list[int]] = []  # the pages of each parse call
        self.calls_while_expected: list[list[int]] = []  # those made inside expecting()
        self._expected = 0
        self._lock = threading.Lock()

    def limits(self) -> BackendLimits:
        return BackendLimits(max_pages_per_call=PER_CALL, token_budget=BUDGET,
                             kv_bound=BOUND if self.kv else None, max_batch=MAX_BATCH)

    def model_identity(self) -> tuple[str, str]:
        return self.model_version, self.weights_digest

    def kv_capacity(self) -> int | None:
        return CAPACITY if self.kv else None

    def parse(self, doc: pymupdf.Document, pages: list[int], call: Call) -> list[PageResult]:
        results = []
        for rendered in call.render(doc, pages):  # the engine's rendering, within its pixel budget
            call.check_cancel()
            text = f"fake read page {rendered.page} at {rendered.image.shape[1]} px"
            results.append(PageResult(page=rendered.page, markdown=text, backend=NAME, status=PageStatus.OK,
                                      chars=count_chars(text), model_version=self.model_version,
                                      weights_digest=self.weights_digest, seconds=0.01))
        with self._lock:
            self.calls.append(pages)
            if self._expected:
                self.calls_while_expected.append(pages)
        return results

    @contextmanager
    def expecting(self):
        with self._lock:
            self._expected += 1
        try:
            yield
        finally:
            with self._lock:
                self._expected -= 1


def registry_with(fake: FakeBackend) -> Registry:
    """The built-in backends and ``fake``, for one test."""
    return Registry((*BUILTIN, Registration(NAME, lambda settings: fake)))
