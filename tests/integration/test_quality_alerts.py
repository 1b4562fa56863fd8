"""Data-quality gates end to end: kb_ingest with dag.test() against the real S3 server,
the embedded store (Qdrant Edge), a real SMTP server and a real webhook receiver, both on loopback.

Faults are injected where a broken OCR engine would leave them: in the stored page
results of the new version (extraction reuses a stored result for the same content).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kb.artifacts import ArtifactKeys
from kb.ledger import Status, doc_id_for
from kb.ledger_db import Ledger
from kb.settings import PipelineSettings
from tests.integration.dagrun import points_by_doc, run_ingest
from tests.pdfs import coded_pages, make_pdf
from tests.receivers import body_text, smtp_receiver, webhook_receiver

pytestmark = pytest.mark.integration

NAMES = ("missing", "loop", "empty", "dimension")


@pytest.fixture
def receivers(kb_env, airflow_db, monkeypatch):
    with smtp_receiver("alerts", "smtp-secret") as smtp, webhook_receiver() as hook:
        monkeypatch.setenv("AIRFLOW_CONN_KB_ALERTS_SMTP", json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": smtp["port"], "login": "alerts",
            "password": "smtp-secret",
            "extra": {"from_email": "kb@localhost", "disable_tls": True, "disable_ssl": True, "retry_limit": 1},
        }))
        monkeypatch.setenv("AIRFLOW_CONN_KB_ALERTS_WEBHOOK", json.dumps({
            "conn_type": "http", "host": f"http://127.0.0.1:{hook['port']}/services", "password": "T0/B0/hook-secret",
        }))
        monkeypatch.setenv("KB_ALERT_EMAIL_TO", '["ops@example.org"]')
        yield {"smtp": smtp, "webhook": hook}


def _seed_result(kb_env, key: str, pages: list[dict]) -> None:
    """Store the page results the next run's extract will find for the object's current bytes."""
    import hashlib

    data = kb_env["store"].get_bytes(kb_env["inbox"], key)
    doc_id, sha = doc_id_for(kb_env["inbox"], key), hashlib.sha256(data).hexdigest()
    kb_env["store"].put_json(kb_env["artifacts"], ArtifactKeys.pages(doc_id, sha, 1, 3), {
        "doc_id": doc_id, "sha256": sha, "first": 1, "last": 3, "seconds": 0.0, "pages": pages,
    })


def _page(n: int, text: str, status: str = "ok") -> dict:
    return {"page": n, "markdown": text, "status": status, "backend": "textlayer", "confidence": None}


def _search_top_key(query: str) -> str:
    from kb.retrieval import Retriever
    from kb.settings import PipelineSettings

    return Retriever(PipelineSettings()).search(query, top_k=1)[0]["key"]


def test_bad_versions_are_quarantined_alerted_once_and_the_old_version_stays_searchable(
        kb_env, receivers, tmp_path, monkeypatch):
    store, inbox = kb_env["store"], kb_env["inbox"]
    smtp, hook = receivers["smtp"]["messages"], receivers["webhook"]["calls"]
    for name in NAMES:
        store.put_bytes(inbox, f"{name}.pdf", make_pdf(coded_pages(name, 3)))

    dr, summary = run_ingest()
    assert summary["documents_indexed"] == 4, summary
    assert smtp == [] and hook == [], "good documents must send nothing"
    v1 = {n: Ledger.for_settings(PipelineSettings()).get(doc_id_for(inbox, f"{n}.pdf")).indexed_sha256 for n in NAMES}

    # --- new versions of three documents, each with one kind of broken OCR output -----
    for name in ("missing", "loop", "empty"):
        store.put_bytes(inbox, f"{name}.pdf", make_pdf(coded_pages(f"{name}-v2", 3)))
    good = coded_pages("missing-v2", 3)
    _seed_result(kb_env, "missing.pdf", [_page(1, good[0]), _page(3, good[2])])
    loop = coded_pages("loop-v2", 3)
    _seed_result(kb_env, "loop.pdf", [_page(1, loop[0]), _page(2, "the feeder jammed again " * 80), _page(3, loop[2])])
    _seed_result(kb_env, "empty.pdf", [_page(n, "", "empty") for n in (1, 2, 3)])

    dr, summary = run_ingest()
    assert summary["documents_quarantined"] == 3 and summary["documents_failed"] == 0, summary
    assert dr.state == "success"
    expected = {
        "missing": ("expect_table_row_count_to_equal", "observed 2", "value=3"),
        "loop": ("expect_column_values_to_be_between on distinct", "unexpected_count': 1", "min_value=0.3"),
        "empty": ("expect_column_mean_to_be_between on empty", "observed 1.0", "max_value=0.5"),
    }
    _assert_alerts(kb_env, smtp, hook, expected, dr.run_id)

    # --- a new version of the fourth, embedded by a model of another dimension --------
    from tests.embedders import tiny_embedder_dir

    monkeypatch.setenv("KB_EMBED_MODEL_DIR", str(tiny_embedder_dir(tmp_path)))
    store.put_bytes(inbox, "dimension.pdf", make_pdf(coded_pages("dimension-v2", 3)))
    smtp.clear(), hook.clear()
    dr, summary = run_ingest()
    assert summary["documents_quarantined"] == 1, summary
    _assert_alerts(kb_env, smtp, hook, {
        "dimension": ("expect_column_values_to_be_between on dimension", "[32, 32", "min_value=384"),
    }, dr.run_id)
    monkeypatch.delenv("KB_EMBED_MODEL_DIR")

    # --- the old versions are what Qdrant holds, and a search still finds them --------
    for name in NAMES:
        entry = Ledger.for_settings(PipelineSettings()).get(doc_id_for(inbox, f"{name}.pdf"))
        assert entry.status == Status.QUARANTINED and entry.error["code"] == "validation_failed"
        assert entry.indexed_sha256 == v1[name], "the ledger must still name the searchable version"
        points = points_by_doc(f"{name}.pdf")
        assert points and {p.payload["sha256"] for p in points} == {v1[name]}
        assert _search_top_key(coded_pages(name, 3)[1]) == f"{name}.pdf"

    # --- a rerun with nothing new alerts nobody -------------------------------------
    smtp.clear(), hook.clear()
    run_ingest()
    assert smtp == [] and hook == []


def _assert_alerts(kb_env, smtp, hook, expected: dict, run_id: str) -> None:
    assert len(smtp) == len(expected), [m["Subject"] for m in smtp]
    assert len(hook) == len(expected), hook
    for name, (expectation, observed, threshold) in expected.items():
        key = f"{name}.pdf"
        [mail] = [m for m in smtp if key in m["Subject"]]
        [(path, body)] = [(p, b) for p, b in hook if b["kb"]["key"] == key]
        assert mail["To"] == "ops@example.org" and "validation_failed" in mail["Subject"]
        assert path == "/services/T0/B0/hook-secret"
        text = body_text(mail)
        for content in (text, body["text"]):
            content = content.replace("&#x27;", "'")
            assert key in content and run_id in content
            line = next(x for x in content.splitlines() if expectation in x)
            assert observed in line and threshold in line, line
            version = Ledger.for_settings(PipelineSettings()).get(doc_id_for(kb_env["inbox"], key)).version_id
            assert f"Version: {version}" in content
        report = body["kb"]["report"]
        assert report.startswith(f"s3://{kb_env['artifacts']}/quarantine/")
        record = kb_env["store"].get_json(kb_env["artifacts"], report.split("/", 3)[3])
        assert record["code"] == "validation_failed" and record["validation"]["gates"]
        gate = record["validation"]["gates"][0]
        assert kb_env["store"].get_json(kb_env["artifacts"], gate["result"])["success"] is False
        assert list(kb_env["store"].list_latest(kb_env["artifacts"], record["validation"]["artifacts"])), \
            "the quarantined version's page results are kept with it"
        docs = body["kb"]["docs_url"]
        assert docs and docs.startswith("file://") and Path(re.sub("^file://", "", docs).replace("%40", "@")).exists()
        assert docs in text


def test_a_task_that_fails_after_its_retries_alerts_once(kb_env, receivers, monkeypatch):
    monkeypatch.setenv("KB_RETRY_DELAY_S", "0.5")
    monkeypatch.setenv("KB_INBOX_BUCKET", "no-such-bucket-here")  # sense fails every try
    dr, _ = run_ingest()
    assert dr.state == "failed"
    smtp, hook = receivers["smtp"]["messages"], receivers["webhook"]["calls"]
    assert len(smtp) == 1 and len(hook) == 1, ([m["Subject"] for m in smtp], hook)
    assert "kb_ingest.sense failed after 2 tries" in smtp[0]["Subject"]
    body = hook[0][1]
    assert body["kb"]["task"] == "sense" and body["kb"]["run_id"] == dr.run_id and "NoSuchBucket" in body["text"]
    assert receivers["smtp"]["logins"] == ["alerts"], "the connection's credentials were used"


def test_a_run_whose_plan_fails_fails_and_alerts_once(kb_env, receivers, monkeypatch):
    """Sense succeeds, plan cannot ask the OCR service its limits: the run must end "failed"
    (report and alert have no plan to work on; before, both skipped and the run read "success")
    and ops hear of it once, from plan, not again from report."""
    import socket

    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "manual.pdf", make_pdf(coded_pages("unplanned", 2)))
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("KB_RETRY_DELAY_S", "0.5")
    monkeypatch.setenv("KB_OCR_MODE", "service")
    monkeypatch.setenv("AIRFLOW_CONN_OCR_SERVICE", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": port, "schema": "http", "password": "k",
        "extra": {"retries": 0, "connect_timeout_s": 2},
    }))
    from tests.integration.dagrun import load_dag

    dag = load_dag()
    dag.deadline = None  # as run_ingest does (dag.test() and deadline alerts, see there)
    dr = dag.test(run_conf={"prefix": "", "force": False})
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert states["sense"] == "success" and states["plan"] == "failed", states
    assert dr.state == "failed", states
    smtp, hook = receivers["smtp"]["messages"], receivers["webhook"]["calls"]
    assert [m["Subject"] for m in smtp] == ["[kb] task kb_ingest.plan failed after 2 tries"], smtp
    assert len(hook) == 1 and hook[0][1]["kb"]["task"] == "plan" and "OcrUnavailable" in hook[0][1]["text"]
    entry = Ledger.for_settings(PipelineSettings()).get(doc_id_for(inbox, "manual.pdf"))
    assert entry is None or entry.status != Status.INDEXED, entry  # nothing claimed done


def test_a_document_indexed_without_a_page_says_so_in_summary_ledger_and_one_alert(kb_env, receivers):
    store, inbox = kb_env["store"], kb_env["inbox"]
    smtp, hook = receivers["smtp"]["messages"], receivers["webhook"]["calls"]
    text = coded_pages("gap", 3)
    store.put_bytes(inbox, "gap.pdf", make_pdf(text))
    # what extraction stores when page 2 still fails alone after its range was split
    reason = "range_timeout: the OCR service answered 504 timeout: parsing took longer than 20s"
    _seed_result(kb_env, "gap.pdf", [_page(1, text[0]), {**_page(2, "", "failed"), "reason": reason}, _page(3, text[2])])

    dr, summary = run_ingest(quality={"max_failed_page_share": 0.5})
    assert dr.state == "success" and summary["documents_indexed"] == 1, summary
    assert summary["pages_failed"] == [{"key": "gap.pdf", "page": 2, "reason": reason}]
    entry = Ledger.for_settings(PipelineSettings()).get(doc_id_for(inbox, "gap.pdf"))
    assert entry.status == Status.INDEXED and entry.failed_pages == [{"page": 2, "reason": reason}]
    assert {n for p in points_by_doc("gap.pdf") for n in p.payload["pages"]} == {1, 3}

    assert len(smtp) == 1 and len(hook) == 1, ([m["Subject"] for m in smtp], hook)
    assert smtp[0]["Subject"] == "[kb] indexed gap.pdf without 1 page(s)"
    body = hook[0][1]
    assert body["kb"]["event"] == "pages-failed" and f"page 2: {reason}" in body["text"]
    assert f"page 2: {reason}" in body_text(smtp[0])

    smtp.clear(), hook.clear()
    run_ingest(force=True, quality={"max_failed_page_share": 0.5})  # the same version again: no second alert
    assert smtp == [] and hook == []
