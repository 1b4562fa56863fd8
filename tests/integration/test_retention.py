"""The retire guard end to end: kb_ingest with dag.test() against the real S3
server (weed), Qdrant local mode, and a real webhook receiver on loopback."""

from __future__ import annotations

import json

import pytest

from kb.ledger import Status, doc_id_for
from kb.ledger_db import Ledger
from kb.settings import PipelineSettings
from tests.integration.dagrun import points_by_doc, run_ingest
from tests.pdfs import coded_pages, make_pdf
from tests.receivers import webhook_receiver

pytestmark = pytest.mark.integration


@pytest.fixture
def webhook(kb_env, airflow_db, monkeypatch):
    with webhook_receiver() as hook:
        monkeypatch.setenv("AIRFLOW_CONN_KB_ALERTS_WEBHOOK", json.dumps({
            "conn_type": "http", "host": f"http://127.0.0.1:{hook['port']}/services", "password": "T0/B0/hook-secret",
        }))
        yield hook["calls"]


def _entry(kb_env, key: str):
    return Ledger.for_settings(PipelineSettings()).get(doc_id_for(kb_env["inbox"], key))


def _keys(store, bucket: str, prefix: str) -> list[str]:
    """Every object version under ``prefix``, delete markers included: what is really stored."""
    return sorted(f"{o.object_name}@{o.version_id}" for o in store.client.list_objects(
        bucket, prefix=prefix, recursive=True, include_version=True) if not o.is_dir)


def test_an_emptied_inbox_retires_nothing_alerts_once_and_a_forced_run_retires(kb_env, webhook):
    store, inbox = kb_env["store"], kb_env["inbox"]
    names = [f"guard/doc{i}.pdf" for i in range(3)]
    for i, key in enumerate(names):
        store.put_bytes(inbox, key, make_pdf(coded_pages(f"guard{i}", 1)), content_type="application/pdf")
    dr, summary = run_ingest()
    assert dr.state == "success" and summary["documents_indexed"] == 3

    # the listing comes back empty (here: every object is gone; a wrong bucket looks the same)
    for key in names:
        store.remove(inbox, key)
    dr, summary = run_ingest()
    assert dr.state == "success"
    assert summary["documents_deleted"] == 0
    held = summary["retire_held"]
    assert held["would_retire"] == 3 and held["indexed"] == 3 and held["allowed"] == 1 and held["listed"] == 0
    assert held["keys"] == names
    for key in names:  # still searchable, and the ledger still says so
        assert points_by_doc(key), key
        assert _entry(kb_env, key).status == Status.INDEXED
    assert len(webhook) == 1, webhook
    body = webhook[0][1]
    assert body["kb"]["event"] == "retire-held" and body["kb"]["would_retire"] == 3
    assert "none retired" in body["text"] and "force=true" in body["text"]

    # the same hold in the next run: held again, alerted no more
    dr, summary = run_ingest()
    assert summary["retire_held"]["fingerprint"] == held["fingerprint"] and summary["documents_deleted"] == 0
    assert len(webhook) == 1

    # a forced run means it: all three leave the index
    dr, summary = run_ingest(force=True)
    assert dr.state == "success" and summary["retire_held"] is None and summary["documents_deleted"] == 3
    for key in names:
        assert points_by_doc(key) == []
        assert _entry(kb_env, key).status == Status.DELETED
    assert len(webhook) == 1


def test_one_of_two_documents_deleted_is_retired_without_a_hold(kb_env, webhook):
    store, inbox = kb_env["store"], kb_env["inbox"]
    for key in ("keep.pdf", "drop.pdf"):
        store.put_bytes(inbox, key, make_pdf(coded_pages(key[:4], 1)), content_type="application/pdf")
    run_ingest()
    store.remove(inbox, "drop.pdf")
    dr, summary = run_ingest()
    assert summary["documents_deleted"] == 1 and summary["retire_held"] is None
    assert points_by_doc("drop.pdf") == [] and points_by_doc("keep.pdf")
    assert webhook == []
