"""A small client of Airflow 3's public REST API: trigger a run, follow it to the end.

Uses the simple auth manager's token endpoint with the stack's generated password;
the token is kept in memory only. httpx's errors end here: an API that does not answer is
``AirflowUnreachable``, a refusal ``AirflowApiError`` (404 and 409 as their own kinds).

A slow or briefly stalled API server does not end a command. Under load (three stacks on two
cores) one GET took longer than its 30 s timeout while the run it asked about went on fine, and
``kb bench soak`` died of it. So a call that may be repeated without effect (a GET, a trigger
with a run id chosen here, an answer checked against what the API recorded) is sent again on
a timeout, a connection error or a 5xx, with backoff, until the command's own deadline
(``within``), or ``retry_window_s`` where the command set none; each retry is reported through
``on_retry``, and only a spent deadline raises.
"""

from __future__ import annotations

import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import httpx

from kb_dev.errors import AirflowApiError, AirflowConflict, AirflowNotFound, AirflowUnreachable

TERMINAL = {"success", "failed"}
# the API's refusals a caller may handle, by status; any other 4xx/5xx is AirflowApiError
_REFUSALS = {404: AirflowNotFound, 409: AirflowConflict}
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0)  # then 15 s between tries


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def new_run_id(prefix: str = "manual") -> str:
    """A run id chosen by the client, so that a trigger sent twice makes one run."""
    return f"{prefix}__{datetime.now(timezone.utc):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class HitlRequest:
    """A human-in-the-loop task waiting for (or given) an answer."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    subject: str
    body: str | None
    options: list[str]
    params: dict[str, Any]
    created_at: str
    response_received: bool
    # the ids of the users who may answer (Airflow answers anyone else 403); empty: anyone
    assigned_users: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "HitlRequest":
        ti = data["task_instance"]
        return cls(dag_id=ti["dag_id"], run_id=ti["dag_run_id"], task_id=ti["task_id"], map_index=ti["map_index"],
                   subject=data["subject"], body=data.get("body"), options=list(data["options"]),
                   params=dict(data.get("params") or {}), created_at=data["created_at"],
                   response_received=bool(data.get("response_received")),
                   assigned_users=tuple(u["id"] for u in data.get("assigned_users") or []))


@dataclass(frozen=True)
class HitlResponse:
    """What the API recorded for an answer: who answered (the REST user), when, what."""

    responded_by: str
    responded_at: str
    chosen_options: list[str]
    params_input: dict[str, Any]


@dataclass
class RunProgress:
    state: str
    counts: dict[str, dict[str, int]]  # task_id -> {state: n}

    def line(self) -> str:
        parts = []
        for task_id, states in self.counts.items():
            total = sum(states.values())
            done = states.get("success", 0) + states.get("skipped", 0)
            failed = states.get("failed", 0) + states.get("upstream_failed", 0)
            parts.append(f"{task_id} {done}/{total}" + (f" ({failed} failed)" if failed else ""))
        return f"[{self.state}] " + ", ".join(parts)


class AirflowClient:
    def __init__(self, base_url: str, username: str, password: str, timeout: float = 30.0,
                 retry_window_s: float = 180.0, on_retry: Callable[[str], None] = _stderr) -> None:
        self.base_url = base_url.rstrip("/")
        self._username, self._password = username, password
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)
        self._token: str | None = None
        self.retry_window_s = retry_window_s
        self.on_retry = on_retry
        self._deadline: float | None = None  # time.monotonic(); set by ``within``

    @property
    def username(self) -> str:
        """The REST user this client logs in as: who Airflow records as answering."""
        return self._username

    def close(self) -> None:
        self._http.close()

    @contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """The block is a command with its own deadline: a call inside it is retried until then
        (never past an outer block's deadline), not for ``retry_window_s``."""
        outer = self._deadline
        ends = time.monotonic() + seconds
        self._deadline = ends if outer is None else min(outer, ends)
        try:
            yield
        finally:
            self._deadline = outer

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise AirflowUnreachable(f"cannot reach Airflow at {self.base_url} ({reason}); is the stack up? (`kb status`)",
                                     reason) from None

    def _auth(self) -> dict[str, str]:
        if self._token is None:
            resp = self._send("POST", "/auth/token", json={"username": self._username, "password": self._password})
            if resp.status_code >= 500:
                raise AirflowUnreachable(f"Airflow's token endpoint answered HTTP {resp.status_code}",
                                         f"HTTP {resp.status_code}")
            if resp.status_code not in (200, 201):
                raise AirflowApiError(f"Airflow refused the stack's credentials (HTTP {resp.status_code})")
            self._token = resp.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def _once(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        resp = self._send(method, path, headers=self._auth(), **kwargs)
        if resp.status_code == 401:  # the token expired: get a new one once
            self._token = None
            resp = self._send(method, path, headers=self._auth(), **kwargs)
        return resp

    def _request(self, method: str, path: str, *, repeatable: bool | None = None, **kwargs: Any) -> Any:
        """One API call. A 5xx is sent again whatever the method: on SQLite a write times out
        while the scheduler holds the lock, and the API answers 500 having rolled it back. A call
        that got no answer is sent again only if ``repeatable`` (default: a GET), since the first
        may have landed."""
        repeatable = method == "GET" if repeatable is None else repeatable
        stop_at = self._deadline if self._deadline is not None else time.monotonic() + self.retry_window_s
        tries = 0
        while True:
            try:
                resp = self._once(method, path, **kwargs)
                failure = f"HTTP {resp.status_code}" if resp.status_code >= 500 else None
            except AirflowUnreachable as exc:
                if not repeatable:
                    raise
                failure, resp = exc.reason, None
            if failure is None:
                break
            pause = BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]
            left = stop_at - time.monotonic()
            if left < pause:
                if resp is not None:
                    break  # the 5xx is the answer
                raise AirflowUnreachable(f"cannot reach Airflow at {self.base_url}: {method} {path} got no answer "
                                         f"after {tries + 1} tries ({failure}); is the stack up? (`kb status`)")
            tries += 1
            self.on_retry(f"Airflow's API: {method} {path.split('?')[0]} got {failure}; "
                          f"retrying in {pause:.0f} s, try {tries + 1}, {left:.0f} s left")
            time.sleep(pause)
        if resp.status_code >= 400:
            error = _REFUSALS.get(resp.status_code, AirflowApiError)
            raise error(f"{method} {path} answered HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json()

    def pool(self, name: str) -> dict[str, Any] | None:
        try:
            return self._request("GET", f"/api/v2/pools/{name}")
        except AirflowNotFound:
            return None

    def set_pool(self, name: str, slots: int, description: str) -> None:
        """Create the pool or change its slots; its other settings stay as they were."""
        current = self.pool(name)
        if current is None:
            self._request("POST", "/api/v2/pools", json={"name": name, "slots": slots, "description": description})
            return
        # Airflow 3.3 wants the whole pool in a PATCH, even with an update mask (apache/airflow#73768)
        body = {"name": name, "slots": slots, "description": current.get("description") or description,
                "include_deferred": bool(current.get("include_deferred"))}
        self._request("PATCH", f"/api/v2/pools/{name}", json=body)

    def wait_for_dag(self, dag_id: str, timeout_s: float = 120.0) -> None:
        """The DAG processor must have parsed the DAG before it can be triggered."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._request("GET", f"/api/v2/dags/{dag_id}")
                return
            except AirflowUnreachable:
                raise
            except AirflowApiError:
                if time.monotonic() > deadline:
                    raise AirflowApiError(f"DAG {dag_id!r} was not parsed within {timeout_s:.0f}s; see the Airflow log")
                time.sleep(1.0)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Start a run with a run id chosen here, so a trigger sent again after a lost answer
        finds its own run (409) instead of starting a second one."""
        run_id, conf = new_run_id(), conf or {}
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf}
        try:
            return self._request("POST", f"/api/v2/dags/{dag_id}/dagRuns", json=body, repeatable=True)["dag_run_id"]
        except AirflowConflict:
            if (self.dag_run(dag_id, run_id).get("conf") or {}) != conf:
                raise
            return run_id

    def dag_runs(self, dag_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The DAG's runs, newest first (run_id, run_type, state, ...)."""
        data = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns",
                             params={"limit": limit, "order_by": "-run_after"})
        return data["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The run's task instances as the REST API gives them (task_id, map_index, state, try_number, ...)."""
        data = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})
        return data["task_instances"]

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """One run as the REST API gives it (state, conf, ...)."""
        return self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")

    # --- human-in-the-loop tasks (airflow.providers.standard.operators.hitl) ---------------

    def hitl_requests(self, dag_id: str, run_id: str = "~", waiting: bool | None = True) -> list[HitlRequest]:
        """The DAG's human-in-the-loop tasks (of one run, or of all with ``~``), oldest first;
        ``waiting``: only those not answered yet (None: all)."""
        params: dict[str, Any] = {"limit": 100, "order_by": "created_at"}
        if waiting is not None:
            params["response_received"] = str(not waiting).lower()
        data = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/hitlDetails", params=params)
        return [HitlRequest.from_api(d) for d in data["hitl_details"]]

    def respond(self, request: HitlRequest, chosen: list[str], params_input: dict[str, Any] | None = None) -> HitlResponse:
        """Answer a waiting human-in-the-loop task as the REST user. AirflowConflict: it was
        answered already (by someone else: an answer of ours that got lost and was sent again
        is recognised and returned); AirflowApiError (400): an option or a param it does not take."""
        body = {"chosen_options": chosen, "params_input": params_input or {}}
        path = (f"/api/v2/dags/{request.dag_id}/dagRuns/{request.run_id}/taskInstances/"
                f"{request.task_id}/{request.map_index}/hitlDetails")
        try:
            data = self._request("PATCH", path, json=body, repeatable=True)
        except AirflowConflict:
            data = self._request("GET", path)
            by = data.get("responded_by") or {}
            if not (list(data.get("chosen_options") or []) == chosen and (by.get("name") or by.get("id")) == self._username
                    and dict(data.get("params_input") or {}) == body["params_input"]):
                raise
        by = data["responded_by"]
        return HitlResponse(responded_by=by.get("name") or by.get("id"), responded_at=data["responded_at"],
                            chosen_options=list(data["chosen_options"]), params_input=dict(data.get("params_input") or {}))

    def progress(self, dag_id: str, run_id: str) -> RunProgress:
        run = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        counts: dict[str, dict[str, int]] = {}
        for ti in self.task_instances(dag_id, run_id):
            state = ti["state"] or "none"
            counts.setdefault(ti["task_id"], {}).setdefault(state, 0)
            counts[ti["task_id"]][state] += 1
        return RunProgress(run["state"], counts)

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        data = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
        return data.get("value")

    # Deadlines are served by the API server's UI routes (/ui/...), the only ones Airflow 3.3 has
    # for them: the same token, but a private API that may change between Airflow versions.
    def deadline_alerts(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's deadline alerts: name, reference_type, interval (seconds)."""
        return self._request("GET", f"/ui/dags/{dag_id}/deadlineAlerts")["deadline_alerts"]

    def deadlines(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """A run's deadlines: deadline_time and missed. A run that succeeded before its deadline
        has none left (Airflow deletes it)."""
        return self._request("GET", f"/ui/dags/{dag_id}/dagRuns/{run_id}/deadlines")["deadlines"]

    def follow(
        self, dag_id: str, run_id: str, *, timeout_s: float, poll_s: float = 1.0, echo: Callable[[str], None] = print
    ) -> RunProgress:
        deadline = time.monotonic() + timeout_s
        last = ""
        with self.within(timeout_s):
            while True:
                progress = self.progress(dag_id, run_id)
                line = progress.line()
                if line != last:
                    echo(line)
                    last = line
                if progress.state in TERMINAL:
                    return progress
                if time.monotonic() > deadline:
                    raise AirflowApiError(f"run {run_id} still {progress.state} after {timeout_s:.0f}s")
                time.sleep(poll_s)


@dataclass
class RunOutcome:
    run_id: str
    state: str
    summary: dict[str, Any] | None  # the report task's run summary, when it wrote one


def run_and_wait(client: AirflowClient, dag_id: str, conf: dict[str, Any], timeout_s: float,
                 echo: Callable[[str], None] = print, poll_s: float = 1.0) -> RunOutcome:
    """Trigger ``dag_id`` with ``conf``, show its progress until it ends, return its summary;
    every call, retries included, within ``timeout_s``."""
    with client.within(timeout_s):
        client.wait_for_dag(dag_id)
        run_id = client.trigger(dag_id, conf)
        echo(f"triggered {dag_id} run {run_id}")
        progress = client.follow(dag_id, run_id, timeout_s=timeout_s, echo=echo, poll_s=poll_s)
        summary = None
        try:
            summary = client.xcom(dag_id, run_id, "report")
        except AirflowApiError:  # the report task skipped or failed before writing one
            pass
    return RunOutcome(run_id, progress.state, summary)
