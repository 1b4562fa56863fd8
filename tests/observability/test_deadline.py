"""The searchable-within promise (``KB_SEARCHABLE_WITHIN_S``) as kb_ingest's Airflow deadline alert.

On the shared live stack (``tests/live.py``, promise ``LIVE_SETTINGS["KB_SEARCHABLE_WITHIN_S"]``):
a run that finishes in time leaves no missed deadline and no record; a run whose OCR service is
held back (its process group stopped with SIGSTOP, always resumed) misses it, and both Airflow
(the run's deadline, missed) and the artifacts bucket (``alerts/deadline-missed/<run>.json``)
say so. Mail and webhook delivery is tested on the callback itself, with real receivers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from kb.artifacts import ArtifactKeys
from kb_airflow.names import INGEST_DAG_ID
from tests.live import LIVE_SETTINGS
from tests.pdfs import coded_pages, make_pdf, scanned_copy
from tests.stack.faultkit import ARTIFACTS

REPO = Path(__file__).resolve().parents[2]
PROMISE_S = float(LIVE_SETTINGS["KB_SEARCHABLE_WITHIN_S"])


# --- the DAG, parsed (no stack) -----------------------------------------------------------

PROBE = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).dags["kb_ingest"]
print(json.dumps([{"reference": type(d.reference).__name__, "interval_s": d.interval.total_seconds(),
                   "callback": type(d.callback).__name__, "path": d.callback.path, "kwargs": d.callback.kwargs}
                  for d in dag.deadline or []]))
"""


def test_kb_ingest_states_kb_searchable_within_s_as_a_deadline_from_when_the_run_was_queued():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "AIRFLOW_CONN_"))}
    env["KB_SEARCHABLE_WITHIN_S"] = "1234"
    done = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "dags")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    [deadline] = json.loads(done.stdout.strip().splitlines()[-1])
    assert deadline == {"reference": "DagRunQueuedAtDeadline", "interval_s": 1234.0, "callback": "SyncCallback",
                        "path": "kb_airflow.deadline.searchable_deadline_missed", "kwargs": {"promise_s": 1234.0}}


# --- the callback, against the real S3 server and real mail and webhook receivers --------


def _missed_context(run_id: str, going_s: float, promise_s: float) -> dict:
    """What Airflow hands a deadline callback: the REST API's DAG run, and the deadline."""
    import pendulum

    queued = pendulum.now("UTC").subtract(seconds=going_s)
    return {"dag_run": {"dag_id": "kb_ingest", "dag_run_id": run_id, "queued_at": queued.isoformat(),
                        "start_date": queued.add(seconds=1).isoformat(), "state": "running",
                        "conf": {"prefix": "late/", "force": False}},
            "deadline": {"id": str(uuid.uuid4()), "deadline_time": queued.add(seconds=promise_s).isoformat()}}


def test_a_missed_deadline_alerts_once_by_mail_and_webhook_and_leaves_a_record(kb_env, monkeypatch):
    from kb_airflow.deadline import searchable_deadline_missed
    from tests.receivers import body_text, smtp_receiver, webhook_receiver

    with smtp_receiver("alerts", "smtp-secret") as smtp, webhook_receiver() as hook:
        monkeypatch.setenv("AIRFLOW_CONN_KB_ALERTS_SMTP", json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": smtp["port"], "login": "alerts",
            "password": "smtp-secret",
            "extra": {"from_email": "kb@localhost", "disable_tls": True, "disable_ssl": True, "retry_limit": 1}}))
        monkeypatch.setenv("AIRFLOW_CONN_KB_ALERTS_WEBHOOK", json.dumps({
            "conn_type": "http", "host": f"http://127.0.0.1:{hook['port']}/services", "password": "T0/B0/hook-secret"}))
        searchable_deadline_missed(context=_missed_context("scheduled__late", 150, 120), promise_s=120.0)
        mails, calls = list(smtp["messages"]), list(hook["calls"])

    assert len(mails) == 1 and len(calls) == 1, (mails, calls)
    assert "scheduled__late" in mails[0]["Subject"] and "120 s" in mails[0]["Subject"]
    assert "late/" in body_text(mails[0])
    path, body = calls[0]
    assert path == "/services/T0/B0/hook-secret"
    assert body["kb"]["event"] == "deadline-missed" and body["kb"]["run_id"] == "scheduled__late"
    record = kb_env["store"].get_json(kb_env["artifacts"], ArtifactKeys.deadline_alert("scheduled__late"))
    assert record["run_id"] == "scheduled__late" and record["promise_s"] == 120.0 and record["prefix"] == "late/"
    assert 150 <= record["running_s"] < 180, record
    assert record["sent"] == ["email", "webhook"] and record["failed"] == []
    assert "secret" not in json.dumps(record)


def test_without_alert_connections_a_missed_deadline_still_leaves_its_record(kb_env, caplog):
    from kb_airflow.deadline import searchable_deadline_missed

    with caplog.at_level("WARNING"):
        searchable_deadline_missed(context=_missed_context("manual__quiet", 100, 90), promise_s=90.0)
    record = kb_env["store"].get_json(kb_env["artifacts"], ArtifactKeys.deadline_alert("manual__quiet"))
    assert record["run_id"] == "manual__quiet" and record["channels"] == [] and "sent" not in record
    assert "no alert channel is configured" in caplog.text


