"""Failures that may pass are retried by later runs, after a backoff, a bounded number of times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kb.errors import ExtractionFailed, InfrastructureError, ObjectChanged
from kb.ledger import Status, doc_id_for
from kb.pipeline.extract import extract
from kb.pipeline.index import index_batch
from kb.pipeline.messages import PageRange
from kb.pipeline.sense import sense
from ocr_engine.api.pages import PageResult, PageStatus
from tests.integration.stages import context, plan_run
from tests.pdfs import coded_pages, make_pdf

pytestmark = pytest.mark.integration


def test_a_missing_range_result_fails_the_document_backs_off_then_quarantines_it(kb_env, embedder, monkeypatch):
    monkeypatch.setenv("KB_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("KB_RETRY_BACKOFF_S", "0")
    ctx = context()
    kb_env["store"].put_bytes(kb_env["inbox"], "flaky.pdf", make_pdf(coded_pages("flaky", 4)))

    for attempt, expected in ((1, Status.FAILED), (2, Status.QUARANTINED)):
        plan = plan_run(ctx, f"run-{attempt}")
        assert [d.key for d in plan.documents] == ["flaky.pdf"], f"attempt {attempt} should retry"
        # extract only the first of the two ranges: the second "failed on the GPU"
        extract(ctx, plan.ranges[0])
        [result] = index_batch(ctx, plan.documents, run_id=f"run-{attempt}")
        assert result.status == expected
        entry = ctx.ledger.get(doc_id_for(kb_env["inbox"], "flaky.pdf"))
        assert entry.status == expected and entry.error["code"] == "incomplete_extraction"

    assert sense(ctx).todo == []  # quarantined: no third attempt
    assert next(ctx.store.list_latest(kb_env["artifacts"], "quarantine/"))


def test_a_failed_version_waits_out_its_backoff_before_it_is_tried_again(kb_env, embedder, monkeypatch):
    monkeypatch.setenv("KB_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("KB_RETRY_BACKOFF_S", "600")
    monkeypatch.setenv("KB_RETRY_BACKOFF_MAX_S", "1500")
    ctx = context()
    kb_env["store"].put_bytes(kb_env["inbox"], "stuck.pdf", make_pdf(coded_pages("stuck", 4)))
    doc_id = doc_id_for(kb_env["inbox"], "stuck.pdf")

    delays = []
    for attempt in (1, 2, 3):
        before = datetime.now(timezone.utc)
        plan = plan_run(ctx, f"run-{attempt}")
        [result] = index_batch(ctx, plan.documents, run_id=f"run-{attempt}")  # no range was extracted
        entry = ctx.ledger.get(doc_id)
        assert result.status == entry.status == Status.FAILED and entry.attempts == attempt
        assert result.next_attempt_at == entry.next_attempt_at
        delays.append((datetime.fromisoformat(entry.next_attempt_at) - before).total_seconds())
        sensed = sense(ctx)
        assert sensed.todo == [] and sensed.backing_off == 1, "not tried again before its time"
        assert sense(ctx, force=True).todo, "a manual backfill does not wait"
        # time passes: the backoff is over
        entry.next_attempt_at = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
        ctx.ledger.put(entry)
        assert [o.key for o in sense(ctx).todo] == ["stuck.pdf"]
    # doubling from 600 s, capped at 1500 s
    assert [round(d / 100) * 100 for d in delays] == [600, 1200, 1500]


def test_an_object_overwritten_after_planning_is_not_indexed_from_the_wrong_bytes(kb_env):
    ctx = context()
    kb_env["store"].put_bytes(kb_env["inbox"], "moving.pdf", make_pdf(coded_pages("moving", 2)))
    plan = plan_run(ctx, "run-1")
    rng = PageRange.from_dict({**plan.ranges[0].as_dict(), "version_id": None})  # as on a bucket without versioning
    kb_env["store"].put_bytes(kb_env["inbox"], "moving.pdf", make_pdf(coded_pages("moved", 2)))
    with pytest.raises(ObjectChanged) as info:
        extract(ctx, rng)
    assert isinstance(info.value, InfrastructureError)  # failed, tried again later; never quarantined


def test_with_splitting_off_a_range_with_a_failed_page_is_not_stored_so_it_is_tried_again(kb_env, monkeypatch):
    monkeypatch.setenv("KB_SPLIT_RANGES", "false")
    ctx = context()
    kb_env["store"].put_bytes(kb_env["inbox"], "ocr-broke.pdf", make_pdf(coded_pages("broke", 2)))
    rng = plan_run(ctx, "run-1").ranges[0]

    def broken_engine(data, first, last):
        return [PageResult(page=n, markdown="", status=PageStatus.FAILED, reason="CUDA error")
                for n in range(first, last + 1)]

    with pytest.raises(ExtractionFailed, match="CUDA error") as info:
        extract(ctx, rng, extractor=broken_engine)
    assert isinstance(info.value, InfrastructureError)
    assert not ctx.store.exists(kb_env["artifacts"], rng.result_key)
    assert extract(ctx, rng) == rng.result_key  # the next try, with a working engine, stores it


@pytest.mark.faults
def test_a_torn_range_result_is_never_used_the_pages_are_read_again(kb_env, embedder):
    """A result whose bytes do not match the checksum written with them (what a torn write
    on a store without atomic PUTs would leave) is not taken for a finished range."""
    from kb.objectstore import CHECKSUM_META

    ctx = context()
    kb_env["store"].put_bytes(kb_env["inbox"], "torn.pdf", make_pdf(coded_pages("torn", 2)))
    plan = plan_run(ctx, "run-1")
    [rng] = plan.ranges
    whole = b'{"doc_id": "x", "pages": [{"page": 1, "markdown": "half of a wri'
    kb_env["store"].put_bytes(kb_env["artifacts"], rng.result_key, whole,
                              metadata={CHECKSUM_META: "0" * 64})  # the checksum of the whole, never written
    assert extract(ctx, rng) == rng.result_key
    stored = ctx.store.get_json(kb_env["artifacts"], rng.result_key)
    assert [p["page"] for p in stored["pages"]] == [1, 2] and "TORN-002" in stored["pages"][1]["markdown"]
    [result] = index_batch(ctx, plan.documents, run_id="run-1")
    assert result.status == Status.INDEXED and result.pages == 2


@pytest.mark.faults
def test_the_s3_server_unreachable_is_an_infrastructure_error_not_a_crash(kb_env):
    from kb.errors import StorageUnavailable
    from kb.objectstore import ObjectStore
    from tests.conftest import free_ports

    [port] = free_ports(1)  # nothing listens there
    store = ObjectStore.connect(f"127.0.0.1:{port}", "key", "secret")
    for call in (lambda: store.get_json("kb-artifacts", "ledger/x.json"), lambda: store.put_json("kb-artifacts", "k.json", {}),
                 lambda: list(store.list_latest("inbox"))):
        with pytest.raises(StorageUnavailable) as info:
            call()
        assert isinstance(info.value, InfrastructureError) and info.value.code == "storage_unavailable"
