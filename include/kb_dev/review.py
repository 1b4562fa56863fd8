"""The review queue from outside Airflow: what waits for a decision, and making one through
Airflow's REST API (the ``kb_review`` DAG's human-in-the-loop task), so that the decision is
Airflow's record as much as the ledger's and its author is the REST user.

The queue itself is the ledger's (``Ledger.pending_reviews``); a ``kb_review`` run exists
only once someone starts deciding about a document.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from kb.decisions import Decision
from kb.errors import NotUnderReview
from kb_airflow.names import INGEST_DAG_ID, REVIEW_DAG_ID, REVIEW_DECIDE_TASK
from kb_dev.airflow_api import AirflowClient, HitlRequest, HitlResponse, RunOutcome
from kb_dev.errors import AirflowApiError, AirflowNotFound


@dataclass(frozen=True)
class Decided:
    key: str
    decision: Decision
    review_run_id: str
    response: HitlResponse


def waiting_requests(client: AirflowClient) -> dict[str, HitlRequest]:
    """The ``kb_review`` runs waiting for an answer, by document key (the run's ``key`` param)."""
    found: dict[str, HitlRequest] = {}
    for request in client.hitl_requests(REVIEW_DAG_ID, waiting=True):
        if request.task_id != REVIEW_DECIDE_TASK:
            continue
        key = (client.dag_run(REVIEW_DAG_ID, request.run_id).get("conf") or {}).get("key")
        if key:
            found.setdefault(key, request)
    return found


def request_for(client: AirflowClient, key: str, timeout_s: float = 180.0, poll_s: float = 1.0) -> HitlRequest:
    """The waiting ``decide`` task for ``key``: one already open, else a new ``kb_review`` run's,
    once it asks. NotUnderReview when the run finds nothing to decide."""
    open_ = waiting_requests(client).get(key)
    if open_ is not None:
        return open_
    client.wait_for_dag(REVIEW_DAG_ID)
    run_id = client.trigger(REVIEW_DAG_ID, {"key": key})
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = client.hitl_requests(REVIEW_DAG_ID, run_id, waiting=True)
        if waiting:
            return waiting[0]
        state = client.dag_run(REVIEW_DAG_ID, run_id)["state"]
        if state in ("failed", "success"):
            raise NotUnderReview(f"{key}: kb_review run {run_id} ended {state} without asking; "
                                 "is the document's current version quarantined? (`kb review list`)")
        if time.monotonic() > deadline:
            raise AirflowApiError(f"kb_review run {run_id} did not ask for a decision within {timeout_s:.0f}s")
        time.sleep(poll_s)


def _parked(client: AirflowClient, request: HitlRequest, deadline: float, poll_s: float = 0.5) -> None:
    """Wait until ``request``'s task is parked for an answer."""
    while _task_state(client, request) != "awaiting_input":
        if time.monotonic() > deadline:
            raise AirflowApiError(f"{request.dag_id} run {request.run_id}: {request.task_id} never waited for an "
                                  "answer in time")
        time.sleep(poll_s)


def _task_state(client: AirflowClient, request: HitlRequest) -> str | None:
    for ti in client.task_instances(request.dag_id, request.run_id):
        if (ti["task_id"], ti.get("map_index", -1)) == (request.task_id, request.map_index):
            return ti["state"]
    return None


def _settled(client: AirflowClient, request: HitlRequest, deadline: float, poll_s: float = 0.5) -> HitlRequest | None:
    """After an answer: None once the task took it (succeeded); the new request when the task
    asks again instead. Airflow 3.3.2 loses an answer given before the scheduler has handled
    the exit of the worker that parked the task (the task fails as "changed externally"); the
    decide task then retries (``kb_airflow.review``) and asks again, and is answered again."""
    while True:
        state = _task_state(client, request)
        if state == "success":
            return None
        if state in ("failed", "upstream_failed"):
            raise AirflowApiError(f"{request.dag_id} run {request.run_id}: {request.task_id} ended {state} after "
                                  "the answer; see its task log")
        if state == "awaiting_input":
            again = client.hitl_requests(request.dag_id, request.run_id, waiting=True)
            if again:
                return again[0]
        if time.monotonic() > deadline:
            raise AirflowApiError(f"{request.dag_id} run {request.run_id}: {request.task_id} did not take the answer "
                                  "in time")
        time.sleep(poll_s)


def decide(client: AirflowClient, key: str, decision: Decision | str, quality: dict[str, Any] | None = None,
           version: str | None = None, timeout_s: float = 180.0, echo: Callable[[str], None] = print) -> Decided:
    """Answer ``key``'s review through the REST API (starting a ``kb_review`` run if none waits),
    about ``version`` (the one the reviewer saw; None: the one the review request shows). It
    answers when the task is parked, and again if Airflow loses the answer: conditions, not
    a clock."""
    decision = Decision(decision)
    deadline = time.monotonic() + timeout_s
    with client.within(timeout_s):
        request: HitlRequest | None = request_for(client, key, timeout_s)
        while True:
            _parked(client, request, deadline)
            # the task's form has exactly these params; an answer must give each of them
            response = client.respond(request, [str(decision)], {"quality": dict(quality or {}),
                                                                 "version": version or ""})
            again = _settled(client, request, deadline)
            if again is None:
                return Decided(key, decision, request.run_id, response)
            echo(f"Airflow lost the answer (its task asked again, try {again.created_at}); answering again")
            request = again


def follow_through(client: AirflowClient, decided: Decided, timeout_s: float,
                   echo: Callable[[str], None] = print) -> RunOutcome | None:
    """Wait for the review run to end, then for the ``kb_ingest`` run it triggered (None for
    a decision that triggers none)."""
    progress = client.follow(REVIEW_DAG_ID, decided.review_run_id, timeout_s=timeout_s, echo=echo)
    if progress.state != "success":
        raise AirflowApiError(f"kb_review run {decided.review_run_id} ended {progress.state}; see its task logs "
                              "(a newer version that landed meanwhile is refused: `kb review list`)")
    if not decided.decision.reopens:
        return None
    try:
        ingest_run = client.xcom(REVIEW_DAG_ID, decided.review_run_id, "reindex", key="trigger_run_id")
    except AirflowNotFound:
        raise AirflowApiError(f"kb_review run {decided.review_run_id} triggered no kb_ingest run") from None
    if isinstance(ingest_run, str) and ingest_run.startswith('"'):  # a JSON-encoded string
        ingest_run = json.loads(ingest_run)
    echo(f"following {INGEST_DAG_ID} run {ingest_run}")
    ended = client.follow(INGEST_DAG_ID, ingest_run, timeout_s=timeout_s, echo=echo)
    summary = None
    try:
        summary = client.xcom(INGEST_DAG_ID, ingest_run, "report")
    except AirflowApiError:
        pass
    return RunOutcome(ingest_run, ended.state, summary)