# --- the live stack -----------------------------------------------------------------------


def _deadline_record(live, run_id: str) -> dict | None:
    return live.runs.store.get_json(ARTIFACTS, ArtifactKeys.deadline_alert(run_id))


def _deadlines(live, run_id: str) -> list[dict]:
    with closing(live.runs.client()) as client:
        return client.deadlines(INGEST_DAG_ID, run_id)


@contextmanager
def _held_back(live, part: str, max_s: float):
    """The part's whole process group stopped (SIGSTOP) for the block, at most ``max_s`` (a
    timer resumes it even if the test hangs), and always resumed (SIGCONT) at the end."""
    pgid = json.loads((Path(live.env["KB_STATE_DIR"]) / "run" / f"{part}.json").read_text())["pgid"]
    # The resumer is a process of its own, so that the group comes back even if this one dies.
    resumer = subprocess.Popen([sys.executable, "-c",
                                f"import os, signal, time; time.sleep({max_s}); os.killpg({pgid}, signal.SIGCONT)"],
                               start_new_session=True)
    os.killpg(pgid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pgid, signal.SIGCONT)
        resumer.kill()
        resumer.wait()


def test_a_run_that_finishes_within_the_promise_raises_no_deadline_alert(live):
    with closing(live.runs.client()) as client:
        [alert] = client.deadline_alerts(INGEST_DAG_ID)
    assert alert["reference_type"] == "DagRunQueuedAtDeadline" and alert["interval"] == PROMISE_S, alert

    prefix = f"observability/deadline-in-time-{uuid.uuid4().hex[:8]}/"
    runs = live.runs
    runs.upload(prefix, {"in-time.pdf": make_pdf(coded_pages("intime", 2))})
    run_id = runs.trigger(prefix)
    armed = _deadlines(live, run_id)  # the deadline exists while the run is going
    started = time.monotonic()
    state = runs.wait(run_id, timeout_s=PROMISE_S * 3)
    took = time.monotonic() - started
    assert state == "success", runs.task_states(run_id)
    assert took < PROMISE_S, f"a normal run took {took:.0f} s, over the live stack's promise: raise it"
    assert len(armed) == 1 and not armed[0]["missed"], armed
    # Airflow deletes the deadline of a run that succeeded in time: nothing is left to fire.
    assert _deadlines(live, run_id) == []
    assert _deadline_record(live, run_id) is None


def test_a_run_held_back_by_the_ocr_service_past_the_promise_raises_one_deadline_alert(live):
    from tests.stack.faultkit import RunEnded

    prefix = f"observability/deadline-held-{uuid.uuid4().hex[:8]}/"
    runs = live.runs
    # a scan: its pages go to the OCR service
    runs.upload(prefix, {"scan.pdf": scanned_copy(make_pdf(coded_pages("heldscan", 2)), dpi=100)})
    run_id = runs.trigger(prefix)
    try:  # plan reads the service's limits first: hold it back once the pages are on their way
        runs.wait_for_task(run_id, "extract", timeout_s=PROMISE_S)
    except RunEnded:
        pytest.fail(f"run {run_id} ended before extract ran: {runs.task_states(run_id)}")
    [before] = _deadlines(live, run_id)
    assert not before["missed"]
    record = None
    with _held_back(live, "ocr", max_s=PROMISE_S + 180):
        deadline = time.monotonic() + PROMISE_S + 120
        while record is None and time.monotonic() < deadline:
            time.sleep(2)
            record = _deadline_record(live, run_id)
    assert record is not None, f"no deadline record for {run_id} within {PROMISE_S + 120:.0f}s"
    runs.wait(run_id, timeout_s=900)  # the run goes on (or fails) once the service is back
    # The callback writes the record before it alerts and again with what went out (a channel
    # that hangs must not keep the miss off file): the first version can be read in between,
    # as it was once on a busy machine. Read the second.
    settle = time.monotonic() + 60
    while record["channels"] and "sent" not in record and time.monotonic() < settle:
        time.sleep(1)
        record = _deadline_record(live, run_id)

    # Airflow's own record: the run's deadline, missed
    [after] = _deadlines(live, run_id)
    assert after["missed"] and after["id"] == before["id"], after
    # the callback's record: the run, the promise, how long it had been going; no secret
    assert record["event"] == "deadline-missed" and record["run_id"] == run_id and record["dag_id"] == INGEST_DAG_ID
    assert record["promise_s"] == PROMISE_S and record["prefix"] == prefix
    assert record["running_s"] >= PROMISE_S, record
    # whatever channels the stack configures (none, or the local mail sink) got it
    assert record.get("sent", []) == record["channels"] and not record.get("failed"), record
    text = json.dumps(record)
    for name, secret in live.secrets.items():
        assert secret not in text, f"{name} in the deadline record"
