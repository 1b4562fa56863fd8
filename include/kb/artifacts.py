"""Where everything under the artifacts bucket lives: the one place that builds its keys.

    ledger/<doc_id>.json                                  the document's ledger entry
    pages/<doc_id>/<sha256>/<backend>/<first>-<last>.json one planned page range's results
    pages/<doc_id>/<sha256>/<backend>/parts/<first>-<last>.json   a part of a split range, read
    pages/<doc_id>/<sha256>/<backend>/splits/<first>-<last>.json  this range is split, never sent whole
    quarantine/<doc_id>/<version>.json                    why a version was quarantined
    quarantine/<doc_id>/<version>/...                     its page results and validation results
    failed-pages/<doc_id>/<version>.json                  pages a version was indexed without
    alerts/<doc_id>/<version>/<event>/<channel>.json      an alert went out (exactly once)
    alerts/retire-held/<fingerprint>/<channel>.json       the retire guard's alert for one set of documents
    alerts/deadline-missed/<run_id>.json                  a run missed the searchable-within promise
    runs/<run_id>/summary.json                            a run's summary
    runs/<run_id>/tasks/<task_id>.<map_index>.json        a task process's peak memory

``version`` is the object's version id, or its ETag on a bucket without versioning.
Page results are keyed by content (sha256), so the same bytes are never read twice.

The retention sweep (``kb.pipeline.retention``) removes a document's ``pages/<doc_id>/<sha256>/``
and ``quarantine/<doc_id>/<version>/`` folders once no version it keeps needs them; the
records (ledger, quarantine and failed-pages records, alerts, runs) stay.
"""

from __future__ import annotations

from enum import StrEnum

from ocr_engine.api.names import AUTO, Requested


class AlertEvent(StrEnum):
    QUARANTINED = "quarantined"
    PAGES_FAILED = "pages-failed"
    RETIRE_HELD = "retire-held"
    DEADLINE_MISSED = "deadline-missed"


def safe(name: str) -> str:
    """A run id (or any name) as one key segment."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class ArtifactKeys:
    LEDGER = "ledger/"
    PAGES = "pages/"
    QUARANTINE = "quarantine/"
    ALERTS = "alerts/"
    RUNS = "runs/"
    SUMMARY = "summary.json"
    # one empty marker per finished run, named by when it finished: keys sort by time, so the
    # exporter lists only what finished since its last look
    RUNS_FINISHED = "runs-finished/"

    @classmethod
    def ledger(cls, doc_id: str) -> str:
        return f"{cls.LEDGER}{doc_id}.json"

    @classmethod
    def pages(cls, doc_id: str, sha256: str, first: int, last: int, backend: Requested = AUTO) -> str:
        return f"{cls.pages_folder(doc_id, sha256)}{backend}/{first:05d}-{last:05d}.json"

    @classmethod
    def pages_of(cls, doc_id: str) -> str:
        """The folder of every content version's page results (one folder per sha256)."""
        return f"{cls.PAGES}{doc_id}/"

    @classmethod
    def pages_folder(cls, doc_id: str, sha256: str) -> str:
        return f"{cls.pages_of(doc_id)}{sha256}/"

    @classmethod
    def range_part(cls, doc_id: str, sha256: str, first: int, last: int, backend: Requested = AUTO) -> str:
        return f"{cls.PAGES}{doc_id}/{sha256}/{backend}/parts/{first:05d}-{last:05d}.json"

    @classmethod
    def split_marker(cls, doc_id: str, sha256: str, first: int, last: int, backend: Requested = AUTO) -> str:
        return f"{cls.PAGES}{doc_id}/{sha256}/{backend}/splits/{first:05d}-{last:05d}.json"

    @classmethod
    def quarantine_record(cls, doc_id: str, version: str) -> str:
        return f"{cls.quarantine_prefix(doc_id, version)}.json"

    @classmethod
    def quarantine_prefix(cls, doc_id: str, version: str) -> str:
        return f"{cls.QUARANTINE}{doc_id}/{version}"

    @classmethod
    def quarantine_of(cls, doc_id: str) -> str:
        """The folder of the document's quarantine records and of their folders."""
        return f"{cls.QUARANTINE}{doc_id}/"

    @classmethod
    def quarantine_folder(cls, doc_id: str, version: str) -> str:
        """What a quarantined version left beside its record: page results, validation results."""
        return f"{cls.quarantine_prefix(doc_id, version)}/"

    @classmethod
    def quarantined_validation(cls, doc_id: str, version: str, suite: str) -> str:
        return f"{cls.quarantine_prefix(doc_id, version)}/validation-{suite}.json"

    @classmethod
    def quarantined_pages_prefix(cls, doc_id: str, version: str) -> str:
        return f"{cls.quarantine_prefix(doc_id, version)}/pages/"

    @classmethod
    def quarantined_pages(cls, doc_id: str, version: str, range_key: str) -> str:
        """A copy of one range's results beside the quarantine record (same file name)."""
        return cls.quarantined_pages_prefix(doc_id, version) + range_key.rsplit("/", 1)[-1]

    @classmethod
    def failed_pages_record(cls, doc_id: str, version: str) -> str:
        return f"failed-pages/{doc_id}/{version}.json"

    @classmethod
    def alert_marker(cls, doc_id: str, version: str, event: AlertEvent, channel: str) -> str:
        return f"{cls.ALERTS}{doc_id}/{version}/{event}/{channel}.json"

    @classmethod
    def retire_held_marker(cls, fingerprint: str, channel: str) -> str:
        return f"{cls.ALERTS}{AlertEvent.RETIRE_HELD}/{fingerprint}/{channel}.json"

    @classmethod
    def deadline_alert(cls, run_id: str) -> str:
        """The record of a run that missed the searchable-within promise (Airflow's deadline alert)."""
        return f"{cls.ALERTS}{AlertEvent.DEADLINE_MISSED}/{safe(run_id)}.json"

    @classmethod
    def run_summary(cls, run_id: str) -> str:
        return f"{cls.RUNS}{safe(run_id)}/{cls.SUMMARY}"

    @classmethod
    def run_finished(cls, finished_at: str, run_id: str) -> str:
        """``finished_at``: ISO 8601 UTC, as the summary has it (so the keys sort by time)."""
        return f"{cls.RUNS_FINISHED}{finished_at}/{safe(run_id)}"

    @classmethod
    def run_of_finished(cls, key: str) -> str:
        """The run id (as a key segment) a ``run_finished`` key names."""
        return key.rsplit("/", 1)[-1]

    @classmethod
    def task_usage_prefix(cls, run_id: str) -> str:
        return f"{cls.RUNS}{safe(run_id)}/tasks/"

    @classmethod
    def task_usage(cls, run_id: str, task_id: str, map_index: int | None) -> str:
        index = -1 if map_index is None else map_index
        return f"{cls.task_usage_prefix(run_id)}{safe(task_id)}.{index}.json"
