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
5. **report** writes the run summary and fails the run if any document failed.

Trigger by hand with `prefix` to limit the run, and `force` to re-plan unchanged
documents (a backfill).
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

# Parse-time cost must stay near zero: no clients, no heavy imports, no network here.
SCHEDULE = os.environ.get("KB_SCHEDULE", "*/5 * * * *") or None


def _steps():
    from kb.pipeline import Steps
    from kb.settings import PipelineSettings
    from kb_airflow.hooks import ObjectStoreHook

    return Steps(ObjectStoreHook().store, PipelineSettings())


@dag(
    dag_id="kb_ingest",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one run at a time owns the ledger
    default_args={"retries": 1, "retry_delay": timedelta(seconds=15)},
    params={
        "prefix": Param("", type="string", description="only objects whose key starts with this"),
        "force": Param(False, type="boolean", description="re-plan unchanged documents (backfill)"),
    },
    tags=["kb", "ingest"],
    doc_md=__doc__,
)
def kb_ingest():
    @task
    def sense(params=None) -> dict:
        return _steps().sense(prefix=params["prefix"], force=params["force"])

    @task
    def retire(sensed: dict, run_id=None) -> int:
        return _steps().retire(sensed["deleted"], run_id)

    @task
    def plan(sensed: dict, run_id=None) -> dict:
        return _steps().plan(sensed["todo"], run_id)

    # Airflow maps only over a task's whole return value, so the plan's two lists are
    # picked out by a trivial task each.
    @task
    def pick(planned: dict, part: str) -> list:
        return planned[part]

    @task(pool="gpu_ocr", queue="gpu", retries=2)
    def extract(rng: dict, run_id=None) -> str | None:
        steps = _steps()
        if steps.settings.ocr_mode == "service":
            from kb_airflow.hooks import OcrServiceHook

            client = OcrServiceHook().client
            return steps.extract(rng, extractor=lambda data, first, last: client.parse(data, first, last), run_id=run_id)
        return steps.extract(rng, run_id=run_id)

    # all_done: one document's failed range must not keep the others out of the index;
    # indexing notices the missing range and records that document's failure in the ledger.
    @task(trigger_rule="all_done")
    def index(batch: list, run_id=None) -> list:
        return _steps().index_batch(batch, run_id)

    @task(trigger_rule="all_done", retries=0)
    def report(sensed: dict, planned: dict, indexed, run_id=None, dag_run=None):
        from airflow.sdk.exceptions import AirflowFailException

        results = [r for i in range(len(indexed or [])) for r in (indexed[i] or [])]
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


kb_ingest()
