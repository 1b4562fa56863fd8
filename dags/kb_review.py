"""
### kb_review

A reviewer decides what happens to one quarantined document (param `key`, its inbox key).

1. **pending** reads the document's ledger entry: why and when its current version was
   quarantined (fails when it is not quarantined, or when that version has a decision no run
   has taken up yet: there is nothing to decide).
2. **decide** is a human-in-the-loop task (Airflow's `HITLOperator`): the reviewer picks one of
   - `accept`: index the pages that passed (the pages gate is not applied to this version),
   - `reextract-ocr`: read every page with the OCR backend, none from its text layer,
   - `reextract-limits`: read it again, failed pages too, with the quality thresholds in `quality`,
   - `drop`: leave it out of the index; it leaves the review queue,

   and may set `quality` (threshold overrides for this document alone, e.g.
   `{"max_empty_page_share": 0.9}`). Answer it in the UI (Browse → Required actions) or with
   `kb review decide KEY DECISION`, which records the decision in the ledger before it answers
   (`kb_review_given`): a try that starts with a decision given to its run takes it from there
   instead of asking, so an answer Airflow loses is applied by the retry. Only the users in
   `KB_REVIEW_REVIEWERS` may answer, when it names any. No answer within
   `KB_REVIEW_ANSWER_TIMEOUT_S` (3 days) fails the run saying so; the document stays
   quarantined and in the queue.
3. **act** writes the decision, who made it and when to the ledger (`kb_review_decisions`),
   for the version the reviewer was shown (`version`): if a newer version landed meanwhile,
   the decision is refused and the newer one waits in the queue; if another review run's
   decision about the version applied first, this one is refused (one decision per version).
   Every decision but `drop` makes the version due again.
4. **reindex** (skipped for `drop`) triggers `kb_ingest` on the document's key; its plan,
   extract and index stages read the decision from the ledger.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import Param, dag, task

from kb.decisions import Decision
from kb.settings import ReviewSettings
from kb_airflow.names import INGEST_DAG_ID, REVIEW_ACT_TASK, REVIEW_DAG_ID, REVIEW_DECIDE_TASK
from kb_airflow.review import ReviewDecisionOperator

# Parse-time cost must stay near zero: no clients, no heavy imports, no network here.

DECISIONS = [d.value for d in Decision]
REVIEW = ReviewSettings()


def _ledger():
    from kb.ledger_db import Ledger
    from kb.settings import PipelineSettings

    settings = PipelineSettings()
    return Ledger.for_settings(settings), settings


@dag(
    dag_id=REVIEW_DAG_ID,
    schedule=None,  # one run per document to decide: `kb review decide`, or by hand in the UI
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"key": Param("", type="string", minLength=1, description="the quarantined document's inbox key")},
    tags=["kb", "review"],
    doc_md=__doc__,
)
def kb_review():
    @task
    def pending(params=None) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from kb.ledger import Status, doc_id_for

        ledger, settings = _ledger()
        key = params["key"]
        entry = ledger.get(doc_id_for(settings.inbox_bucket, key))
        if entry is None or entry.status != Status.QUARANTINED:
            raise AirflowFailException(f"{key} is {entry.status if entry else 'not in the ledger'}, not quarantined: "
                                       "nothing to decide")
        if (decided := entry.pending_decision) is not None:  # one decision per version: ask nobody again
            raise AirflowFailException(f"{key}: this version was decided already ({decided.decision} by "
                                       f"{decided.decided_by}, kb_review run {decided.review_run_id})")
        from kb import channels

        error = entry.error or {}
        version = entry.sha256 or entry.version_id or entry.etag
        return {
            "key": key, "doc_id": entry.doc_id, "code": error.get("code"), "message": error.get("message"),
            "record": error.get("record"), "since": entry.updated_at, "run_id": entry.run_id,
            "version_id": entry.version_id, "etag": entry.etag, "version": version,
            # what the request's Markdown shows, as text: a key or message cannot become markup there
            "md": {name: channels.markdown_text(value) for name, value in {
                "key": key, "code": error.get("code"), "message": error.get("message"), "record": error.get("record"),
                "run_id": entry.run_id, "since": entry.updated_at, "version": version}.items()},
        }

    decide = ReviewDecisionOperator(
        task_id=REVIEW_DECIDE_TASK,
        subject="Quarantined: {{ ti.xcom_pull(task_ids='pending')['md']['key'] }}",
        body=("**{{ ti.xcom_pull(task_ids='pending')['md']['key'] }}** (version "
              "{{ ti.xcom_pull(task_ids='pending')['md']['version'] }}) was quarantined by run "
              "{{ ti.xcom_pull(task_ids='pending')['md']['run_id'] }} "
              "at {{ ti.xcom_pull(task_ids='pending')['md']['since'] }}.\n\n"
              "**{{ ti.xcom_pull(task_ids='pending')['md']['code'] }}**: "
              "{{ ti.xcom_pull(task_ids='pending')['md']['message'] }}\n\n"
              "Quarantine record: {{ ti.xcom_pull(task_ids='pending')['md']['record'] }} in the artifacts bucket.\n\n"
              "- `accept`: index the pages that passed\n"
              "- `reextract-ocr`: read every page with the OCR backend\n"
              "- `reextract-limits`: read again with the thresholds in `quality`\n"
              "- `drop`: leave it out of the index"),
        options=DECISIONS,
        params={"quality": Param({}, type="object",
                                 description='threshold overrides for this document, e.g. {"max_empty_page_share": 0.9}'),
                "version": Param("", type="string",
                                 description="the version you decide about (sha256, ETag or version id); empty: the "
                                             "one shown above")},
        response_timeout=timedelta(seconds=REVIEW.answer_timeout_s),
        # only these users may answer (Airflow answers anyone else 403); None: anyone it lets
        assigned_users=[{"id": name, "name": name} for name in REVIEW.reviewers] or None,
    )

    @task(task_id=REVIEW_ACT_TASK)
    def act(pending: dict, decided: dict, run_id=None) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from kb.errors import BadParams, NotUnderReview
        from kb.settings import QualitySettings

        ledger, _ = _ledger()
        [decision] = decided["chosen_options"]
        params = dict(decided.get("params_input") or {})
        try:
            QualitySettings.with_overrides(params.get("quality"))  # refused here, not in kb_ingest
        except BadParams as exc:
            ledger.withdraw(run_id)  # a refused decision leaves nothing given behind
            raise AirflowFailException(str(exc)) from exc
        user = decided.get("responded_by_user") or {}
        at = decided.get("responded_at")
        at = at.isoformat(timespec="seconds") if hasattr(at, "isoformat") else (str(at) if at else None)
        version = params.pop("version", None) or pending["version"]
        try:
            row = ledger.decide(pending["doc_id"], decision, decided_by=user.get("name") or user.get("id") or "unknown",
                                decided_at=at, params=params, review_run_id=run_id, version=version)
        except NotUnderReview as exc:  # another version landed, another run's decision applied first, ...
            ledger.withdraw(run_id)
            raise AirflowFailException(str(exc)) from exc
        return {"key": row.key, "decision": str(row.decision), "decided_by": row.decided_by,
                "decided_at": row.decided_at, "reopens": row.decision.reopens}

    @task.short_circuit
    def reopens(acted: dict) -> bool:
        return acted["reopens"]

    reindex = TriggerDagRunOperator(
        task_id="reindex",
        trigger_dag_id=INGEST_DAG_ID,
        conf={"prefix": "{{ params.key }}"},
        wait_for_completion=False,
    )

    found = pending()
    acted = act(found, decide.output)
    found >> decide
    reopens(acted) >> reindex


kb_review()
