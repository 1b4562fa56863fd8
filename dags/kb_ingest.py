"""
### kb_ingest

New and changed documents in the `inbox` bucket become searchable chunks in Qdrant.

1. **sense** lists the bucket and compares it with the ledger (ETag/version, then sha256).
2. **plan** opens each document once, quarantines bad input, classifies pages and cuts
   page ranges.
3. **extract** runs once per page range in pool `gpu_ocr`, queue `gpu`; results go to the
   artifacts bucket and only their keys travel through XCom.
4. **index** (one per batch of documents) checks page coverage, chunks, embeds and upserts with
   deterministic ids, then drops the previous version's points.
   Great Expectations gates the pages (before chunking) and the chunks (before upsert); a
   document that fails a gate is quarantined and its older indexed version stays searchable.
5. **report** writes the run summary and fails the run if any document failed.
6. **alert** sends one e-mail and one webhook call per quarantined document (connections
   `kb_alerts_smtp`, `kb_alerts_webhook`); a task that fails for good alerts once as well.

Trigger by hand with `prefix` to limit the run, `force` to re-index unchanged documents
(a backfill; page results are reused), and `quality` to override data-quality thresholds
for this run.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

# Parse-time cost must stay near zero: no clients, no heavy imports, no network here.
SCHEDULE = os.environ.get("KB_SCHEDULE", "*/5 * * * *") or None


RETRY_DELAY_S = float(os.environ.get("KB_RETRY_DELAY_S", "15"))


def _steps(params=None):
    from kb.pipeline import Steps
    from kb.settings import PipelineSettings, QualitySettings
    from kb_airflow.hooks import ObjectStoreHook

    quality = QualitySettings.with_overrides((params or {}).get("quality"))
    return Steps(ObjectStoreHook().store, PipelineSettings(), quality)


def _require_plan(planned) -> None:
    """Report and alert run after failures too, but without a plan there is nothing to
    report: the task that failed has alerted already, so these skip instead of failing."""
    if planned is None:
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException("no plan: sense or plan failed (and alerted); nothing to report")


def _results(indexed) -> list:
    """The per-document results of every index task, flattened (a failed task gave none)."""
    return [r for i in range(len(indexed or [])) for r in (indexed[i] or [])]


def _on_failure():
    from kb_airflow.notifiers import TaskFailureNotifier

    return [TaskFailureNotifier()]


@dag(
    dag_id="kb_ingest",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one run at a time owns the ledger
    # on_failure_callback runs once a task has failed for good, not on each retry
    default_args={"retries": 1, "retry_delay": timedelta(seconds=RETRY_DELAY_S), "on_failure_callback": _on_failure()},
    params={
        "prefix": Param("", type="string", description="only objects whose key starts with this"),
        "force": Param(False, type="boolean", description="re-index unchanged documents (backfill)"),
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

        try:
            steps = _steps(params)
        except BadParams as exc:  # a retry cannot fix the run's params
            raise AirflowFailException(str(exc)) from exc
        return steps.sense(prefix=params["prefix"], force=params["force"])

    @task
    def retire(sensed: dict, run_id=None) -> int:
        return _steps().retire(sensed["deleted"], run_id)

    @task
    def plan(sensed: dict, run_id=None) -> dict:
        return _steps().plan(sensed["todo"], run_id, force=sensed.get("force", False),
                             signature=sensed.get("index_signature"))

    # Airflow maps only over a task's whole return value, so the plan's two lists are
    # picked out by a trivial task each.
    @task
    def pick(planned: dict, part: str) -> list:
        return planned[part]

    @task(pool="gpu_ocr", queue="gpu", retries=2)
    def extract(rng: dict, run_id=None, params=None) -> str | None:
        steps = _steps(params)
        if steps.settings.ocr_mode == "service":
            from kb_airflow.hooks import OcrServiceHook

            client = OcrServiceHook().client
            return steps.extract(rng, extractor=client.parse, run_id=run_id)
        return steps.extract(rng, run_id=run_id)

    # all_done: one document's failed range must not keep the others out of the index;
    # indexing notices the missing range and records that document's failure in the ledger.
    @task(trigger_rule="all_done")
    def index(batch: list, run_id=None, params=None) -> list:
        return _steps(params).index_batch(batch, run_id)

    # One alert per quarantined document (bad input, a failed gate, a refusal by the OCR
    # service); retried on its own, and a retry sends only what did not go out.
    @task(trigger_rule="all_done", retries=3)
    def alert(planned: dict, indexed, run_id=None) -> dict:
        from airflow.sdk import get_current_context

        from kb_airflow.notifiers import send_document_alerts

        _require_plan(planned)
        results = list(planned.get("quarantined", [])) + _results(indexed)
        return send_document_alerts(_steps(), results, get_current_context(), run_id)

    @task(trigger_rule="all_done", retries=0)
    def report(sensed: dict, planned: dict, indexed, run_id=None, dag_run=None):
        from airflow.sdk.exceptions import AirflowFailException

        _require_plan(planned)
        results = _results(indexed)
        seconds = None
        if dag_run is not None and dag_run.start_date is not None:
            seconds = round((pendulum.now("UTC") - dag_run.start_date).total_seconds(), 2)
        summary = _steps().report(run_id, sensed, planned, results, seconds=seconds)
        unfinished = len(planned["documents"]) - len(results)
        if summary["documents_failed"] or unfinished:
            raise AirflowFailException(
                f"{summary['documents_failed']} document(s) failed and {unfinished} did not finish; "
                "the ledger retries them next run"
            )
        return summary

    sensed = sense()
    retire(sensed)
    planned = plan(sensed)
    batches = pick.override(task_id="batches")(planned, "batches")
    extracted = extract.expand(rng=pick.override(task_id="ranges")(planned, "ranges"))
    indexed = index.expand(batch=batches)
    extracted >> indexed
    report(sensed, planned, indexed)
    alert(planned, indexed)


kb_ingest()
