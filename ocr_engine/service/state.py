"""The OCR service's state: what its routes share, its start and stop, and the limits it publishes.

Everything here runs on the event loop's thread (engine work runs on the executor's), so
``waiting``, ``ready`` and ``draining`` need no lock.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from ocr_engine.backends.interface import Backend
from ocr_engine.api.names import AUTO
from ocr_engine.engine import OcrEngine
from ocr_engine.api import http_errors as E
from ocr_engine.service.admission import KvAdmission
from ocr_engine.api.contract import KvLimits, PublishedLimits, RequestLimits
from ocr_engine.service.metrics import Metrics
from ocr_engine.service.settings import ServiceSettings

log = logging.getLogger("ocr_engine.service")


def log_event(event: str, **fields: Any) -> None:
    # Structured, and never document text or keys: ids, sizes, codes and timings only.
    log.info(json.dumps({"event": event, **fields}, ensure_ascii=False))


@dataclass
class ServiceState:
    settings: ServiceSettings
    engine: OcrEngine
    metrics: Metrics
    # Engine work runs on threads of its own, one per slot: a fixed few keep a fixed few
    # malloc arenas (measured: RSS grew 37% over 100 scanned requests when calls hopped
    # across anyio's thread pool), and MuPDF is serialised inside the engine.
    executor: ThreadPoolExecutor
    slots: asyncio.Semaphore | None = None  # made at start, on the serving loop
    # KV-aware admission, where the OCR backend holds a KV cache (admission.py)
    admission: KvAdmission | None = None
    ready: bool = False
    draining: bool = False
    waiting: int = 0  # requests waiting for a slot
    admitted: int = 0  # requests holding a place: reading their document, waiting, or parsing

    @classmethod
    def of(cls, settings: ServiceSettings, engine: OcrEngine) -> "ServiceState":
        executor = ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="ocr-engine")
        return cls(settings, engine, Metrics(), executor)

    @property
    def ocr(self) -> Backend:
        """The backend ``auto`` sends scanned pages to: the one this service publishes."""
        return self.engine.backend(self.engine.ocr_backend_name)

    @property
    def serving(self) -> bool:
        return self.ready and not self.draining

    def queue_changed(self, by: int) -> None:
        self.waiting += by
        self.metrics.queue_depth.set(self.waiting)

    @property
    def places(self) -> int:
        """Requests the service holds at once: one per engine slot and per queue place. A
        request takes its place before its body or its S3 object is read, so the documents in
        memory are at most this many of ``max_file_bytes``, whatever arrives."""
        return self.settings.max_concurrency + self.settings.max_queue

    @asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        """A place for one request, or 429 at once: nothing of the request is read first."""
        if self.admitted >= self.places:
            raise E.Overloaded(f"all {self.places} places (slots and queue) are taken; retry later",
                               headers={"Retry-After": str(self.settings.retry_after_s)})
        self.admitted += 1
        try:
            yield
        finally:
            self.admitted -= 1

    # --- start and stop ---------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.slots = asyncio.Semaphore(self.settings.max_concurrency)
        if self.settings.warmup:
            await loop.run_in_executor(self.executor, self._warm)
            self.engine.clock.clear()  # the warm-up's pages include loading the models: not a page's pace
        ocr = self.ocr
        self.metrics.info.info({"backend": ocr.name, "model_version": str(ocr.model_version),
                                "weights_digest": str(ocr.weights_digest or "")})
        # measured on a GPU: after the warm-up, so the weights are in
        capacity = await loop.run_in_executor(self.executor, ocr.kv_capacity)
        if capacity is not None:
            s = self.settings
            self.admission = KvAdmission(capacity, max_queue=s.max_queue, retry_after_s=s.retry_after_s,
                                         metrics=self.metrics)
        self.ready = True
        log_event("ready", backend=ocr.name)

    def _warm(self) -> None:
        import pymupdf

        doc = pymupdf.open()
        doc.new_page().insert_text((72, 72), "warm-up page for the OCR service", fontsize=12)
        self.engine.parse_pdf(doc.tobytes(), backend=AUTO)
        self.engine.parse_pdf(doc.tobytes(), backend=self.engine.ocr_backend_name)  # loads the OCR model

    def stop(self) -> None:
        self.draining = True  # uvicorn now waits for requests in flight (drain_timeout_s)
        log_event("draining")
        self.executor.shutdown(wait=True)

    # --- what it publishes ------------------------------------------------------------------

    def published_limits(self) -> PublishedLimits:
        s = self.settings
        request = RequestLimits(max_pages=s.max_pages_per_request, max_bytes=s.max_file_bytes,
                                timeout_s=s.request_timeout_s, queue_timeout_s=s.queue_timeout_s,
                                max_concurrency=s.max_concurrency, max_queue=s.max_queue)
        return PublishedLimits(request=request, engine=self.engine.limits(), kv=self._kv_limits())

    def _kv_limits(self) -> KvLimits | None:
        admission = self.admission
        if admission is None:  # the OCR backend holds no KV cache
            return None
        limits = self.ocr.limits()
        bound = limits.kv_bound
        if bound is None:
            return None
        typical = min(self.settings.max_pages_per_request, limits.pages_per_call)
        return KvLimits(
            budget_bytes=admission.capacity, reserved_bytes=admission.reserved,
            admitted_sequences=admission.sequences, waiting=admission.waiting,
            bytes_per_token=bound.bytes_per_token, window=bound.window, prompt_tokens=bound.prompt_tokens,
            visual_tokens_per_page=bound.visual_tokens_per_page,
            typical_range_pages=typical, bytes_per_typical_range=bound.bytes(typical),
            capacity_sequences=bound.sequences(admission.capacity, typical),
            max_pages=bound.max_pages(admission.capacity), max_batch=limits.max_batch)
