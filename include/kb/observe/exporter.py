"""The pipeline's metrics for Prometheus, worked out at scrape time from what the pipeline
already keeps: the run summaries in the artifacts bucket, the ledger, and the inbox listing.

No pushgateway and no counter in a task: a task that is retried or a run that is rerun would
count twice, and a counter in a worker dies with its process. The run summaries are the
record of what each run did (one per run, rewritten by a rerun of its report), so their sums
are the counters; the ledger and the inbox are the gauges.

Labels hold bounded vocabularies only (outcome, backend, quarantine code, status), never a
document key. A scrape is served from a snapshot at most ``min_interval_s`` old, so several
scrapers cost one listing.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kb.artifacts import ArtifactKeys
from kb.ledger import Status, doc_id_for, pending_work
from kb.ledger_db import Ledger
from kb.objectstore import ObjectStore
from kb.settings import PipelineSettings
from ocr_engine import cost

log = logging.getLogger("kb.observe.exporter")

# Seconds; the promise (KB_SEARCHABLE_WITHIN_S, 3600 by default) falls on a bucket edge.
LANDING_BUCKETS = (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
OUTCOMES = {"indexed": "documents_indexed", "quarantined": "documents_quarantined", "failed": "documents_failed",
            "deleted": "documents_deleted", "skipped": "documents_skipped_same_content"}
# A code or backend is a short identifier; anything else (a message, a key) would be an
# unbounded label value, so it is counted under "other".
_LABEL_VALUE = re.compile(r"^[a-z0-9_.-]{1,40}$")


def bounded(value: Any) -> str:
    text = str(value or "unknown").lower()
    return text if _LABEL_VALUE.match(text) else "other"


@dataclass
class RunTotals:
    """The sums over every run summary read so far."""

    runs: dict[str, int] = field(default_factory=lambda: {"success": 0, "failed": 0})
    documents: dict[str, int] = field(default_factory=lambda: {k: 0 for k in OUTCOMES})
    quarantined: dict[str, int] = field(default_factory=dict)
    pages: dict[str, int] = field(default_factory=dict)
    landing: list[float] = field(default_factory=list)
    ocr_pages: int = 0
    ocr_device_seconds: float = 0.0
    ocr_cost: float = 0.0
    last_run: float | None = None
    last_success: float | None = None

    @classmethod
    def of(cls, summaries: Iterable[dict[str, Any]]) -> "RunTotals":
        totals = cls()
        for summary in summaries:
            totals.add(summary)
        return totals

    def add(self, s: dict[str, Any]) -> None:
        succeeded = not s.get("documents_failed")
        self.runs["success" if succeeded else "failed"] += 1
        for outcome, name in OUTCOMES.items():
            self.documents[outcome] += int(s.get(name) or 0)
        for q in s.get("quarantine") or []:
            code = bounded(q.get("code"))
            self.quarantined[code] = self.quarantined.get(code, 0) + 1
        for backend, n in (s.get("pages_by_backend") or {}).items():
            self.pages[bounded(backend)] = self.pages.get(bounded(backend), 0) + int(n)
        self.landing.extend(float(d["searchable_seconds"]) for d in s.get("documents") or []
                            if d.get("status") == Status.INDEXED and d.get("searchable_seconds") is not None)
        ocr = s.get("ocr") or {}
        pages, device = int(ocr.get("pages") or 0), float(ocr.get("device_seconds") or 0.0)
        self.ocr_pages += pages
        self.ocr_device_seconds += device
        per_1000 = cost.cost_per_1000_pages(ocr.get("gpu_cost_per_hour"), pages, device)
        self.ocr_cost += 0.0 if per_1000 is None else per_1000 * pages / 1000
        finished = _timestamp(s.get("finished_at"))
        if finished is not None:
            self.last_run = max(self.last_run or 0.0, finished)
            if succeeded:
                self.last_success = max(self.last_success or 0.0, finished)


def _timestamp(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


class SummaryCache:
    """Run summaries by run folder. A summary, once read, is kept: a run's report writes it
    at the end of the run, so it is read once it exists (a folder without one yet is looked
    at again on the next scrape)."""

    def __init__(self, store: ObjectStore, bucket: str) -> None:
        self.store, self.bucket = store, bucket
        self._by_folder: dict[str, dict[str, Any]] = {}

    def summaries(self) -> list[dict[str, Any]]:
        for folder in self.store.list_folders(self.bucket, ArtifactKeys.RUNS):
            if folder not in self._by_folder:
                summary = self.store.get_json(self.bucket, f"{folder}{ArtifactKeys.SUMMARY}")
                if summary is not None:
                    self._by_folder[folder] = summary
        return list(self._by_folder.values())


class PipelineCollector(Collector):
    def __init__(self, store: ObjectStore, settings: PipelineSettings, ledger: Ledger,
                 min_interval_s: float = 10.0) -> None:
        self.store, self.settings, self.ledger = store, settings, ledger
        self.summaries = SummaryCache(store, settings.artifacts_bucket)
        self.min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._snapshot: list[Metric] = []
        self._taken = 0.0
        self._errors: dict[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if not self._snapshot or time.monotonic() - self._taken >= self.min_interval_s:
                self._snapshot, self._taken = list(self._measure()), time.monotonic()
            return iter(self._snapshot)

    def _measure(self) -> Iterator[Metric]:
        # Each source is measured on its own: an unreachable ledger must not hide the runs.
        errors = CounterMetricFamily("kb_exporter_source_errors", "Scrapes a source could not be read in",
                                     labels=["source"])
        for source, measure in (("summaries", self._runs), ("ledger", self._ledger), ("inbox", self._inbox)):
            try:
                yield from list(measure())
            except Exception as exc:  # noqa: BLE001 - one unreadable source must not fail the scrape
                # (KbError from the store and the ledger; a read-only ledger role before the
                # pipeline's first run finds no tables, which SQLAlchemy reports as its own error)
                log.warning("%s could not be read: %s: %s", source, type(exc).__name__, exc)
                self._errors[source] = self._errors.get(source, 0) + 1
            errors.add_metric([source], self._errors.get(source, 0))
        yield errors

    def _runs(self) -> Iterator[Metric]:
        t = RunTotals.of(self.summaries.summaries())
        yield _counter("kb_pipeline_runs", "Runs by result (failed: some document failed)", "result", t.runs)
        yield _counter("kb_pipeline_documents", "Document versions a run finished, by outcome", "outcome", t.documents)
        yield _counter("kb_pipeline_quarantined", "Quarantined document versions by reason", "code", t.quarantined)
        yield _counter("kb_pipeline_pages", "Pages indexed, by the backend that read them", "backend", t.pages)
        hist = HistogramMetricFamily("kb_pipeline_landing_to_searchable_seconds",
                                     "From a version's landing in the inbox to the end of its indexing")
        buckets = [(str(float(le)), sum(1 for v in t.landing if v <= le)) for le in LANDING_BUCKETS]
        hist.add_metric([], buckets + [("+Inf", len(t.landing))], sum_value=sum(t.landing))
        yield hist
        yield CounterMetricFamily("kb_pipeline_ocr_pages", "Pages read by an OCR backend", value=t.ocr_pages)
        yield CounterMetricFamily("kb_pipeline_ocr_device_seconds", "Device time of OCR pages",
                                  value=t.ocr_device_seconds)
        yield CounterMetricFamily("kb_pipeline_ocr_cost", "What OCR pages cost (KB_GPU_COST_PER_HOUR's currency)",
                                  value=t.ocr_cost)
        for name, value, text in (("kb_pipeline_last_success_timestamp_seconds", t.last_success,
                                   "When the last run that failed no document ended"),
                                  ("kb_pipeline_last_run_timestamp_seconds", t.last_run, "When the last run ended")):
            if value is not None:  # absent until there is one: "never" is not the epoch
                yield GaugeMetricFamily(name, text, value=value)

    def _ledger(self) -> Iterator[Metric]:
        counts = self.ledger.count_by_status()
        yield _gauge("kb_ledger_documents", "Documents by the status of their latest version", "status",
                     {str(k): v for k, v in counts.items()})
        yield GaugeMetricFamily("kb_review_pending_documents", "Quarantined versions waiting for a review decision",
                                value=self.ledger.pending_review_count())

    def _inbox(self) -> Iterator[Metric]:
        s = self.settings
        objects = list(self.store.list_latest(s.inbox_bucket))
        entries = self.ledger.get_many(doc_id_for(o.bucket, o.key) for o in objects)
        # Without the index signature (hashing the embedder's weights takes a second): a
        # change of embedder is not counted as pending here.
        work = pending_work(s.inbox_bucket, objects, entries, s.max_attempts)
        yield GaugeMetricFamily("kb_inbox_pending_documents",
                                "Inbox versions the next run would take up (new, changed, due for a retry)",
                                value=len(work.todo))


def _counter(name: str, text: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, text, labels=[label])
    for value, n in sorted(values.items()):
        family.add_metric([value], n)
    return family


def _gauge(name: str, text: str, label: str, values: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=[label])
    for value, n in sorted(values.items()):
        family.add_metric([value], n)
    return family
