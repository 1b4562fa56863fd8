"""Bad documents are quarantined with a typed reason; the rest of the run succeeds."""

from __future__ import annotations

import pytest

from kb.ledger import Status, doc_id_for
from kb.ledger_db import Ledger
from kb.settings import PipelineSettings
from tests.integration.dagrun import points_by_doc, run_ingest
from tests.pdfs import coded_pages, encrypted_pdf, make_pdf, truncated_pdf

pytestmark = pytest.mark.integration

BAD = {
    "bad/notes.pdf": (b"these are plain notes, not a PDF", "not_pdf"),
    "bad/zero.pdf": (b"", "empty_file"),
    "bad/truncated.pdf": (truncated_pdf(), "corrupt_pdf"),
    "bad/locked.pdf": (encrypted_pdf(), "encrypted_pdf"),
}


def _quarantine_records(kb_env):
    store = kb_env["store"]
    return {o.key: store.get_json(kb_env["artifacts"], o.key) for o in store.list_latest(kb_env["artifacts"], "quarantine/")}


def test_bad_inputs_are_quarantined_and_the_good_one_is_indexed(kb_env, airflow_db):
    store = kb_env["store"]
    store.put_bytes(kb_env["inbox"], "good.pdf", make_pdf(coded_pages("good", 2)))
    versions = {key: store.put_bytes(kb_env["inbox"], key, data).version_id for key, (data, _) in BAD.items()}

    dr, summary = run_ingest()
    assert dr.state == "success"
    assert summary["documents_indexed"] == 1 and summary["documents_quarantined"] == len(BAD)
    assert points_by_doc("good.pdf")

    records = _quarantine_records(kb_env)
    by_key = {r["key"]: r for r in records.values()}
    assert set(by_key) == set(BAD)
    ledger = Ledger.for_settings(PipelineSettings())
    for key, (_, code) in BAD.items():
        record = by_key[key]
        assert record["code"] == code
        assert record["message"]
        assert record["version_id"] == versions[key]
        assert record["bucket"] == kb_env["inbox"]
        entry = ledger.get(doc_id_for(kb_env["inbox"], key))
        assert entry.status == Status.QUARANTINED and entry.error["code"] == code
        assert points_by_doc(key) == []

    # not retried: the next run sees nothing to do and writes no new records
    dr, summary = run_ingest()
    assert dr.state == "success"
    assert summary["documents_unchanged"] == len(BAD) + 1
    assert summary["documents_quarantined"] == 0
    assert _quarantine_records(kb_env).keys() == records.keys()

    # a fixed version of a quarantined document is picked up again
    store.put_bytes(kb_env["inbox"], "bad/zero.pdf", make_pdf(coded_pages("fixed", 1)))
    dr, summary = run_ingest()
    assert dr.state == "success" and summary["documents_indexed"] == 1
    assert points_by_doc("bad/zero.pdf")
