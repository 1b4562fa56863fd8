"""A success callback that records the task process's peak memory (``kb.pipeline.usage``).

Airflow 3 runs task callbacks in the task's own process, after the task, so the peak it
reads is the task's. A record that cannot be written is logged, never fails the task.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def record_task_usage(context) -> None:
    from kb.pipeline import Context
    from kb.pipeline.usage import record_task_usage as record
    from kb.settings import PipelineSettings, QualitySettings
    from kb_airflow.hooks import ObjectStoreHook

    ti = context["ti"]
    try:
        ctx = Context(ObjectStoreHook().store, PipelineSettings(), QualitySettings())
        usage = record(ctx, context["run_id"], ti.task_id, ti.map_index if ti.map_index >= 0 else None)
        log.info("peak RSS of this task process: %.1f MB", usage["peak_rss_mb"])
    except Exception:  # noqa: BLE001 - a measurement must not fail the task it measures
        log.exception("recording the task's peak memory failed")
