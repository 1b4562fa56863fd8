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
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kb.artifacts import ArtifactKeys
from kb.ledger import REREAD_REASONS, Status, doc_id_for, pending_work
from kb.ledger_db import Ledger
from kb.objectstore import ObjectStore
from kb.settings import PipelineSettings
from ocr_engine.api import cost

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
    """The sums over the run summaries folded in so far. Bounded whatever the history: the
    landing times are kept as the histogram's bucket counts, not one by one."""

    runs: dict[str, int] = field(default_factory=lambda: {"success": 0, "failed": 0})
    documents: dict[str, int] = field(default_factory=lambda: {k: 0 for k in OUTCOMES})
    quarantined: dict[str, int] = field(default_factory=dict)
    pages: dict[str, int] = field(default_factory=dict)
    landing_buckets: list[int] = field(default_factory=lambda: [0] * len(LANDING_BUCKETS))
    landing_count: int = 0
    landing_sum: float = 0.0
    ocr_pages: int = 0
    ocr_device_seconds: float = 0.0
    ocr_cost: float = 0.0
    last_run: float | None = None
    last_success: float | None = None
    # what read pages in the newest run that planned any (its plan's limits): the extraction
    # version and the OCR model a ``reread`` compares stored pages with
    reader: tuple[str, str | None] | None = None
    reader_at: float | None = None

    @classmethod
    def of(cls, summaries: Iterable[dict[str, Any]]) -> "RunTotals":
        totals = cls()
        for summary in summaries:
            totals.add(summary)
        return totals

    def add(self, s: dict[str, Any], sign: int = 1) -> None:
        """Fold one summary in (``sign`` -1: take one out again, for a run whose report ran again)."""
        succeeded = not s.get("documents_failed")
        self.runs["success" if succeeded else "failed"] += sign
        for outcome, name in OUTCOMES.items():
            self.documents[outcome] += sign * int(s.get(name) or 0)
        for q in s.get("quarantine") or []:
            code = bounded(q.get("code"))
            self.quarantined[code] = self.quarantined.get(code, 0) + sign
        for backend, n in (s.get("pages_by_backend") or {}).items():
            self.pages[bounded(backend)] = self.pages.get(bounded(backend), 0) + sign * int(n)
        for d in s.get("documents") or []:
            if d.get("status") == Status.INDEXED and d.get("searchable_seconds") is not None:
                seconds = float(d["searchable_seconds"])
                self.landing_count += sign
                self.landing_sum += sign * seconds
                for i, le in enumerate(LANDING_BUCKETS):
                    if seconds <= le:
                        self.landing_buckets[i] += sign
        ocr = s.get("ocr") or {}
        pages, device = int(ocr.get("pages") or 0), float(ocr.get("device_seconds") or 0.0)
        self.ocr_pages += sign * pages
        self.ocr_device_seconds += sign * device
        per_1000 = cost.cost_per_1000_pages(ocr.get("gpu_cost_per_hour"), pages, device)
        self.ocr_cost += sign * (0.0 if per_1000 is None else per_1000 * pages / 1000)
        finished = _timestamp(s.get("finished_at"))
        if finished is not None and sign > 0:
            self.last_run = max(self.last_run or 0.0, finished)
            if succeeded:
                self.last_success = max(self.last_success or 0.0, finished)
            limits = s.get("limits") or {}
            if limits.get("extraction_version") and finished >= (self.reader_at or 0.0):
                self.reader, self.reader_at = (str(limits["extraction_version"]), limits.get("ocr_model")), finished


