"""The search service's state: what its routes share, its start and stop, and its metrics.

Everything here is read and written on the event loop's thread (queries and page images run
on worker threads, and take what they need as arguments), so ``ready`` and ``drawing`` need
no lock.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kb.retrieval import Retriever
from kb.settings import PipelineSettings, S3Settings, SearchSettings
from kb.store import service_reader

log = logging.getLogger("kb.search")


def log_event(event: str, **fields: Any) -> None:
    # Structured, and never document text; a query's text only where KB_SEARCH_LOG_QUERIES is on
    log.info(json.dumps({"event": event, **fields}, ensure_ascii=False))


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        # route: the route's template, or "unmatched"; answers 401 are only counted, unlabelled,
        # and error codes are the service's own few: nobody can add a series from outside
        self.requests = Counter("kb_search_requests", "Requests by route and status", ["route", "status"], registry=r)
        self.unauthorized = Counter("kb_search_unauthorized_requests", "Requests refused for want of a valid key",
                                    registry=r)
        self.latency = Histogram("kb_search_query_seconds", "Search latency by mode", ["mode"], registry=r,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.errors = Counter("kb_search_errors", "Errors by code", ["code"], registry=r)
        self.store_lag = Gauge("kb_search_store_lag_rows",
                               "Rows of the store's write log no copy has applied yet (embedded store)", registry=r)

    def error(self, code: str, status: int) -> None:
        if status != 401:  # keyless callers are counted apart, never given series of their own
            self.errors.labels(code).inc()


@dataclass
class SearchState:
    settings: SearchSettings
    pipeline: PipelineSettings
    metrics: Metrics
    reader: Any  # kb.store.service_reader's: the store's replicas, or a server's client
    retriever: Retriever
    objects: Any = None  # the object store page images are drawn from, opened at start
    ready: bool = False
    drawing: int = 0  # page image requests drawing or waiting to draw
    renders: anyio.CapacityLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.renders = anyio.CapacityLimiter(self.settings.page_renders)  # threads drawing at once (MuPDF: one)

    @classmethod
    def of(cls, settings: SearchSettings, pipeline: PipelineSettings) -> "SearchState":
        reader = service_reader(pipeline)
        return cls(settings, pipeline, Metrics(), reader,
                   Retriever(pipeline, stores=reader, embed_threads=settings.embed_threads))

    async def start(self) -> None:
        started = time.perf_counter()
        await anyio.to_thread.run_sync(self.retriever.embedder.embed_queries, ["warm-up"])  # loads (or exports) the model
        self.reader.start()  # here, not in a worker thread: the store's replicas die with the thread that starts them
        self.objects = self._object_store()
        self.ready = True
        log_event("ready", embedder=self.retriever.embedder.model_id, seconds=round(time.perf_counter() - started, 2))

    def stop(self) -> None:
        self.ready = False
        self.reader.close()

    def _object_store(self):
        from kb.objectstore import ObjectStore

        s3 = S3Settings()
        if self.settings.s3_access_key:
            s3 = s3.model_copy(update={"access_key": self.settings.s3_access_key,
                                       "secret_key": self.settings.s3_secret_key})
        return ObjectStore.from_settings(s3)
