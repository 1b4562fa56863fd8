"""The one small interface every backend has, and what the engine lends a backend for one call.

The engine and the service use a backend only through ``Backend``: its ``name`` (the
results' ``backend`` field), ``limits()`` (cheap: planning must not load weights),
``kv_capacity()``, ``parse``, the model's version and digest, and ``expecting()``. Each
backend decides its own failure granularity (PP-OCR fails a page, Unlimited OCR a call's
pages) and its pages' ``seconds``, rendering included.

``Call`` is what the engine owns: rendering within the pixel budget, the MuPDF lock (held
for the whole call, released only while a backend decodes) and the caller's cancel flag.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

import pymupdf

from ocr_engine.api.errors import Cancelled
from ocr_engine.render import RenderedPage, iter_pages
from ocr_engine.api.pages import PageResult
from ocr_engine.api.limits import TokenBudget
from ocr_engine.unlimited.kv_budget import SequenceBound


@dataclass(frozen=True)
class BackendLimits:
    # the pages one call takes; None where pages go one at a time
    max_pages_per_call: int | None = None
    token_budget: TokenBudget | None = None
    # the KV cache one call of p pages holds; None: the backend holds no KV cache (no admission)
    kv_bound: SequenceBound | None = None
    max_batch: int = 1  # calls decoded together as one batch

    @property
    def pages_per_call(self) -> int:
        return self.max_pages_per_call or 1


@dataclass
class Call:
    """One ``parse_pdf`` call, lent by the engine to the backends that read its pages."""

    dpi: int
    max_pixels: int
    mupdf: threading.Lock  # held by the engine for the whole call
    cancel: threading.Event | None = None

    def render(self, doc: pymupdf.Document, pages: list[int]) -> Iterator[RenderedPage]:
        """``pages`` (1-based) rendered one at a time, each within the pixel budget."""
        return iter_pages(doc, pages, self.dpi, self.max_pixels)

    @contextmanager
    def unlocked(self) -> Iterator[None]:
        """Around work that does not touch MuPDF (decoding): other calls render meanwhile."""
        self.mupdf.release()
        try:
            yield
        finally:
            self.mupdf.acquire()

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("the request was abandoned; work stopped")


class Backend(Protocol):
    """A backend is built cheaply and loads its model on first use. A class may inherit the
    defaults below (no call limits, no KV cache, no batching)."""

    name: str

    @property
    def model_version(self) -> str: ...

    @property
    def weights_digest(self) -> str | None: ...

    def model_identity(self) -> tuple[str | None, str | None]:
        """(model version, weights digest) as its pages will carry them; must not load a model."""
        return self.model_version, self.weights_digest

    def limits(self) -> BackendLimits:
        """What one call may hold; must not load a model."""
        return BackendLimits()

    def kv_capacity(self) -> int | None:
        """Bytes of KV cache the device gives all admitted calls (may load and measure the
        model); None where ``limits().kv_bound`` is None."""
        return None

    def parse(self, doc: pymupdf.Document, pages: list[int], call: Call) -> Iterable[PageResult]:
        """One result per page of ``pages`` (1-based), in order. A backend that reads page by
        page yields each result as it is read: the engine times its pace from them, and a
        call cancelled midway has still timed the pages it finished."""
        ...

    def expecting(self) -> AbstractContextManager[None]:
        """Around one caller's engine work, so a batching decoder waits for its calls."""
        return nullcontext()
