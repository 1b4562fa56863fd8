"""The ledger when more than one thing happens at a time, on SQLite and on Postgres (a server
of the session's own, Debian's package): folder prefixes case for case, a decision for the
version the reviewer saw, and writers of one entry that cannot overwrite each other."""

from __future__ import annotations

import multiprocessing
import uuid
from types import SimpleNamespace

import pytest

from kb.decisions import Decision
from kb.errors import ReviewedAnotherVersion
from kb.ledger import LedgerEntry, Status, doc_id_for
from kb.ledger_db import Ledger
from kb.objectstore import ObjectInfo
from kb.pipeline.records import record

pytestmark = pytest.mark.integration


def _bucket() -> str:
    return f"inbox-{uuid.uuid4().hex[:8]}"


def _obj(bucket: str, key: str, etag: str = "e1", version: str = "v1") -> ObjectInfo:
    return ObjectInfo(bucket, key, etag, 10, version)


def _indexed(bucket: str, key: str) -> LedgerEntry:
    return LedgerEntry(doc_id_for(bucket, key), bucket, key, "e1", "v1", 10, Status.INDEXED, sha256="s1",
                       indexed_sha256="s1", indexed_version_id="v1")


def test_a_folder_prefix_is_case_exact(ledger_url):
    """S3 keys are case-sensitive: "Reports/" is not "reports/". On SQLite, LIKE compared them
    without case, and a forced run on Reports/ retired reports/lower.pdf."""
    ledger, bucket = Ledger(ledger_url), _bucket()
    ledger.put_many([_indexed(bucket, "Reports/upper.pdf"), _indexed(bucket, "reports/lower.pdf"),
                     _indexed(bucket, "Reports/gone.pdf")])
    assert ledger.indexed_count(bucket, "Reports/") == 2
    assert ledger.indexed_count(bucket, "reports/") == 1
    work = ledger.changes(bucket, "Reports/", [_obj(bucket, "Reports/upper.pdf")], max_attempts=3)
    assert [e.key for e in work.deleted] == ["Reports/gone.pdf"]
    # a prefix's LIKE wildcards stay literal, case-exact or not
    assert ledger.indexed_count(bucket, "R_ports/") == 0


def test_a_decision_for_a_version_no_longer_quarantined_is_refused_and_the_new_one_waits(ledger_url):
    ledger, bucket = Ledger(ledger_url), _bucket()
    ctx = SimpleNamespace(ledger=ledger)
    v1, v2 = _obj(bucket, "scan.pdf", "e1", "v1"), _obj(bucket, "scan.pdf", "e2", "v2")
    record(ctx, None, v1, status=Status.QUARANTINED, sha256="sha-v1", error={"code": "too_many_empty_pages"})
    seen = "sha-v1"  # what the reviewer looks at
    record(ctx, ledger.get(doc_id_for(bucket, "scan.pdf")), v2, status=Status.QUARANTINED, sha256="sha-v2",
           error={"code": "too_many_empty_pages"})  # V2 landed and was quarantined meanwhile
    with pytest.raises(ReviewedAnotherVersion, match="sha-v2"):
        ledger.decide(doc_id_for(bucket, "scan.pdf"), Decision.ACCEPT, "reviewer", version=seen)
    assert [e.key for e in ledger.pending_reviews(bucket)] == ["scan.pdf"]
    assert ledger.get(doc_id_for(bucket, "scan.pdf")).review is None
    row = ledger.decide(doc_id_for(bucket, "scan.pdf"), Decision.ACCEPT, "reviewer", version="sha-v2")
    assert (row.etag, row.version_id) == ("e2", "v2") and ledger.pending_reviews(bucket) == []


def test_a_decision_made_while_an_index_task_holds_an_older_read_survives_its_write(ledger_url):
    """An index task reads the entry before it embeds and records after; a reviewer decides in
    between. Both writes land: the task's fields and the decision."""
    ledger, bucket = Ledger(ledger_url), _bucket()
    ctx = SimpleNamespace(ledger=ledger)
    obj = _obj(bucket, "manual.pdf")
    doc_id = doc_id_for(bucket, "manual.pdf")
    record(ctx, None, obj, status=Status.QUARANTINED, sha256="sha-1", error={"code": "validation_failed"})
    read_by_task = ledger.get(doc_id)
    ledger.decide(doc_id, Decision.REEXTRACT_OCR, "reviewer", version="sha-1")
    record(ctx, read_by_task, obj, status=Status.QUARANTINED, run_id="run-7", attempts=0)
    entry = ledger.get(doc_id)
    assert entry.run_id == "run-7"
    assert entry.current_review is not None and entry.current_review.decision is Decision.REEXTRACT_OCR


def _bump(url: str, doc_id: str, times: int) -> None:
    ledger = Ledger(url)

    def more(entry):
        entry.attempts += 1
        return entry

    for _ in range(times):
        ledger.update(doc_id, more)


def test_writers_in_several_processes_lose_no_update(ledger_url):
    ledger, bucket = Ledger(ledger_url), _bucket()
    entry = _indexed(bucket, "busy.pdf")
    ledger.put(entry)
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_bump, args=(ledger_url, entry.doc_id, 25)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert ledger.get(entry.doc_id).attempts == 100
