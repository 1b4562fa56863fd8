"""The SQL ledger on SQLite: round trips, "what changed" in one query, WAL under concurrent writers."""

from __future__ import annotations

import multiprocessing
import random
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event, text

from kb.errors import InfrastructureError, LedgerUnavailable
from kb.ledger import LedgerEntry, Status, doc_id_for, pending_work
from kb.ledger_db import Ledger, sqlite_url
from kb.objectstore import ObjectInfo

AT = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def obj(key, etag="e1", version="v1", bucket="inbox"):
    return ObjectInfo(bucket, key, etag, 10, version)


def entry(key, status, etag="e1", version="v1", bucket="inbox", **fields):
    return LedgerEntry(doc_id_for(bucket, key), bucket, key, etag, version, 10, status, **fields)


@pytest.fixture
def ledger(tmp_path):
    return Ledger(sqlite_url(tmp_path / "ledger.db"))


def test_an_entry_round_trips_with_every_field(ledger):
    e = entry("a.pdf", Status.INDEXED, sha256="ab" * 32, pages=3, chunks=7, error={"code": "x", "message": "y"},
              failed_pages=[{"page": 2, "reason": "blank"}], index_signature="sig-1", attempts=2)
    ledger.put(e)
    got = ledger.get(e.doc_id)
    assert got == e  # put stamps updated_at on the entry it was given
    assert got.status is Status.INDEXED
    assert ledger.get(doc_id_for("inbox", "other.pdf")) is None
    e.status, e.chunks = Status.FAILED, 8
    ledger.put(e)
    assert (ledger.get(e.doc_id).status, ledger.get(e.doc_id).chunks, ledger.count()) == (Status.FAILED, 8, 1)


def _keys(objs):
    return sorted(o.key for o in objs)


def _mixed_case():
    entries = [
        entry("same.pdf", Status.INDEXED, index_signature="sig"),
        entry("old-embedder.pdf", Status.INDEXED, index_signature="old-sig"),
        entry("edited.pdf", Status.INDEXED, index_signature="sig"),
        entry("new-version-id.pdf", Status.INDEXED, index_signature="sig"),
        entry("gone.pdf", Status.INDEXED, index_signature="sig"),
        entry("gone-long-ago.pdf", Status.DELETED),
        entry("bad.pdf", Status.QUARANTINED),
        entry("flaky.pdf", Status.FAILED, attempts=1, next_attempt_at=(AT - timedelta(seconds=1)).isoformat()),
        entry("waiting.pdf", Status.FAILED, attempts=1, next_attempt_at=(AT + timedelta(hours=1)).isoformat()),
        entry("stuck.pdf", Status.FAILED, attempts=3),
        entry("back.pdf", Status.DELETED),
        entry("elsewhere.pdf", Status.INDEXED, bucket="other"),
        entry("sub/gone.pdf", Status.INDEXED, index_signature="sig"),
        entry("no-version.pdf", Status.INDEXED, version=None, index_signature="sig"),
        entry("odd%_key.pdf", Status.INDEXED, index_signature="sig"),
    ]
    listing = [obj("same.pdf"), obj("old-embedder.pdf"), obj("edited.pdf", etag="e2", version="v2"),
               obj("new-version-id.pdf", version="v9"), obj("bad.pdf"), obj("flaky.pdf"), obj("waiting.pdf"),
               obj("stuck.pdf"), obj("back.pdf"), obj("new.pdf"), obj("no-version.pdf", version=None),
               obj("odd%_key.pdf")]
    return entries, listing


def test_what_changed_is_what_the_rules_say_for_every_kind_of_row(ledger):
    entries, listing = _mixed_case()
    ledger.put_many(entries)
    work = ledger.changes("inbox", "", listing, max_attempts=3, index_signature="sig", at=AT)
    expected = pending_work("inbox", listing, {e.doc_id: e for e in entries}, 3, "sig", at=AT)
    for part in ("new", "changed", "retry", "backing_off", "unchanged"):
        assert _keys(getattr(work, part)) == _keys(getattr(expected, part)), part
    assert sorted(e.key for e in work.deleted) == sorted(e.key for e in expected.deleted) == ["gone.pdf", "sub/gone.pdf"]
    assert _keys(work.new) == ["back.pdf", "new.pdf"]
    assert _keys(work.changed) == ["edited.pdf", "new-version-id.pdf", "old-embedder.pdf"]
    assert _keys(work.unchanged) == ["bad.pdf", "no-version.pdf", "odd%_key.pdf", "same.pdf", "stuck.pdf"]