def _timestamp(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


class RunLog:
    """The run summaries, each folded into ``totals`` once, in bounded memory and at a cost per
    scrape that is what finished since the last one.

    The first look reads every summary there is (every run folder, once); after it, the
    ``runs-finished/`` markers (named by time) are listed from where the last look stopped,
    less ``overlap_s`` for markers written late by a clock or a slow store, which are told
    apart by key. A run whose report ran again (a rerun) writes a new summary and a new
    marker: the last ``recent`` runs' summaries are kept, so its old one is taken out first.
    """

    def __init__(self, store: ObjectStore, bucket: str, recent: int = 1000, overlap_s: float = 120.0) -> None:
        self.store, self.bucket = store, bucket
        self.recent, self.overlap_s = recent, overlap_s
        self.totals = RunTotals()
        self._summaries: OrderedDict[str, dict[str, Any]] = OrderedDict()  # run -> its summary, the last `recent`
        self._markers: set[str] = set()  # markers within the overlap, already folded
        self._latest: str | None = None  # the newest marker's time (ISO 8601)

    def update(self) -> RunTotals:
        if self._latest is None:
            markers = self.store.keys_after(self.bucket, ArtifactKeys.RUNS_FINISHED)
            for folder in self.store.list_folders(self.bucket, ArtifactKeys.RUNS):
                self._fold(folder[len(ArtifactKeys.RUNS):].rstrip("/"))
            self._seen(markers)
            self._latest = self._latest or ""
            return self.totals
        start = _iso_before(self._latest, self.overlap_s) if self._latest else None
        after = f"{ArtifactKeys.RUNS_FINISHED}{start}" if start else None
        new = [m for m in self.store.keys_after(self.bucket, ArtifactKeys.RUNS_FINISHED, after)
               if m not in self._markers]
        for marker in new:
            self._fold(ArtifactKeys.run_of_finished(marker))
        self._seen(new)
        return self.totals

    def kept(self) -> int:
        """Summaries held in memory: at most ``recent``, whatever the history."""
        return len(self._summaries)

    def _fold(self, run: str) -> None:
        summary = self.store.get_json(self.bucket, f"{ArtifactKeys.RUNS}{run}/{ArtifactKeys.SUMMARY}")
        if summary is None:  # a run still going: its marker comes with its summary
            return
        old = self._summaries.pop(run, None)
        if old is not None:
            if old.get("finished_at") == summary.get("finished_at"):
                self._summaries[run] = old  # the same summary, seen again
                return
            self.totals.add(old, sign=-1)
        self.totals.add(summary)
        self._summaries[run] = summary
        while len(self._summaries) > self.recent:
            self._summaries.popitem(last=False)

    def _seen(self, markers: list[str]) -> None:
        for marker in markers:
            at = marker[len(ArtifactKeys.RUNS_FINISHED):].split("/", 1)[0]
            if self._latest is None or at > self._latest:
                self._latest = at
        self._markers.update(markers)
        if self._latest:
            horizon = f"{ArtifactKeys.RUNS_FINISHED}{_iso_before(self._latest, self.overlap_s)}"
            self._markers = {m for m in self._markers if m > horizon}


def _iso_before(iso: str, seconds: float) -> str:
    from datetime import timedelta

    return (datetime.fromisoformat(iso) - timedelta(seconds=seconds)).isoformat(timespec="seconds")


class PipelineCollector(Collector):
    def __init__(self, store: ObjectStore, settings: PipelineSettings, ledger: Ledger,
                 min_interval_s: float = 10.0) -> None:
        self.store, self.settings, self.ledger = store, settings, ledger
        self.runs = RunLog(store, settings.artifacts_bucket)
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
        t = self.runs.update()
        yield _counter("kb_pipeline_runs", "Runs by result (failed: some document failed)", "result", t.runs)
        yield _counter("kb_pipeline_documents", "Document versions a run finished, by outcome", "outcome", t.documents)
        yield _counter("kb_pipeline_quarantined", "Quarantined document versions by reason", "code", t.quarantined)
        yield _counter("kb_pipeline_pages", "Pages indexed, by the backend that read them", "backend", t.pages)
        hist = HistogramMetricFamily("kb_pipeline_landing_to_searchable_seconds",
                                     "From a version's landing in the inbox to the end of its indexing")
        buckets = [(str(float(le)), n) for le, n in zip(LANDING_BUCKETS, t.landing_buckets)]
        hist.add_metric([], buckets + [("+Inf", t.landing_count)], sum_value=t.landing_sum)
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
        reader = self.runs.totals.reader
        if reader is not None:  # known once a run has planned with a reader that names its version
            why = dict.fromkeys(REREAD_REASONS, 0)
            for entry in entries.values():
                reason = entry.outdated_reading(*reader) if entry.status == Status.INDEXED else None
                if reason is not None:
                    why[reason] += 1
            yield _gauge("kb_reread_pending_documents",
                         "Indexed documents a reread would take up: pages read by other reading rules or another "
                         "OCR model than the newest run's, or not recorded (indexed before entries kept them)",
                         "why", why)


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
