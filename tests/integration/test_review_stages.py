"""Review decisions through the pipeline's stages (no Airflow), on the real S3 server and the
local engine: what each decision changes in plan, extract and index."""

from __future__ import annotations

import pytest

from kb.decisions import Decision
from kb.ledger import Status, doc_id_for
from kb.pipeline.extract import extract
from kb.pipeline.index import index_batch
from tests.integration.stages import context, plan_run
from tests.pdfs import coded_pages, make_pdf

pytestmark = pytest.mark.integration


def _extract_all(ctx, plan, run_id):
    return [extract(ctx, rng, run_id=run_id) for rng in plan.ranges]


def test_accept_indexes_the_pages_that_passed_and_is_taken_up_once(kb_env):
    ctx = context()
    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "accepted.pdf", make_pdf(coded_pages("accepted", 1) + ["", ""]))
    store.put_bytes(inbox, "undecided.pdf", make_pdf(coded_pages("undecided", 1) + ["", ""]))
    first = plan_run(ctx, "run-1")
    _extract_all(ctx, first, "run-1")
    results = index_batch(ctx, first.documents, "run-1")
    assert {r.key: r.status for r in results} == {"accepted.pdf": Status.QUARANTINED,
                                                  "undecided.pdf": Status.QUARANTINED}
    assert plan_run(ctx, "run-2").documents == [], "quarantined versions are sticky"

    accepted = doc_id_for(inbox, "accepted.pdf")
    ctx.ledger.decide(accepted, Decision.ACCEPT, decided_by="alice")
    again = plan_run(ctx, "run-3")
    assert [(d.key, d.decision) for d in again.documents] == [("accepted.pdf", "accept")]
    _extract_all(ctx, again, "run-3")
    [result] = index_batch(ctx, again.documents, "run-3")
    assert result.status == Status.INDEXED and result.chunks, result
    entry = ctx.ledger.get(accepted)
    assert entry.status == Status.INDEXED and entry.current_review.applied_run == "run-3"
    assert ctx.ledger.get(doc_id_for(inbox, "undecided.pdf")).status == Status.QUARANTINED
    assert [e.key for e in ctx.ledger.pending_reviews(inbox)] == ["undecided.pdf"]
    assert plan_run(ctx, "run-4").documents == [], "a decision is taken up once"


def test_reextract_ocr_reads_every_page_with_the_ocr_backend(kb_env):
    from kb.errors import DocumentError
    from kb.pipeline.records import quarantine

    ctx = context()
    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "textlayer.pdf", make_pdf(coded_pages("ocrme", 2)))
    first = plan_run(ctx, "run-1")
    pages = [p for key in _extract_all(ctx, first, "run-1") for p in store.get_json(kb_env["artifacts"], key)["pages"]]
    assert {p["backend"] for p in pages} == {"textlayer"}
    # a reviewer distrusts the text layer of a quarantined version
    quarantine(ctx, first.documents[0].obj, DocumentError("the text layer does not match the page"), "run-1",
               sha256=first.documents[0].sha256)
    ctx.ledger.decide(doc_id_for(inbox, "textlayer.pdf"), Decision.REEXTRACT_OCR, decided_by="alice")

    again = plan_run(ctx, "run-2")
    [document] = again.documents
    assert document.decision == "reextract-ocr" and document.scanned_pages == [1, 2]
    assert {r.backend for r in again.ranges} == {"ppocr"} and set(document.ranges).isdisjoint(first.documents[0].ranges)
    pages = [p for key in _extract_all(ctx, again, "run-2") for p in store.get_json(kb_env["artifacts"], key)["pages"]]
    assert [p["page"] for p in pages] == [1, 2] and {p["backend"] for p in pages} == {"ppocr"}, pages
    assert "OCRME-001" in pages[0]["markdown"].replace(" ", "").upper() or "OCRME" in pages[0]["markdown"].upper()


def test_reextract_limits_thresholds_apply_to_the_decided_document_alone(kb_env):
    ctx = context()
    store, inbox = kb_env["store"], kb_env["inbox"]
    for name in ("relaxed", "strict"):
        store.put_bytes(inbox, f"{name}.pdf", make_pdf(coded_pages(name, 1) + ["", ""]))
    first = plan_run(ctx, "run-1")
    _extract_all(ctx, first, "run-1")
    assert {r.status for r in index_batch(ctx, first.documents, "run-1")} == {Status.QUARANTINED}
    ctx.ledger.decide(doc_id_for(inbox, "relaxed.pdf"), Decision.REEXTRACT_LIMITS, decided_by="alice",
                      params={"quality": {"max_empty_page_share": 0.9}})
    ctx.ledger.decide(doc_id_for(inbox, "strict.pdf"), Decision.REEXTRACT_LIMITS, decided_by="alice")
    again = plan_run(ctx, "run-2")  # both in one run, one index batch
    assert sorted(d.key for d in again.documents) == ["relaxed.pdf", "strict.pdf"]
    _extract_all(ctx, again, "run-2")
    results = {r.key: r.status for r in index_batch(ctx, again.documents, "run-2")}
    assert results == {"relaxed.pdf": Status.INDEXED, "strict.pdf": Status.QUARANTINED}
    assert [e.key for e in ctx.ledger.pending_reviews(inbox)] == ["strict.pdf"], "not fixed: back in the queue"