def test_a_prefix_limits_the_deleted_rows_and_its_wildcards_are_literal(ledger):
    entries, _ = _mixed_case()
    ledger.put_many(entries)
    work = ledger.changes("inbox", "sub/", [], max_attempts=3, index_signature="sig", at=AT)
    assert [e.key for e in work.deleted] == ["sub/gone.pdf"]
    # "odd%" must not match "odd-anything" through LIKE: the prefix is escaped
    ledger.put(entry("oddXYZ.pdf", Status.INDEXED))
    work = ledger.changes("inbox", "odd%", [], max_attempts=3, at=AT)
    assert [e.key for e in work.deleted] == ["odd%_key.pdf"]


def test_sensing_a_large_steady_bucket_is_one_select_and_returns_no_work(ledger):
    listing = [obj(f"doc-{i:05d}.pdf") for i in range(3000)]
    ledger.put_many(entry(o.key, Status.INDEXED, index_signature="sig") for o in listing[:2999])
    statements = []
    event.listen(ledger.engine, "before_cursor_execute",
                 lambda conn, cursor, stmt, params, context, many: statements.append(stmt.split()[0].upper()))
    work = ledger.changes("inbox", "", listing, max_attempts=3, index_signature="sig", at=AT)
    assert _keys(work.new) == ["doc-02999.pdf"] and len(work.unchanged) == 2999
    assert statements.count("SELECT") == 1, statements  # the one query; the rest create, fill and drop the listing


def _writer(url: str, worker: int, n: int) -> None:
    ledger = Ledger(url)
    for i in range(n):
        ledger.put(entry(f"w{worker}-{i}.pdf", Status.INDEXED))


def test_processes_writing_at_once_lose_nothing_in_wal_mode(tmp_path):
    url = sqlite_url(tmp_path / "ledger.db")
    Ledger(url).count()  # creates the tables before the writers race
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(url, w, 150)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ledger = Ledger(url)
    assert ledger.count() == 450
    with ledger.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_a_database_that_cannot_be_reached_is_a_typed_infrastructure_error(tmp_path):
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ledger = Ledger(f"postgresql+psycopg2://kb:secret-pw@127.0.0.1:{port}/kb_ledger?connect_timeout=2")
    with pytest.raises(LedgerUnavailable) as info:
        ledger.get(doc_id_for("inbox", "a.pdf"))
    assert isinstance(info.value, InfrastructureError) and "secret-pw" not in str(info.value)


def test_random_listings_agree_with_the_rules(ledger):
    rng = random.Random(7)
    statuses = list(Status)
    entries = {}
    for i in range(300):
        e = entry(f"k{i}.pdf", rng.choice(statuses), etag=rng.choice(["e1", "e2"]), version=rng.choice(["v1", None]),
                  attempts=rng.randint(0, 4), index_signature=rng.choice(["sig", "old", None]),
                  next_attempt_at=rng.choice([None, (AT + timedelta(minutes=rng.randint(-60, 60))).isoformat()]))
        entries[e.doc_id] = e
    ledger.put_many(entries.values())
    listing = [obj(f"k{i}.pdf", etag=rng.choice(["e1", "e2"]), version=rng.choice(["v1", None]))
               for i in rng.sample(range(400), 250)]
    work = ledger.changes("inbox", "", listing, max_attempts=3, index_signature="sig", at=AT)
    expected = pending_work("inbox", listing, entries, 3, "sig", at=AT)
    for part in ("new", "changed", "retry", "backing_off", "unchanged"):
        assert _keys(getattr(work, part)) == _keys(getattr(expected, part)), part
    assert sorted(e.key for e in work.deleted) == sorted(e.key for e in expected.deleted)
