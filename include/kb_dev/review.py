"""The review queue from outside Airflow: what waits for a decision, and making one through
Airflow's REST API (the ``kb_review`` DAG's human-in-the-loop task), so that the decision is
Airflow's record as much as the ledger's and its author is the REST user.

The queue itself is the ledger's (``Ledger.pending_reviews``); a ``kb_review`` run exists
only once someone starts deciding about a document.

A decision is recorded in the ledger (``Ledger.give``) before Airflow is answered. Airflow
3.3.2 can lose an answer given while the scheduler has not yet handled the exit of the worker
that parked the task (nothing in its API says when it has); the task's retry then takes the
decision from the ledger (``kb_airflow.review``) instead of asking again, so it is answered
once and the decision applies.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from kb.decisions import Decision
from kb.errors import AlreadyDecided, NotUnderReview
from kb.ledger_db import Ledger
from kb_airflow.names import INGEST_DAG_ID, REVIEW_ACT_TASK, REVIEW_DAG_ID, REVIEW_DECIDE_TASK
from kb_dev.airflow_api import AirflowClient, HitlRequest, HitlResponse, RunOutcome
from kb_dev.errors import AirflowApiError, AirflowNotFound, AirflowUnreachable


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
    while _tasks(client, request).get(request.task_id, {}).get("state") != "awaiting_input":
        if time.monotonic() > deadline:
            raise AirflowApiError(f"{request.dag_id} run {request.run_id}: {request.task_id} never waited for an "
                                  "answer in time")
        time.sleep(poll_s)


def _tasks(client: AirflowClient, request: HitlRequest) -> dict[str, dict[str, Any]]:
    """The run's task instances by task id (the ``map_index`` of the request's)."""
    return {ti["task_id"]: ti for ti in client.task_instances(request.dag_id, request.run_id)
            if ti.get("map_index", -1) == request.map_index}


def _may_answer(client: AirflowClient, request: HitlRequest) -> None:
    """Airflow's own rule (403 for a user the task is not assigned to), checked before
    anything is recorded in the ledger."""
    if request.assigned_users and client.username not in request.assigned_users:
        raise AirflowApiError(f"{request.dag_id} run {request.run_id}: only {', '.join(request.assigned_users)} may "
                              f"answer, not {client.username} (KB_REVIEW_REVIEWERS; log in with KB_AIRFLOW_USER)")


def _withdraw_ended(client: AirflowClient, ledger: Ledger, doc_id: str, run_id: str,
                    echo: Callable[[str], None]) -> None:
    """Withdraw the decisions given to other review runs of the document that ended without
    applying them (failed, or marked by hand): they would refuse this one for nothing."""
    for given in ledger.given_for(doc_id):
        if given.review_run_id == run_id:
            continue
        try:
            state = client.dag_run(REVIEW_DAG_ID, given.review_run_id)["state"]
        except AirflowNotFound:
            state = "deleted"
        if state not in ("queued", "running") and ledger.withdraw(given.review_run_id):
            echo(f"withdrew {given.decided_by}'s {given.decision} given to kb_review run {given.review_run_id}, "
                 f"which ended {state} without applying it")


def _applied(client: AirflowClient, ledger: Ledger, doc_id: str, request: HitlRequest, deadline: float,
             poll_s: float = 0.5) -> int:
    """After the answer: wait until the run's ``act`` has applied the decision; the try of the
    decide task that took it (2: Airflow lost the answer and the retry read the ledger).
    Conditions read from Airflow's task states, never a clock."""
    while True:
        tasks = _tasks(client, request)
        decide, act = tasks.get(request.task_id, {}), tasks.get(REVIEW_ACT_TASK, {})
        if act.get("state") == "success":
            return int(decide.get("try_number") or 1)
        for ti in (decide, act):
            if ti.get("state") in ("failed", "upstream_failed"):
                entry = ledger.get(doc_id)
                other = entry.pending_decision if entry is not None else None
                if other is not None and other.review_run_id != request.run_id:
                    raise AlreadyDecided(f"{entry.key}: another decision about this version applied first: "
                                         f"{other.decision} by {other.decided_by} (kb_review run {other.review_run_id})")
                raise AirflowApiError(f"{request.dag_id} run {request.run_id}: {ti['task_id']} ended {ti['state']} "
                                      "after the answer; see its task log")
        if decide.get("state") == "awaiting_input" and client.hitl_requests(request.dag_id, request.run_id, waiting=True):
            raise AirflowApiError(f"{request.dag_id} run {request.run_id}: {request.task_id} asked again although the "
                                  "decision was given to it in the ledger; see its task log")
        if time.monotonic() > deadline:
            raise AirflowApiError(f"{request.dag_id} run {request.run_id}: the decision was not applied in time")
        time.sleep(poll_s)


def decide(client: AirflowClient, ledger: Ledger, key: str, doc_id: str, decision: Decision | str,
           quality: dict[str, Any] | None = None, version: str | None = None, timeout_s: float = 180.0,
           echo: Callable[[str], None] = print) -> Decided:
    """Answer ``key``'s review through the REST API (starting a ``kb_review`` run if none waits),
    about ``version`` (the one the reviewer saw; None: the one the review request shows), and
    wait until the run has applied it. The decision is given in the ledger first, so that the
    task takes it from there if Airflow loses the answer; it is answered once."""
    decision = Decision(decision)
    deadline = time.monotonic() + timeout_s
    with client.within(timeout_s):
        request = request_for(client, key, timeout_s)
        _parked(client, request, deadline)
        _may_answer(client, request)
        _withdraw_ended(client, ledger, doc_id, request.run_id, echo)
        # the task's form has exactly these params; an answer must give each of them
        params = {"quality": dict(quality or {}), "version": version or ""}
        ledger.give(doc_id, decision, client.username, request.run_id, params=params, version=version)
        try:
            response = client.respond(request, [str(decision)], params)
        except AirflowUnreachable:
            # the answer may have landed: the given decision stays for the task to take, and
            # `kb review decide` again answers the same waiting run
            raise
        except AirflowApiError:  # refused (403, 409: someone else answered, 400): nothing given stays
            ledger.withdraw(request.run_id)
            raise
        if _applied(client, ledger, doc_id, request, deadline) > 1:
            echo("Airflow lost the answer (the try it resumed was failed as changed externally); the retry took "
                 "the decision from the ledger")
        return Decided(key, decision, request.run_id, response)


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
