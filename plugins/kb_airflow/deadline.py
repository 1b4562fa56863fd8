"""The searchable-within promise as an Airflow deadline alert on ``kb_ingest``.

``searchable_deadline()`` builds the ``DeadlineAlert`` for the DAG file: reference
``DAGRUN_QUEUED_AT``, interval ``KB_SEARCHABLE_WITHIN_S`` (``PipelineSettings``), and a
``SyncCallback`` naming ``searchable_deadline_missed`` by its import path.

When a run is still unfinished at its deadline, Airflow's scheduler marks the deadline missed
and queues the callback; a ``SyncCallback`` runs on the executor (a LocalExecutor process
locally, a Celery worker in compose), in a supervised process that may read connections, as
a task does, with one limit in Airflow 3.3: its token is a workload token, which the
Execution API refuses for connections, so only connections set as ``AIRFLOW_CONN_*`` in the
worker's environment resolve (compose and ``kb up`` set them so; a missing one is "not
configured" and the record is still written). An ``AsyncCallback`` would run in the
triggerer's event loop instead, where the blocking SMTP, webhook and S3 calls below would
stall the inbox watcher. A run that succeeds
before its deadline has the deadline deleted (Airflow prunes it), so it never alerts; a run
that fails stays unfinished for the promise's purpose and alerts at its deadline.

This module is imported when the DAG is parsed (Airflow checks that the callback's path
imports), so it imports nothing heavy at the top: the work happens inside the callback.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

CALLBACK = f"{__name__}.searchable_deadline_missed"


def searchable_deadline(promise_s: float | None = None):
    """The ``DeadlineAlert`` for ``@dag(deadline=...)``: the promise from ``PipelineSettings``
    unless given. The promise also travels in the callback's kwargs, so the alert states the
    interval its deadline was computed with, even after the setting changed."""
    from datetime import timedelta

    from airflow.sdk import DeadlineAlert, DeadlineReference, SyncCallback

    if promise_s is None:
        from kb.settings import PipelineSettings

        promise_s = PipelineSettings().searchable_within_s
    return DeadlineAlert(
        # Queued, not the logical date: the inbox watcher starts a run within seconds of a
        # landing (its logical date is then), but a cron run's logical date is the start of
        # its interval, and a run waiting behind another (max_active_runs=1) is queued at
        # the event. Queued-at is the latest moment a document that landed before it could
        # have been seen, so it never charges a run for time before it existed.
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=promise_s),
        callback=SyncCallback(CALLBACK, kwargs={"promise_s": promise_s}),
        name="searchable_within",
    )


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def missed_from_context(context: dict[str, Any], promise_s: float):
    """The ``DeadlineMissed`` for the context Airflow gives a deadline callback:
    ``{"dag_run": <the REST API's DAG run, as JSON>, "deadline": {"id", "deadline_time"}}``."""
    import pendulum

    from kb.pipeline.alerts import DeadlineMissed

    run = context.get("dag_run") or {}
    deadline = context.get("deadline") or {}
    now = pendulum.now("UTC")
    queued_at = run.get("queued_at")
    running_s = None
    if queued_at:
        queued = queued_at if hasattr(queued_at, "isoformat") else pendulum.parse(str(queued_at))
        running_s = round((now - queued).total_seconds(), 1)
    conf = run.get("conf") or {}
    return DeadlineMissed(
        dag_id=str(run.get("dag_id") or "?"),
        run_id=str(run.get("dag_run_id") or run.get("run_id") or "?"),
        promise_s=float(promise_s),
        queued_at=_iso(queued_at),
        start_date=_iso(run.get("start_date")),
        deadline_time=_iso(deadline.get("deadline_time")),
        missed_at=now.isoformat(),
        running_s=running_s,
        state=run.get("state"),
        prefix=conf.get("prefix") if isinstance(conf, dict) else None,
    )


def searchable_deadline_missed(context: dict[str, Any], promise_s: float) -> None:
    """The deadline callback: one alert on each configured channel, and a record under
    ``alerts/deadline-missed/<run>.json`` in the artifacts bucket, channels or not."""
    from kb.pipeline import Context
    from kb.pipeline.alerts import send_deadline_alert
    from kb_airflow.hooks import ObjectStoreHook
    from kb_airflow.notifiers import configured_channels, send

    missed = missed_from_context(context, promise_s)
    log.warning("run %s of %s missed its promise (%.0f s after it was queued)", missed.run_id, missed.dag_id,
                promise_s)
    ctx = Context(ObjectStoreHook().store)
    send_deadline_alert(ctx, missed, configured_channels(), lambda *message: send(*message, context))
