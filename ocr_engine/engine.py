"""The engine's one API: a document (or images) and a page range in, one result per page out.

    engine = OcrEngine()
    results = engine.parse_pdf(pdf_bytes, first=1, last=8, backend="auto")

``backend`` is ``auto`` (text layer where usable, else the configured OCR backend:
``unlimited`` when weights are configured, else ``ppocr``), ``unlimited``, ``ppocr`` or
``textlayer``. Pages are rendered one at a time within a pixel budget.

Several threads may call the engine at once (the OCR service runs one per admitted
request): everything MuPDF does is serialised by one lock, since MuPDF is not
thread-safe, and only decoding runs outside it, where the unlimited backend's batcher
decodes the calls that meet there as one batch.
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ocr_engine.backends import textlayer
from ocr_engine.documents import check_range, close_pdf, open_pdf
from ocr_engine.errors import BackendUnavailable, Cancelled, TooManyPages
from ocr_engine.limits import EngineLimits
from ocr_engine.pace import PageClock
from ocr_engine.render import iter_pages
from ocr_engine.router import OCR, route
from ocr_engine.schema import FAILED, PageResult
from ocr_engine.settings import EngineSettings

BACKENDS = ("auto", "unlimited", "ppocr", "textlayer")


class OcrEngine:
    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()
        self._local = threading.local()  # the cancel flag of the call running on this thread
        self._mupdf = threading.Lock()
        self.clock = PageClock(self.settings.seconds_per_page_prior)

    # --- backends (loaded on first use) ---------------------------------------------

    @cached_property
    def ppocr(self):
        from ocr_engine.backends.ppocr import PPOCRBackend

        return PPOCRBackend(max_side=self.settings.ppocr_max_side)

    @cached_property
    def unlimited(self):
        if not self.settings.model_dir:
            raise BackendUnavailable("the unlimited backend needs OCR_MODEL_DIR (a verified weights folder)")
        from ocr_engine.unlimited.backend import UnlimitedBackend

        return UnlimitedBackend(self.settings.model_dir, self.settings)

    def ocr_backend_name(self) -> str:
        choice = self.settings.ocr_backend
        if choice == "auto":
            return "unlimited" if self.settings.model_dir else "ppocr"
        return choice

    @cached_property
    def _token_budget(self):
        s = self.settings
        if "unlimited" in self.__dict__:  # loaded: ask it
            return self.unlimited.budget()
        from ocr_engine.unlimited.budget import budget_of_folder

        return budget_of_folder(s.model_dir, s.context_length, s.expected_tokens_per_page)

    def limits(self) -> EngineLimits:
        """The token budget of the OCR backend (where it has one) and the observed pace."""
        ocr = self.ocr_backend_name()
        budget = self._token_budget if ocr == "unlimited" else None
        pace = self.clock.snapshot()
        return EngineLimits(ocr_backend=ocr, max_pages_per_call=budget.max_pages() if budget else None,
                            token_budget=budget, seconds_per_page={k: v["estimate"] for k, v in pace.items()},
                            pace=pace, min_text_chars=self.settings.min_text_chars)

    # --- the API ----------------------------------------------------------------------

    def parse_pdf(self, source: bytes | str | Path, first: int = 1, last: int | None = None,
                  backend: str = "auto", *, max_pages: int | None = None,
                  cancel: threading.Event | None = None, on_start=None) -> list[PageResult]:
        """``cancel``, once set, stops the work at the next page (or generated token) with
        ``Cancelled``: a caller that timed out does not leave the engine busy. ``on_start``
        is called once the engine is this call's (waiting for another call is not its cost)."""
        self._local.cancel = cancel
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
        data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source
        with self._mupdf:
            if on_start is not None:
                on_start()
            return self._parse_pdf(data, first, last, backend, max_pages)

    def _parse_pdf(self, data: bytes, first: int, last: int | None, backend: str, max_pages: int | None):
        doc = open_pdf(data)
        try:
            last = doc.page_count if last is None else last
            check_range(doc, first, last)
            pages = list(range(first, last + 1))
            if max_pages is not None and len(pages) > max_pages:
                raise TooManyPages(f"{len(pages)} pages requested; the limit per request is {max_pages}")
            if backend == "textlayer":
                routes = {n: "textlayer" for n in pages}
                ocr_name = ""
            elif backend == "auto":
                routes = route(doc, pages, self.settings.min_text_chars)
                ocr_name = self.ocr_backend_name()
            else:
                routes = {n: OCR for n in pages}
                ocr_name = backend
            results: dict[int, PageResult] = {}
            for n in pages:
                if routes[n] != OCR:
                    self._check_cancel()
                    results[n] = textlayer.extract_page(doc.load_page(n - 1))
            ocr_pages = [n for n in pages if routes[n] == OCR]
            if ocr_pages:
                for r in self._ocr(doc, ocr_pages, ocr_name):
                    results[r.page] = r
            for r in results.values():
                if r.status != FAILED:
                    self.clock.observe(r.backend, r.seconds)
            return [results[n] for n in pages]
        finally:
            close_pdf(doc)

    def _ocr(self, doc, pages: list[int], name: str) -> list[PageResult]:
        s = self.settings
        if name == "ppocr":
            out = []
            tick = time.perf_counter()
            for rendered in iter_pages(doc, pages, s.dpi, s.max_pixels_per_page):
                self._check_cancel()
                rect = doc.load_page(rendered.page - 1).rect
                result = self._guard(rendered.page, name,
                                     lambda: self.ppocr.recognize(rendered, rect.width, rect.height))
                # a page's time is what a caller waits for it: rendering included
                now = time.perf_counter()
                result.seconds, tick = round(now - tick, 4), now
                out.append(result)
            return out
        if name == "unlimited":
            backend = self.unlimited
            per_call = backend.pages_per_call
            out = []
            for start in range(0, len(pages), per_call):
                self._check_cancel()
                group = pages[start : start + per_call]
                started = time.perf_counter()
                results = self._unlimited_group(doc, group)
                for r in results:  # rendering included, as for ppocr
                    r.seconds = round((time.perf_counter() - started) / len(group), 4)
                out.extend(results)
            return out
        raise BackendUnavailable(f"no OCR backend named {name!r}")

    def _unlimited_group(self, doc, pages: list[int]) -> list[PageResult]:
        from PIL import Image

        s = self.settings
        images, sizes = [], []
        for rendered in iter_pages(doc, pages, s.dpi, s.max_pixels_per_page):
            images.append(Image.fromarray(rendered.image))
            rect = doc.load_page(rendered.page - 1).rect
            sizes.append((rect.width, rect.height))
        self._mupdf.release()  # decoding does not touch MuPDF: other calls render meanwhile
        try:
            return self.unlimited.parse(images, pages, sizes, cancel=getattr(self._local, "cancel", None))
        except Cancelled:
            raise
        except Exception as exc:  # one failed call fails its pages, not the document
            return [PageResult(page=n, markdown="", backend="unlimited", status=FAILED, reason=f"{type(exc).__name__}: {exc}")
                    for n in pages]
        finally:
            self._mupdf.acquire()

    # --- for admission: what a call will hold, and the decoder's batching ------------------

    def ocr_pages(self, source: bytes, first: int = 1, last: int | None = None, backend: str = "auto") -> int:
        """How many pages of the range the OCR backend will read (the rest use their text
        layer); a bad document or range raises the same typed error ``parse_pdf`` would."""
        if backend == "textlayer":
            return 0
        with self._mupdf:
            doc = open_pdf(source)
            try:
                last = doc.page_count if last is None else last
                check_range(doc, first, last)
                pages = list(range(first, last + 1))
                if backend != "auto":
                    return len(pages)
                return sum(1 for r in route(doc, pages, self.settings.min_text_chars).values() if r == OCR)
            finally:
                close_pdf(doc)

    def kv_bytes(self, ocr_pages: int, backend: str = "auto") -> int:
        """The KV cache the largest generate call of ``ocr_pages`` pages holds (the unlimited
        backend cuts a request into calls of at most ``max_pages_per_call``); 0 elsewhere."""
        reader = self.ocr_backend_name() if backend in ("auto", "textlayer") else backend
        if ocr_pages == 0 or reader != "unlimited":
            return 0
        return self.unlimited.bound.bytes(min(ocr_pages, self.unlimited.pages_per_call))

    def expecting(self):
        """Around one caller's engine work, so the decoder waits for its ranges to batch them."""
        if "unlimited" in self.__dict__:
            return self.unlimited.batcher.expecting()
        return nullcontext()

    def _check_cancel(self) -> None:
        cancel = getattr(self._local, "cancel", None)
        if cancel is not None and cancel.is_set():
            raise Cancelled("the request was abandoned; work stopped")

    @staticmethod
    def _guard(page: int, backend: str, fn) -> PageResult:
        started = time.perf_counter()
        try:
            return fn()
        except Exception as exc:
            return PageResult(page=page, markdown="", backend=backend, status=FAILED,
                              reason=f"{type(exc).__name__}: {exc}", seconds=round(time.perf_counter() - started, 4))

    def parse_images(self, images: list[Any], backend: str = "ppocr") -> list[PageResult]:
        """Images (numpy RGB arrays or PIL images) as pages 1..n; boxes in pixels."""
        from PIL import Image

        from ocr_engine.render import RenderedPage

        if backend in ("auto", "textlayer"):
            backend = self.ocr_backend_name()
        arrays = [np.asarray(im.convert("RGB")) if isinstance(im, Image.Image) else im for im in images]
        if backend == "ppocr":
            return [self._guard(i, backend, lambda a=a, i=i: self.ppocr.recognize(RenderedPage(i, a, 1.0, False),
                                                                                   a.shape[1], a.shape[0]))
                    for i, a in enumerate(arrays, start=1)]
        if backend == "unlimited":
            return self.unlimited.parse([Image.fromarray(a) for a in arrays], list(range(1, len(arrays) + 1)),
                                        [(a.shape[1], a.shape[0]) for a in arrays])
        raise BackendUnavailable(f"no OCR backend named {backend!r}")
