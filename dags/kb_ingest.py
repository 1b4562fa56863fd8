"""
### kb_ingest

New and changed documents in the `inbox` bucket become searchable chunks in Qdrant.

1. **sense** lists the bucket and compares it with the ledger (ETag/version, then sha256).
2. **plan** opens each document once, quarantines bad input, classifies pages and cuts
   page ranges that fit the limits the OCR service publishes (pages, bytes, time).
3. **extract** runs once per page range in pool `gpu_ocr`, queue `gpu`; a range the service
   refuses for a limit is split down to single pages; results go to the artifacts bucket
   and only their keys travel through XCom.
4. **index** (one per batch of documents) checks page coverage, chunks, embeds and upserts with
   deterministic ids, then drops the previous version's points.
   Great Expectations gates the pages (before chunking) and the chunks (before upsert); a
   document that fails a gate is quarantined and its older indexed version stays searchable.
5. **retire** drops the documents gone from the inbox, at most `KB_MAX_RETIRE_SHARE` of the
   indexed ones under the prefix unless the run is forced; past that it retires none and
   alerts once (the retire guard: an empty or partial listing must not empty the index).
6. **sweep** removes the artifacts of deleted and superseded versions once they are
   `KB_ARTIFACT_RETENTION_DAYS` old (page results, quarantine folders, old inbox versions),
   a bounded number per run; records stay.
7. **report** writes the run summary and fails the run if any document failed, or if there is
   no plan (sense or plan failed for good; that task has alerted, report adds no alert).
8. **alert** sends one e-mail and one webhook call per quarantined document, and per document
   indexed without some pages (connections `kb_alerts_smtp`, `kb_alerts_webhook`); a task
   that fails for good alerts once as well.

Runs on the cron `KB_SCHEDULE` and, with `KB_WATCH_INBOX=true`, also within seconds of a change
in the inbox (the asset `s3://<inbox>`, whose watcher lists the bucket from the triggerer).

**Promise:** a document is searchable within `KB_SEARCHABLE_WITHIN_S` (default 3600 s) of landing.
It is an Airflow deadline alert, counted from when the run was queued: with the inbox watcher a
run is queued within seconds of a landing, and with the cron alone the promise counts from the
run that picks the document up (a landing waits up to one cron interval before that). A run not
finished by then alerts once on the channels above and leaves `alerts/deadline-missed/<run>.json`
in the artifacts bucket; Airflow lists its deadlines with the run.

Trigger by hand with `prefix` to limit the run, `force` to re-index unchanged documents
(a backfill; page results are reused) and to retire past the retire guard, `reread` to read
again the pages whose stored results an older version of the engine's reading rules wrote
(`extraction_version`), or another OCR model than the service's now (`ocr_model`), and
re-index their documents (the others keep their points), and
`quality` to override data-quality thresholds for this run.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

from kb_airflow.names import INGEST_DAG_ID, OCR_POOL, OCR_QUEUE

# Parse-time cost must stay near zero: no clients, no heavy imports, no network here.


def _schedule():
    """``KB_SCHEDULE``'s cron (None when empty: manual runs only). With ``KB_WATCH_INBOX`` the
    inbox bucket is an asset too, whose watcher (in the triggerer) starts a run within seconds
    of a change; the cron stays as the reconciliation pass. Events that arrive while a run is
    active become one queued run (max_active_runs=1)."""
    from kb.settings import PipelineSettings, WatchSettings

    pipeline, watch = PipelineSettings(), WatchSettings()
    cron = pipeline.schedule or None
    if not watch.inbox:
        return cron
    from airflow.sdk import Asset, AssetOrTimeSchedule, AssetWatcher, CronTriggerTimetable

    from kb_airflow.triggers import InboxChangeTrigger

    trigger = InboxChangeTrigger(pipeline.inbox_bucket, interval_s=watch.interval_s, max_delay_s=watch.max_delay_s)
    inbox = Asset(uri=f"s3://{pipeline.inbox_bucket}",
                  watchers=[AssetWatcher(name="kb_inbox_watcher", trigger=trigger)])
    if cron is None:
        return [inbox]
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=[inbox])


SCHEDULE = _schedule()


def _retry_delay_s() -> float:
    from kb.settings import PipelineSettings

    return PipelineSettings().retry_delay_s


RETRY_DELAY_S = _retry_delay_s()


def _context(params=None):
    from kb.pipeline import Context
    from kb.settings import PipelineSettings, QualitySettings
    from kb_airflow.hooks import ObjectStoreHook

    quality = QualitySettings.with_overrides((params or {}).get("quality"))
    return Context(ObjectStoreHook().store, PipelineSettings(), quality)


def _require_plan(planned, *, decides_the_run: bool = False) -> None:
    """Report and alert run after failures too, but without a plan there is nothing to report,
    and the task that failed (sense or plan) has alerted already. ``alert`` skips. ``report``
    fails, without a second alert: it is the leaf that decides the run's state, and when it
    skipped, a run whose plan had failed ended "success"."""
    if planned is not None:
        return
    message = "no plan: sense or plan failed (and alerted); nothing to report"
    if decides_the_run:
        from kb_airflow.notifiers import AlreadyAlerted

        raise AlreadyAlerted(message)
    from airflow.sdk.exceptions import AirflowSkipException

    raise AirflowSkipException(message)


def _results(indexed) -> list:
    """The per-document results of every index task, flattened (a failed task gave none)."""
    from kb.pipeline.messages import DocumentResult

    return [DocumentResult.from_dict(r) for i in range(len(indexed or [])) for r in (indexed[i] or [])]


def _on_failure():
    from kb_airflow.notifiers import TaskFailureNotifier

    return [TaskFailureNotifier()]


def _on_success():
    from kb_airflow.usage import record_task_usage

    return [record_task_usage]


def _deadline():
    """The searchable-within promise (``KB_SEARCHABLE_WITHIN_S``) as a deadline alert counted from
    DAGRUN_QUEUED_AT: the watcher queues a run within seconds of a landing, and the cron's logical
    date is the start of its interval, which would charge a run for time before the document
    existed. The callback (kb_airflow.deadline) is named by import path and runs on the executor."""
    from kb_airflow.deadline import searchable_deadline

    return searchable_deadline()


@dag(
    dag_id=INGEST_DAG_ID,
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one run at a time owns the ledger
    deadline=_deadline(),  # searchable within KB_SEARCHABLE_WITHIN_S of being queued, or alert
    # on_failure_callback runs once a task has failed for good, not on each retry
    default_args={"retries": 1, "retry_delay": timedelta(seconds=RETRY_DELAY_S), "on_failure_callback": _on_failure(),
                  # records each task process's peak memory (runs/<run>/tasks/) for the run summary
                  "on_success_callback": _on_success()},
    params={
        "prefix": Param("", type="string", description="only objects whose key starts with this"),
        "force": Param(False, type="boolean",
                       description="re-index unchanged documents (backfill); retire past the retire guard"),
        "reread": Param(False, type="boolean",
                        description="read again the pages an older version of the engine's reading rules "
                                    "read, and the scanned pages another OCR model read (after an upgrade or a "
                                    "model switch), and re-index their documents; the others are kept"),
        "quality": Param({}, type="object",
                         description='data-quality threshold overrides, e.g. {"max_empty_page_share": 0.8}'),
    },
    tags=["kb", "ingest"],
    doc_md=__doc__,
)
def kb_ingest():
    @task
    def sense(params=None) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from kb.errors import BadParams
        from kb.pipeline.sense import sense

        try:
            ctx = _context(params)
        except BadParams as exc:  # a retry cannot fix the run's params
            raise AirflowFailException(str(exc)) from exc
        return sense(ctx, prefix=params["prefix"], force=params["force"], reread=params["reread"]).as_dict()

    @task
    def retire(sensed: dict, run_id=None) -> int:
        from kb.pipeline.index import retire
        from kb.pipeline.messages import Sensed

        ctx, sensed_ = _context(), Sensed.from_dict(sensed)
        if sensed_.retire_held is not None:  # the retire guard held: alert once per held set
            from airflow.sdk import get_current_context

            from kb.pipeline.alerts import send_retire_held_alert
            from kb_airflow.notifiers import configured_channels, send

            context = get_current_context()
            send_retire_held_alert(ctx, sensed_.retire_held, configured_channels(),
                                   lambda *message: send(*message, context), run_id)
        return retire(ctx, sensed_.deleted, run_id)

    @task
    def plan(sensed: dict, run_id=None) -> dict:
        from kb.pipeline.messages import Sensed
        from kb.pipeline.plan import plan
        from kb_airflow.hooks import range_limits

        ctx = _context()
        return plan(ctx, Sensed.from_dict(sensed), run_id, range_limits(ctx.settings)).as_dict()

    # Airflow maps only over a task's whole return value, so the plan's two lists are
    # picked out by a trivial task each.
    @task
    def pick(planned: dict, part: str) -> list:
        return planned[part]

    @task(pool=OCR_POOL, queue=OCR_QUEUE, retries=2)
    def extract(rng: dict, run_id=None, params=None) -> str | None:
        from kb.pipeline.extract import extract
        from kb.pipeline.messages import PageRange
        from kb_airflow.hooks import range_extractor

        ctx = _context(params)
        return extract(ctx, PageRange.from_dict(rng), range_extractor(ctx.settings), run_id=run_id)

    # all_done: one document's failed range must not keep the others out of the index;
    # indexing notices the missing range and records that document's failure in the ledger.
    @task(trigger_rule="all_done")
    def index(batch: list, run_id=None, params=None) -> list:
        from kb.pipeline.index import index_batch
        from kb.pipeline.messages import PlannedDocument

        documents = [PlannedDocument.from_dict(d) for d in batch]
        return [r.as_dict() for r in index_batch(_context(params), documents, run_id)]

    # One alert per quarantined document version (bad input, a failed gate, a refusal by the
    # OCR service) and per version indexed without some pages; retried on its own, and a
    # retry sends only what did not go out.
    @task(trigger_rule="all_done", retries=3)
    def alert(planned: dict, indexed, run_id=None) -> dict:
        from airflow.sdk import get_current_context

        from kb.pipeline.messages import Plan
        from kb_airflow.notifiers import send_document_alerts

        _require_plan(planned)
        results = Plan.from_dict(planned).quarantined + _results(indexed)
        return send_document_alerts(_context(), results, get_current_context(), run_id)

    # After retire and index, whatever they did: retention does not wait for a clean run.
    @task(trigger_rule="all_done")
    def sweep() -> dict:
        from kb.pipeline.retention import sweep

        return sweep(_context()).as_dict()

    @task(trigger_rule="all_done", retries=0)
    def report(sensed: dict, planned: dict, indexed, swept=None, run_id=None, dag_run=None):
        from airflow.sdk.exceptions import AirflowFailException

        from kb.pipeline.messages import Plan, Sensed, Swept
        from kb.pipeline.report import report

        _require_plan(planned, decides_the_run=True)
        results = _results(indexed)
        seconds = None
        if dag_run is not None and dag_run.start_date is not None:
            seconds = round((pendulum.now("UTC") - dag_run.start_date).total_seconds(), 2)
        plan_ = Plan.from_dict(planned)
        summary = report(_context(), run_id, Sensed.from_dict(sensed), plan_, results, seconds=seconds,
                         swept=Swept.from_dict(swept) if swept else None)
        unfinished = len(plan_.documents) - len(results)
        if summary["documents_failed"] or unfinished:
            raise AirflowFailException(
                f"{summary['documents_failed']} document(s) failed and {unfinished} did not finish; "
                "the ledger retries them in a later run, after a backoff"
            )
        return summary

    sensed = sense()
    retired = retire(sensed)
    planned = plan(sensed)
    batches = pick.override(task_id="batches")(planned, "batches")
    extracted = extract.expand(rng=pick.override(task_id="ranges")(planned, "ranges"))
    indexed = index.expand(batch=batches)
    extracted >> indexed
    # A teardown, so that it does not decide the run's state: before it, a failed sense left
    # retire upstream-failed as a leaf and the run failed; with sweep after retire as a plain
    # task, the run ended "success" (tests/integration/test_quality_alerts.py).
    swept = sweep().as_teardown()
    [retired, indexed] >> swept
    report(sensed, planned, indexed, swept)
    alert(planned, indexed)


kb_ingest()
