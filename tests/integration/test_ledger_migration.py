"""The JSON ledger of earlier versions (one object per document in the artifacts bucket)
moves into the SQL ledger the first time a process opens it, and only then."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from kb.artifacts import ArtifactKeys
from kb.ledger import LedgerEntry, Status, doc_id_for
from kb import ledger_db
from kb.ledger_db import Ledger
from kb.settings import PipelineSettings

pytestmark = pytest.mark.integration


def _json_entry(kb_env, key: str, status: Status, chunks: int) -> LedgerEntry:
    entry = LedgerEntry(doc_id_for(kb_env["inbox"], key), kb_env["inbox"], key, "etag-1", "v1", 100, status,
                        chunks=chunks, indexed_chunks=chunks, index_signature="sig")
    kb_env["store"].put_json(kb_env["artifacts"], ArtifactKeys.ledger(entry.doc_id), asdict(entry))
    return entry


def test_the_json_ledger_is_migrated_on_first_open_and_never_again(kb_env):
    old = [_json_entry(kb_env, f"old-{i}.pdf", Status.INDEXED, i) for i in range(5)]
    quarantined = _json_entry(kb_env, "bad.pdf", Status.QUARANTINED, 0)

    ledger = Ledger.for_settings(PipelineSettings(), kb_env["store"])
    assert ledger.count() == 6
    for e in [*old, quarantined]:
        got = ledger.get(e.doc_id)
        assert (got.key, got.status, got.chunks, got.version_id) == (e.key, e.status, e.chunks, e.version_id)

    # What sense sees of them: the indexed ones are settled, the quarantined one stays as it is.
    work = ledger.changes(kb_env["inbox"], "", [], max_attempts=3, index_signature="sig")
    assert sorted(e.key for e in work.deleted) == sorted(e.key for e in [*old, quarantined])

    # A later process (a new Ledger on the same database) does not import again: a JSON
    # object written by an old worker after the move is not taken over a newer SQL row.
    newer = ledger.get(old[0].doc_id)
    newer.status = Status.FAILED
    ledger.put(newer)
    _json_entry(kb_env, "old-0.pdf", Status.INDEXED, 0)
    _json_entry(kb_env, "late.pdf", Status.INDEXED, 1)
    ledger_db._prepared.clear()  # as a new process: the database's own record must stop a second import
    again = Ledger.for_settings(PipelineSettings(), kb_env["store"])
    assert again.get(old[0].doc_id).status == Status.FAILED
    assert again.get(doc_id_for(kb_env["inbox"], "late.pdf")) is None
    assert again.count() == 6


def test_an_empty_installation_migrates_nothing_and_works(kb_env):
    ledger = Ledger.for_settings(PipelineSettings(), kb_env["store"])
    assert ledger.count() == 0
    assert ledger.get(doc_id_for(kb_env["inbox"], "x.pdf")) is None
