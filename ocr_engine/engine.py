"""The engine's one API: a document and a page range in, one result per page out.

    engine = OcrEngine()
    results = engine.parse_pdf(pdf_bytes, first=1, last=8)  # backend: auto

Which backend reads each page is the registry's choice (``backends/registry.py``): ``auto``
reads the text layer where it is usable and sends the other pages to the configured OCR
backend; a named backend reads every page. Backends are used only through their interface
(``backends/interface.py``) and are built on first ask; none loads a model to say its limits.

Several threads may call the engine at once (the OCR service runs one per admitted
request): everything MuPDF does is serialised by one lock, since MuPDF is not
thread-safe, and only decoding runs outside it, where the unlimited backend's batcher
decodes the calls that meet there as one batch.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pymupdf

from ocr_engine.backends.interface import Backend, Call
from ocr_engine.api.names import AUTO
from ocr_engine.backends.registry import Registry
from ocr_engine.api.pdf import check_range, close_pdf, open_pdf
from ocr_engine.api.errors import Busy, TooManyPages
from ocr_engine.api.limits import EngineLimits
from ocr_engine.pace import PageClock
from ocr_engine.api.pages import EXTRACTION_VERSION, PageResult, PageStatus, ocr_model_id
from ocr_engine.settings import EngineSettings

Routes = dict[int, str]  # page (1-based) -> the backend that reads it


class OcrEngine:
    def __init__(self, settings: EngineSettings | None = None, registry: Registry | None = None) -> None:
        self.settings = settings or EngineSettings()
        self.registry = registry or Registry()
        self.ocr_backend_name = self.registry.ocr_backend(self.settings)  # what ``auto`` sends scans to
        self.clock = PageClock(self.settings.seconds_per_page_prior)
        self._mupdf = threading.Lock()
        self._backends: dict[str, Backend] = {}
        self._building = threading.Lock()

    def backend(self, name: str) -> Backend:
        """The registered backend ``name``, built on first ask (cheap: models load on first use)."""
        with self._building:
            if name not in self._backends:
                self._backends[name] = self.registry.build(name, self.settings)
            return self._backends[name]

    def limits(self) -> EngineLimits:
        """The OCR backend's call limits (where it has any) and the observed pace."""
        backend = self.backend(self.ocr_backend_name)
        ocr = backend.limits()
        version, digest = backend.model_identity()
        pace = self.clock.snapshot(self.registry.names)
        return EngineLimits(ocr_backend=self.ocr_backend_name, max_pages_per_call=ocr.max_pages_per_call,
                            token_budget=ocr.token_budget, seconds_per_page={k: v["estimate"] for k, v in pace.items()},
                            pace=pace, min_text_chars=self.settings.min_text_chars,
                            extraction_version=EXTRACTION_VERSION,
                            ocr_model=ocr_model_id(self.ocr_backend_name, version, digest) if version else None)

    # --- the API ----------------------------------------------------------------------

    def parse_pdf(self, source: bytes | str | Path, first: int = 1, last: int | None = None,
                  backend: str = AUTO, *, max_pages: int | None = None,
                  cancel: threading.Event | None = None, on_start: Callable[[], None] | None = None) -> list[PageResult]:
        """``cancel``, once set, stops the work at the next page (or generated token) with
        ``Cancelled``: a caller that timed out does not leave the engine busy. ``on_start``
        is called once the engine is this call's (waiting for another call is not its cost)."""
        self.registry.check(backend)
        data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source
        with self._mupdf:
            if on_start is not None:
                on_start()
            with self._opened(data, first, last) as (doc, pages):
                if max_pages is not None and len(pages) > max_pages:
                    raise TooManyPages(f"{len(pages)} pages requested; the limit per request is {max_pages}")
                routes = self.registry.route(doc, pages, backend, self.settings)
                call = Call(self.settings.dpi, self.settings.max_pixels_per_page, self._mupdf, cancel)
                results: dict[int, PageResult] = {}
                for name, group in self._by_backend(routes).items():
                    for r in self.backend(name).parse(doc, group, call):
                        r.extraction_version = EXTRACTION_VERSION
                        results[r.page] = r
                        # as each page arrives: a call cancelled later (a timeout) has still
                        # timed the pages it finished, and the pace a client reads next is real
                        if r.status != PageStatus.FAILED:
                            self.clock.observe(r.backend, r.seconds)
        return [results[n] for n in pages]

    # --- for admission: what a call will hold, and the decoder's batching ------------------

    def route(self, source: bytes, first: int = 1, last: int | None = None, backend: str = AUTO, *,
              max_pages: int | None = None, wait_s: float | None = None) -> Routes:
        """Which backend ``parse_pdf`` will send each page of the range to; a bad document or
        range raises the same typed error ``parse_pdf`` would, a range over ``max_pages``
        included, before a page is read. ``wait_s``: the longest wait for MuPDF (``Busy``
        after it), so admission never waits on another request's pages for ever."""
        if not self._mupdf.acquire(timeout=-1 if wait_s is None else max(0.0, wait_s)):
            raise Busy("MuPDF stayed busy with other requests past the queue timeout")
        try:
            with self._opened(source, first, last) as (doc, pages):
                if max_pages is not None and len(pages) > max_pages:
                    raise TooManyPages(f"{len(pages)} pages requested; the limit per request is {max_pages}")
                return self.registry.route(doc, pages, backend, self.settings)
        finally:
            self._mupdf.release()

    def kv_bytes(self, routes: Routes) -> int:
        """The KV cache the largest call of a request so routed holds (a backend cuts its pages
        into calls of at most ``max_pages_per_call``); 0 where no backend of it holds one."""
        largest = 0
        for name, pages in self._by_backend(routes).items():
            limits = self.backend(name).limits()
            if limits.kv_bound is not None:
                largest = max(largest, limits.kv_bound.bytes(min(len(pages), limits.pages_per_call)))
        return largest

    @contextmanager
    def expecting(self, routes: Routes) -> Iterator[None]:
        """Around one caller's engine work, so the backends it uses wait for its calls to batch them."""
        with ExitStack() as stack:
            for name in self._by_backend(routes):
                stack.enter_context(self.backend(name).expecting())
            yield

    # --- helpers ----------------------------------------------------------------------------

    @contextmanager
    def _opened(self, data: bytes, first: int, last: int | None) -> Iterator[tuple[pymupdf.Document, list[int]]]:
        # the caller holds the MuPDF lock
        doc = open_pdf(data)
        try:
            last = doc.page_count if last is None else last
            check_range(doc, first, last)
            yield doc, list(range(first, last + 1))
        finally:
            close_pdf(doc)

    def _by_backend(self, routes: Routes) -> dict[str, list[int]]:
        """Each backend's pages, in page order, backends in the registry's order (the text layer first)."""
        groups: dict[str, list[int]] = {name: [] for name in self.registry.names}
        for page, name in sorted(routes.items()):
            groups[name].append(page)
        return {name: pages for name, pages in groups.items() if pages}
