"""Ranges adapt: a range refused for a limit of ours is split down to single pages, a split
is never undone, and only a page that fails alone is left out (real S3 server, real
engine behind scripted limits, the embedded store (Qdrant Edge))."""

from __future__ import annotations

import pytest

from kb.artifacts import ArtifactKeys
from kb.errors import RangeTimedOut, RangeTooLarge
from kb.ledger import Status, doc_id_for
from kb.pipeline.extract import engine_extractor, extract
from kb.pipeline.index import index_batch
from kb.pipeline.messages import PageRange
from ocr_engine.api.pages import PageStatus
from tests.integration.stages import context, plan_run
from tests.pdfs import coded_pages, make_pdf

pytestmark = pytest.mark.integration
KEY = "long-manual.pdf"


class Reader:
    """The real engine behind limits a test sets, recording every range it is asked for."""

    def __init__(self, max_pages: int = 10_000, slow_page: int | None = None, bad_page: int | None = None,
                 bad_status: str = "repeated"):
        self.max_pages, self.slow_page, self.bad_page, self.bad_status = max_pages, slow_page, bad_page, bad_status
        self.calls: list[tuple[int, int]] = []

    def __call__(self, data, first, last, backend="auto"):
        self.calls.append((first, last))
        if last - first + 1 > self.max_pages:
            raise RangeTooLarge(f"the service answered 413 too_many_pages: {last - first + 1} pages")
        if self.slow_page is not None and first <= self.slow_page <= last:
            raise RangeTimedOut("the service answered 504 timeout: parsing took longer than 20s")
        pages = engine_extractor(data, first, last, backend)
        for p in pages:
            if p.page == self.bad_page:
                p.status, p.reason = PageStatus(self.bad_status), "distinct-20 0.12 < 0.5"
        return pages


@pytest.fixture
def one_range(kb_env, monkeypatch):
    """A 12-page document planned as one range (the pipeline's own caps set high)."""
    monkeypatch.setenv("KB_MAX_TEXTLAYER_PAGES_PER_RANGE", "12")
    kb_env["store"].put_bytes(kb_env["inbox"], KEY, make_pdf(coded_pages("long", 12)))
    ctx = context()
    plan = plan_run(ctx, "run-1")
    [rng] = plan.ranges
    assert (rng.first, rng.last) == (1, 12)
    return ctx, plan, rng


def _result(ctx, rng):
    return ctx.store.get_json(ctx.artifacts, rng.result_key)


def test_a_range_over_the_page_limit_is_split_and_never_sent_whole_again(one_range):
    ctx, plan, rng = one_range
    reader = Reader(max_pages=4)
    assert extract(ctx, rng, reader) == rng.result_key
    result = _result(ctx, rng)
    assert [p["page"] for p in result["pages"]] == list(range(1, 13))
    assert all(p["status"] == "ok" and f"LONG-{p['page']:03d}" in p["markdown"] for p in result["pages"])
    assert reader.calls == [(1, 12), (1, 6), (1, 3), (4, 6), (7, 12), (7, 9), (10, 12)]
    assert result["splits"] == 3 and result["failed_pages"] == []
    assert ctx.store.exists(ctx.artifacts, ArtifactKeys.split_marker(rng.doc_id, rng.sha256, 1, 12))

    # The task dies before its result is stored (simulated: the result is gone) and runs
    # again: the refused ranges are not sent again, the parts that passed are reused.
    ctx.store.remove(ctx.artifacts, rng.result_key)
    again = Reader(max_pages=4)
    assert extract(ctx, rng, again) == rng.result_key
    assert again.calls == []
    assert _result(ctx, rng)["pages"] == result["pages"]

    [indexed] = index_batch(ctx, plan.documents, "run-1")
    assert indexed.status == Status.INDEXED and indexed.pages == 12 and indexed.failed_pages == []
    assert indexed.ranges_split == 3


def test_repeated_pages_make_a_range_split_until_the_page_reads_well_alone(one_range):
    ctx, _, rng = one_range

    class LoopsInLongRanges(Reader):
        def __call__(self, data, first, last, backend="auto"):
            pages = super().__call__(data, first, last, backend)
            if last - first + 1 > 3:  # a decoder loop that only long ranges fall into
                pages[-1].status, pages[-1].reason = PageStatus.REPEATED, "distinct-20 0.12 < 0.5"
            return pages

    reader = LoopsInLongRanges()
    extract(ctx, rng, reader)
    result = _result(ctx, rng)
    assert [p["status"] for p in result["pages"]] == ["ok"] * 12
    assert max(b - a + 1 for a, b in reader.calls[1:]) <= 6 and result["splits"] >= 1


def test_a_page_that_fails_alone_is_left_out_and_the_document_indexed_within_the_share(one_range, monkeypatch):
    ctx, plan, rng = one_range
    reader = Reader(slow_page=7)  # every range holding page 7 times out, page 7 alone too
    extract(ctx, rng, reader)
    result = _result(ctx, rng)
    [failed] = [p for p in result["pages"] if p["status"] == "failed"]
    assert failed["page"] == 7 and failed["markdown"] == "" and "range_timeout" in failed["reason"]
    assert result["failed_pages"] == [{"page": 7, "reason": failed["reason"]}]
    assert (7, 7) in reader.calls and len(reader.calls) <= 2 * 4 + 1  # log2(12) levels, no storm

    # 1 page of 12 is over the default share (0.05): the document is quarantined, with why
    [result_1] = index_batch(ctx, plan.documents, "run-1")
    assert result_1.status == Status.QUARANTINED and "on failed" in result_1.message

    # within a share of 0.1 it is indexed without page 7; the ledger and a record say so
    monkeypatch.setenv("KB_QUALITY_MAX_FAILED_PAGE_SHARE", "0.1")
    ctx = context()
    [result_2] = index_batch(ctx, plan.documents, "run-2")
    assert result_2.status == Status.INDEXED and result_2.failed_pages == [{"page": 7, "reason": failed["reason"]}]
    entry = ctx.ledger.get(doc_id_for(rng.bucket, KEY))
    assert entry.status == Status.INDEXED and entry.failed_pages == result_2.failed_pages
    record = ctx.store.get_json(ctx.artifacts, result_2.record)
    assert record["event"] == "pages-failed" and record["failed_pages"] == result_2.failed_pages

    from tests.integration.dagrun import points_by_doc

    pages = {n for p in points_by_doc(KEY) for n in p.payload["pages"]}
    assert pages == set(range(1, 13)) - {7}

    # a backfill reads the failed page again, and only that page
    fixed = Reader()
    retry = PageRange.from_dict({**rng.as_dict(), "retry_failed": True})
    extract(ctx, retry, fixed)
    assert fixed.calls == [(7, 7)]
    assert _result(ctx, rng)["failed_pages"] == []


def test_with_splitting_off_a_refused_range_fails_its_task(one_range, monkeypatch):
    monkeypatch.setenv("KB_SPLIT_RANGES", "false")
    ctx, _, rng = one_range
    with pytest.raises(RangeTooLarge):
        extract(context(), rng, Reader(max_pages=4))
    assert not ctx.store.exists(ctx.artifacts, rng.result_key)
