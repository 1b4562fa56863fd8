"""Stage 5, report: the run summary, in the artifacts bucket and the log."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kb.artifacts import ArtifactKeys
from kb.ledger import Status, now_iso
from kb.objectstore import ObjectStore
from kb.pipeline.accounting import OcrUsage, merge, usage_summary
from kb.pipeline.context import Context
from kb.pipeline.messages import DocumentResult, Plan, Sensed, Swept
from kb.pipeline.usage import peak_by_task, run_usage

log = logging.getLogger(__name__)


def summarize(run_id: str, sensed: Sensed, plan: Plan, results: list[DocumentResult],
              seconds: float | None = None, gpu_cost_per_hour: float | None = None,
              swept: Swept | None = None) -> dict[str, Any]:
    indexed = [r for r in results if r.status == Status.INDEXED]
    quarantined = plan.quarantined + [r for r in results if r.status == Status.QUARANTINED]
    failed = [r for r in results if r.status == Status.FAILED]
    return {
        "run_id": run_id,
        "documents_seen": len(sensed.todo) + sensed.unchanged + sensed.backing_off,
        "documents_unchanged": sensed.unchanged,
        "documents_backing_off": sensed.backing_off,
        "documents_indexed": len(indexed),
        "documents_skipped_same_content": sum(1 for d in plan.skipped if d["reason"] == "same_content"),
        # a reread run: indexed from pages the current reading rules read, so left as they are
        "documents_read_by_current_rules": sum(1 for d in plan.skipped if d["reason"] == "read_by_current_rules"),
        "documents_quarantined": len(quarantined),
        "documents_failed": len(failed),
        "documents_deleted": len(sensed.deleted),
        # the retire guard held this run's deletions: how many, of how many, which (some)
        "retire_held": sensed.retire_held.as_dict() if sensed.retire_held else None,
        "pages": sum(r.pages or 0 for r in indexed),
        # of those, the pages this run's extract read; the others were reused from earlier runs
        "pages_read": sum(r.pages_read or 0 for r in indexed),
        "pages_by_backend": dict(sum((Counter(r.pages_by_backend) for r in indexed), Counter())),
        "pages_failed": [{"key": r.key, **p} for r in indexed for p in r.failed_pages],
        "chunks": sum(r.chunks or 0 for r in indexed),
        "ranges": len(plan.ranges),
        "ranges_split": sum(r.ranges_split for r in results),
        # what the indexed documents' OCR cost (pages, tokens, device time, KV cache, price),
        # whichever run read them
        "ocr": usage_summary(merge(OcrUsage.from_dict(r.ocr_usage) for r in indexed if r.ocr_usage),
                             gpu_cost_per_hour),
        "quarantine": [{"key": r.key, "code": r.code, "message": r.message, "record": r.record} for r in quarantined],
        "failed": [{"key": r.key, "code": r.code, "message": r.message, "attempts": r.attempts,
                    "next_attempt_at": r.next_attempt_at} for r in failed],
        # one row per document this run finished: what a user checks first
        "documents": [{"key": r.key, "status": r.status.value, "pages": r.pages, "pages_read": r.pages_read,
                       "ocr_pages": r.ocr_pages,
                       "failed_pages": len(r.failed_pages), "ranges_split": r.ranges_split,
                       "extract_seconds": r.extract_seconds, "index_seconds": r.seconds, "code": r.code,
                       "pages_by_backend": r.pages_by_backend, "searchable_seconds": r.searchable_seconds,
                       "ocr": _ocr(r.ocr_usage, gpu_cost_per_hour)}
                      for r in plan.quarantined + results],
        "limits": plan.limits,
        # what the retention sweep removed (None: the sweep failed)
        "retention": swept.as_dict() if swept else None,
        "seconds": seconds,
        # when the run ended: the exporter's "last successful run" and its series' order
        "finished_at": now_iso(),
    }


def _ocr(usage: dict[str, Any] | None, gpu_cost_per_hour: float | None) -> dict[str, Any] | None:
    return None if usage is None else usage_summary(OcrUsage.from_dict(usage), gpu_cost_per_hour)


def save_summary(store: ObjectStore, bucket: str, run_id: str, summary: dict[str, Any]) -> None:
    """The run's summary, then its marker under ``runs-finished/`` (what the exporter lists)."""
    store.put_json(bucket, ArtifactKeys.run_summary(run_id), summary)
    store.put_json(bucket, ArtifactKeys.run_finished(summary["finished_at"], run_id), {"run_id": run_id})


def report(ctx: Context, run_id: str, sensed: Sensed, plan: Plan, results: list[DocumentResult],
           seconds: float | None = None, swept: Swept | None = None) -> dict[str, Any]:
    summary = summarize(run_id, sensed, plan, results, seconds, ctx.settings.gpu_cost_per_hour, swept)
    # the tasks that finished before this one (report and alert record theirs afterwards)
    summary["peak_rss_mb"] = peak_by_task(run_usage(ctx, run_id))
    save_summary(ctx.store, ctx.artifacts, run_id, summary)
    # the OCR totals stay in the log line (a dozen numbers); the per-document rows do not
    log.info("run summary: %s", {k: v for k, v in summary.items()
                                 if k not in ("quarantine", "failed", "limits", "documents", "peak_rss_mb",
                                              "retention")})
    return summary
