"""Failures that may pass are retried by later runs, but only a bounded number of times."""

from __future__ import annotations

import pytest

from kb.errors import ObjectChanged
from kb.ledger import FAILED, QUARANTINED, Ledger, doc_id_for
from kb.objectstore import ObjectStore
from kb.pipeline import Steps
from kb.settings import PipelineSettings
from tests.pdfs import coded_pages, make_pdf

pytestmark = pytest.mark.integration


def test_a_missing_range_result_fails_the_document_then_quarantines_it(kb_env, embedder, monkeypatch):
    monkeypatch.setenv("KB_MAX_ATTEMPTS", "2")
    steps = Steps(ObjectStore.from_settings(), PipelineSettings())
    kb_env["store"].put_bytes(kb_env["inbox"], "flaky.pdf", make_pdf(coded_pages("flaky", 4)))

    for attempt, expected in ((1, FAILED), (2, QUARANTINED)):
        sensed = steps.sense()
        assert [o["key"] for o in sensed["todo"]] == ["flaky.pdf"], f"attempt {attempt} should retry"
        plan = steps.plan(sensed["todo"], run_id=f"run-{attempt}")
        # extract only the first of the two ranges: the second "failed on the GPU"
        steps.extract(plan["ranges"][0])
        [result] = steps.index_batch(plan["documents"], run_id=f"run-{attempt}")
        assert result["status"] == expected
        entry = Ledger(steps.store, kb_env["artifacts"]).get(doc_id_for(kb_env["inbox"], "flaky.pdf"))
        assert entry.status == expected and entry.error["code"] == "incomplete_extraction"

    assert steps.sense()["todo"] == []  # quarantined: no third attempt
    assert steps.store.list_latest(kb_env["artifacts"], "quarantine/").__next__()


def test_an_object_overwritten_after_planning_is_not_indexed_from_the_wrong_bytes(kb_env, monkeypatch):
    steps = Steps(ObjectStore.from_settings(), PipelineSettings())
    kb_env["store"].put_bytes(kb_env["inbox"], "moving.pdf", make_pdf(coded_pages("moving", 2)))
    plan = steps.plan(steps.sense()["todo"], run_id="run-1")
    rng = dict(plan["ranges"][0], version_id=None)  # as on a bucket without versioning
    kb_env["store"].put_bytes(kb_env["inbox"], "moving.pdf", make_pdf(coded_pages("moved", 2)))
    with pytest.raises(ObjectChanged) as info:
        steps.extract(rng)
    assert info.value.retryable


def test_a_range_with_a_failed_page_is_not_stored_so_it_is_tried_again(kb_env):
    from kb.errors import ExtractionFailed

    steps = Steps(ObjectStore.from_settings(), PipelineSettings())
    kb_env["store"].put_bytes(kb_env["inbox"], "ocr-broke.pdf", make_pdf(coded_pages("broke", 2)))
    plan = steps.plan(steps.sense()["todo"], run_id="run-1")
    rng = plan["ranges"][0]

    def broken_engine(data, first, last):
        return [{"page": n, "markdown": "", "status": "failed", "reason": "CUDA error"} for n in range(first, last + 1)]

    with pytest.raises(ExtractionFailed, match="CUDA error") as info:
        steps.extract(rng, extractor=broken_engine)
    assert info.value.retryable
    assert not steps.store.exists(kb_env["artifacts"], rng["result_key"])
    assert steps.extract(rng) == rng["result_key"]  # the next try, with a working engine, stores it
