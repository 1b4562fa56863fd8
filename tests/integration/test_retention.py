"""Retention and the retire guard end to end: kb_ingest with dag.test() against the real S3
server (weed), the embedded store (Qdrant Edge), and a real webhook receiver on loopback."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest

from kb.artifacts import ArtifactKeys
from kb.ledger import Status, doc_id_for, now
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


def _read_only_store(s3_server):
    """The S3 server's read-only identity (the search service's), which may list but not delete."""
    from kb.objectstore import ObjectStore
    from kb_dev.stack.secrets import read_secrets

    keys = read_secrets(s3_server["settings"].state_dir)
    return ObjectStore.connect(s3_server["endpoint"], keys["KB_SEARCH_S3_ACCESS_KEY"], keys["KB_SEARCH_S3_SECRET_KEY"])


def test_artifacts_of_superseded_and_deleted_versions_expire_after_the_retention(kb_env, airflow_db, s3_server,
                                                                                 monkeypatch):
    from kb.objectstore import ObjectStore
    from kb.pipeline import Context
    from kb.pipeline.retention import sweep

    store, inbox, artifacts = kb_env["store"], kb_env["inbox"], kb_env["artifacts"]
    store.ensure_bucket(artifacts, versioned=True)  # a removal must take every version, not leave a marker
    v1_bytes = make_pdf(coded_pages("first", 4))  # two ranges of the three pages allowed: two objects
    v1 = store.put_bytes(inbox, "a.pdf", v1_bytes, content_type="application/pdf")
    b_bytes = make_pdf(coded_pages("bee", 2))
    store.put_bytes(inbox, "b.pdf", b_bytes, content_type="application/pdf")
    store.put_bytes(inbox, "c.pdf", make_pdf(coded_pages("sea", 2)), content_type="application/pdf")
    dr, summary = run_ingest()
    assert summary["documents_indexed"] == 3 and summary["retention"]["expired"] == 0

    a, b = doc_id_for(inbox, "a.pdf"), doc_id_for(inbox, "b.pdf")
    sha1 = hashlib.sha256(v1_bytes).hexdigest()
    old_pages = ArtifactKeys.pages_folder(a, sha1)
    assert len(_keys(store, artifacts, old_pages)) == 2

    # a new version of a.pdf supersedes the first: its page results and its inbox version wait
    v2_bytes = make_pdf(coded_pages("second", 2))
    v2 = store.put_bytes(inbox, "a.pdf", v2_bytes, content_type="application/pdf")
    new_pages = ArtifactKeys.pages_folder(a, hashlib.sha256(v2_bytes).hexdigest())
    dr, summary = run_ingest()
    assert summary["documents_indexed"] == 1
    retention = summary["retention"]
    assert retention["retention_days"] == 30 and retention["expired"] == 0 and retention["waiting"] >= 2
    assert len(_keys(store, artifacts, old_pages)) == 2  # 30 days have not passed
    assert {v.version_id for v in store.list_versions(inbox, "a.pdf")} == {v1.version_id, v2.version_id}

    settings = PipelineSettings()
    ctx = Context(ObjectStore.from_settings(), settings)
    assert sweep(ctx, at=now() + timedelta(days=29)).expired == 0
    assert len(_keys(store, artifacts, old_pages)) == 2

    # an identity that may not delete removes nothing, says so, and the wait goes on
    read_only = Context(_read_only_store(s3_server), settings)
    refused = sweep(read_only, at=now() + timedelta(days=31))
    assert refused.refused == ["AccessDenied"] and refused.objects_removed == 0 and refused.waiting >= 2
    assert len(_keys(store, artifacts, old_pages)) == 2

    # past the retention, at most KB_RETENTION_SWEEP_OBJECTS a run: one object version per sweep here
    bounded = Context(ctx.store, settings.model_copy(update={"retention_sweep_objects": 1}))
    later = now() + timedelta(days=31)
    passes = []
    while not passes or passes[-1].objects_removed:
        passes.append(sweep(bounded, at=later))
        assert len(passes) < 10
    assert [p.objects_removed for p in passes] == [1, 1, 1, 0]  # the inbox's v1 and two page results, one a pass
    assert _keys(store, artifacts, old_pages) == []
    assert [v.version_id for v in store.list_versions(inbox, "a.pdf")] == [v2.version_id]
    assert len(_keys(store, artifacts, new_pages)) == 1  # the indexed version keeps its page results
    assert store.get_bytes(inbox, "a.pdf") == v2_bytes
    assert passes[-1].waiting == 0

    # b.pdf is deleted and retention is 0: its artifacts leave at the next run (as documented),
    # not in the run that retires it
    monkeypatch.setenv("KB_ARTIFACT_RETENTION_DAYS", "0")
    store.remove(inbox, "b.pdf")
    dr, summary = run_ingest()
    assert dr.state == "success" and summary["documents_deleted"] == 1
    assert summary["retention"]["objects_removed"] == 0 and summary["retention"]["waiting"] >= 2
    assert _keys(store, artifacts, ArtifactKeys.pages_of(b)) != []
    dr, summary = run_ingest()
    retention = summary["retention"]
    assert retention["objects_removed"] == 2, retention  # b's page results and its one inbox version
    assert {(r["bucket"], r["name"]) for r in retention["removed"]} == {
        (artifacts, ArtifactKeys.pages_folder(b, hashlib.sha256(b_bytes).hexdigest())), (inbox, "b.pdf")}
    assert _keys(store, artifacts, ArtifactKeys.pages_of(b)) == []
    assert [v.is_delete_marker for v in store.list_versions(inbox, "b.pdf")] == [True]  # only the marker is left
    assert _entry(kb_env, "b.pdf").status == Status.DELETED  # the ledger keeps its record
    # the others are untouched, and a second run removes nothing
    assert len(_keys(store, artifacts, new_pages)) == 1 and points_by_doc("c.pdf")
    dr, summary = run_ingest()
    assert summary["retention"]["objects_removed"] == 0



def test_a_forced_run_on_one_folder_leaves_a_folder_differing_only_in_case(kb_env):
    """S3 keys are case-sensitive: a forced run on Reports/ (which bypasses the retire guard)
    must not retire reports/lower.pdf, as it did while SQLite's LIKE compared without case."""
    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "Reports/upper.pdf", make_pdf(coded_pages("upper", 1)), content_type="application/pdf")
    store.put_bytes(inbox, "reports/lower.pdf", make_pdf(coded_pages("lower", 1)), content_type="application/pdf")
    dr, summary = run_ingest()
    assert dr.state == "success" and summary["documents_indexed"] == 2
    dr, summary = run_ingest(prefix="Reports/", force=True)
    assert dr.state == "success" and summary["documents_deleted"] == 0, summary
    assert _entry(kb_env, "reports/lower.pdf").status == Status.INDEXED
    assert points_by_doc("reports/lower.pdf") and points_by_doc("Reports/upper.pdf")
