"""Upgrading the reader re-chunks an existing store once, from its stored page results.

The store is first built as an earlier version of the project left it: an older chunking
version in the index signature, page results without the fields this version adds (page
size, heading levels, table grids), points without boxes, and one chunk more than the new
chunking makes. Against the real S3 server and the embedded store (Qdrant Edge)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np
import pymupdf
import pytest

from kb.pipeline import signature
from kb.pipeline.extract import engine_extractor, extract
from kb.pipeline.index import index_batch
from kb.pipeline.sense import sense
from kb.points import point_id
from kb.store import open_reader
from tests.integration.stages import context, plan_run
from kb.ledger import doc_id_for
from kb.limits import RangeLimits
from kb.pipeline.extract import local_engine
from ocr_engine.api.pages import EXTRACTION_VERSION, PageResult
from tests.pdfs import coded_pages, guide_pdf, make_pdf, scanned_copy

pytestmark = pytest.mark.integration
NEW_FIELDS = ("width", "height")
NEW_BLOCK_FIELDS = ("level", "rows", "col_x", "row_y")


def run(ctx, run_id: str, extractor, **how) -> tuple[int, list]:
    planned = plan_run(ctx, run_id, **how)
    for rng in planned.ranges:
        extract(ctx, rng, extractor, run_id=run_id)
    return len(planned.documents), index_batch(ctx, planned.documents, run_id)


def as_an_earlier_version_left_it(ctx) -> None:
    """Page results without this version's fields; points without boxes, and a stale chunk."""
    for obj in ctx.store.list_latest(ctx.artifacts, "pages/"):
        result = ctx.store.get_json(ctx.artifacts, obj.key)
        for page in result["pages"]:
            for name in NEW_FIELDS:
                page.pop(name, None)
            for block in page.get("blocks") or []:
                for name in NEW_BLOCK_FIELDS:
                    block.pop(name, None)
        ctx.store.put_json(ctx.artifacts, obj.key, result)
    with open_reader(ctx.settings) as vs:  # the embedded store in this process (no service runs here)
        points = vs.points(with_vectors=True)
        old = [{k: v for k, v in p.payload.items() if k not in ("boxes", "kind")} for p in points]
        vs.upsert([p.id for p in points], np.asarray([p.dense for p in points], dtype=np.float32),
                  [p.sparse for p in points], old)
        one = points[0]
        stale = point_id(one.payload["doc_id"], one.payload["sha256"], 999)
        vs.upsert([stale], np.asarray([one.dense], dtype=np.float32), [one.sparse],
                  [{**old[0], "chunk_index": 999}])


def test_an_upgrade_re_chunks_every_document_once_and_reads_no_page_again(kb_env, monkeypatch):
    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "guides/field-guide.pdf", guide_pdf())
    store.put_bytes(inbox, "scans/field-guide-scan.pdf", scanned_copy(guide_pdf(), dpi=150))
    ctx = context()

    monkeypatch.setattr(signature.chunking, "CHUNKING_VERSION", "pages-0")  # what an earlier version wrote
    planned, results = run(ctx, f"run-{uuid.uuid4().hex[:6]}", engine_extractor)
    assert planned == 2 and [r.status for r in results] == ["indexed", "indexed"]
    old_signature = signature.index_signature(ctx.settings)
    as_an_earlier_version_left_it(ctx)
    monkeypatch.undo()

    # the new version: both documents are work again, and no page is read again
    assert signature.index_signature(ctx.settings) != old_signature
    assert len(sense(ctx).todo) == 2
    reads = []

    def counting(data, first, last, backend="auto"):
        reads.append((first, last))
        return engine_extractor(data, first, last, backend)

    planned, results = run(ctx, "run-upgrade", counting)
    assert planned == 2 and [r.status for r in results] == ["indexed", "indexed"]
    assert reads == [], "page results were read again instead of reused"
    with open_reader(ctx.settings) as vs:
        points = vs.points()
    # exactly the new point ids remain: the old chunking made more chunks of the same bytes,
    # and those with higher indexes must not survive beside the new ones
    expected = {point_id(r.doc_id, ctx.ledger.get(r.doc_id).indexed_sha256, i) for r in results for i in range(r.chunks)}
    assert {str(p.id) for p in points} == expected, "stale chunks of the old chunking are left"
    assert all(p.payload.get("boxes") and p.payload["boxes"][0]["bbox"] for p in points)
    spanning = [p for p in points if "certified technician" in p.payload["text"]]
    assert {p.payload["key"] for p in spanning} == {"guides/field-guide.pdf", "scans/field-guide-scan.pdf"}
    assert all(p.payload["pages"] == [1, 2] for p in spanning)
    assert all(ctx.ledger.get(r.doc_id).index_signature == signature.index_signature(ctx.settings) for r in results)

    # once: the next run has nothing to do
    assert sense(ctx).todo == []


def test_a_reread_reads_again_only_the_pages_older_reading_rules_read(kb_env):
    """After an upgrade of the engine's reading rules (``EXTRACTION_VERSION``): a plain backfill
    reuses every stored page; ``reread`` reads again the pages whose results name no version or
    another one, and no other page."""
    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "guides/field-guide.pdf", guide_pdf())
    store.put_bytes(inbox, "guides/bulletin.pdf", make_pdf(coded_pages("bulletin", 2)))
    ctx = context()
    planned, results = run(ctx, "run-first", engine_extractor)
    assert planned == 2 and [r.status for r in results] == ["indexed", "indexed"]
    assert sorted(r.pages_read for r in results) == sorted(r.pages for r in results), "the first run read them all"
    keys = [o.key for o in store.list_latest(ctx.artifacts, "pages/")]
    assert keys and all(p["extraction_version"] == EXTRACTION_VERSION
                        for k in keys for p in store.get_json(ctx.artifacts, k)["pages"])

    guide = doc_id_for(inbox, "guides/field-guide.pdf")
    older = [k for k in keys if f"/{guide}/" in k]
    for key in older:  # as an engine of older rules left the guide's pages
        result = store.get_json(ctx.artifacts, key)
        for page in result["pages"]:
            page.pop("extraction_version")
            page["markdown"] = "read by older rules"
        store.put_json(ctx.artifacts, key, result)
    reads = []

    def counting(data, first, last, backend="auto"):
        reads.append((first, last))
        return engine_extractor(data, first, last, backend)

    planned, results = run(ctx, "run-backfill", counting, force=True)
    assert planned == 2 and reads == [], "a plain backfill reuses every stored page"
    assert [r.pages_read for r in results] == [0, 0], "and its results say it read none"
    bulletin = doc_id_for(inbox, "guides/bulletin.pdf")
    assert ctx.ledger.get(guide).extraction_versions == [""] and ctx.ledger.get(bulletin).extraction_versions == [
        EXTRACTION_VERSION]
    # the bulletin's entry as one written before entries kept extraction versions: plan cannot
    # tell that it is current, so index must
    ctx.ledger.update(bulletin, lambda e: replace(e, extraction_versions=None))

    planned, results = run(ctx, "run-reread", counting, reread=True)
    assert planned == 2 and [r.status for r in results] == ["indexed", "indexed"]
    guide_pages = pymupdf.open(stream=guide_pdf(), filetype="pdf").page_count
    assert sorted(reads) == [(1, guide_pages)], "only the guide's pages, read by older rules, are read again"
    assert {r.key: r.pages_read for r in results} == {"guides/field-guide.pdf": guide_pages, "guides/bulletin.pdf": 0}
    for key in older:
        pages = store.get_json(ctx.artifacts, key)["pages"]
        assert all(p["extraction_version"] == EXTRACTION_VERSION and "older rules" not in p["markdown"] for p in pages)
    with open_reader(ctx.settings) as vs:
        assert not [p for p in vs.points(guide) if "older rules" in p.payload["text"]]
    # the bulletin read nothing again and its points are current: kept, not embedded and written
    # again; its entry learnt its pages' versions
    assert (ctx.ledger.get(guide).run_id, ctx.ledger.get(bulletin).run_id) == ("run-reread", "run-backfill")
    kept = next(r for r in results if r.doc_id == bulletin)
    assert kept.chunks == ctx.ledger.get(bulletin).indexed_chunks and kept.chunks > 0
    assert ctx.ledger.get(bulletin).extraction_versions == ctx.ledger.get(guide).extraction_versions == [
        EXTRACTION_VERSION]

    # the next reread leaves both out in plan, before fetching them
    reads.clear()
    planned_run = plan_run(ctx, "run-reread-again", reread=True)
    assert planned_run.documents == [] and planned_run.ranges == []
    assert sorted(d["reason"] for d in planned_run.skipped) == ["read_by_current_rules"] * 2
    with open_reader(ctx.settings) as vs:
        assert len(vs.points(guide)) == ctx.ledger.get(guide).indexed_chunks, "and their points are still there"


def test_a_reread_reads_again_the_scanned_pages_another_ocr_model_read(kb_env):
    """After the OCR model is switched (new weights for the same backend, or another backend):
    ``reread`` reads again the OCR pages the earlier model read, and no text-layer page. The
    model a page names and the one the engine publishes are the same string, made one way."""
    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "mixed/scan.pdf", scanned_copy(make_pdf(coded_pages("ledger", 2)), dpi=100))
    store.put_bytes(inbox, "mixed/digital.pdf", make_pdf(coded_pages("bulletin", 2)))
    ctx = context()
    planned, results = run(ctx, "run-first", engine_extractor)
    assert planned == 2 and [r.status for r in results] == ["indexed", "indexed"]
    scan, digital = doc_id_for(inbox, "mixed/scan.pdf"), doc_id_for(inbox, "mixed/digital.pdf")
    current = RangeLimits.from_engine(local_engine()).ocr_model
    assert current and ctx.ledger.get(scan).ocr_models == [current] and ctx.ledger.get(digital).ocr_models == []

    keys = [o.key for o in store.list_latest(ctx.artifacts, "pages/")]
    older = [k for k in keys if f"/{scan}/" in k]
    assert older and [k for k in keys if f"/{digital}/" in k]
    for key in older:  # as the model before the switch left the scan's pages
        result = store.get_json(ctx.artifacts, key)
        for page in result["pages"]:
            assert page["backend"] != "textlayer"
            page["model_version"] = "an older model"
            page["markdown"] = "read by the older model"
        store.put_json(ctx.artifacts, key, result)
    # both entries as written before entries named their OCR models: plan cannot tell, extract must
    for doc in (scan, digital):
        ctx.ledger.update(doc, lambda e: replace(e, ocr_models=None))
    reads = []

    def counting(data, first, last, backend="auto"):
        reads.append((data, first, last))
        return engine_extractor(data, first, last, backend)

    planned, results = run(ctx, "run-reread", counting, reread=True)
    assert planned == 2 and [r.status for r in results] == ["indexed", "indexed"]
    assert [(first, last) for _, first, last in reads] == [(1, 2)] and reads[0][0] == store.get_bytes(inbox, "mixed/scan.pdf")
    assert {r.key: r.pages_read for r in results} == {"mixed/scan.pdf": 2, "mixed/digital.pdf": 0}
    for key in older:
        pages = store.get_json(ctx.artifacts, key)["pages"]
        assert all(PageResult.from_dict(p).ocr_model == current and "older model" not in p["markdown"] for p in pages)
    with open_reader(ctx.settings) as vs:
        assert not [p for p in vs.points(scan) if "older model" in p.payload["text"]]
    assert ctx.ledger.get(digital).run_id == "run-first", "the born-digital document was kept"
    assert ctx.ledger.get(scan).ocr_models == [current] and ctx.ledger.get(digital).ocr_models == []

    # the next reread leaves both out in plan; a switch of model after it plans the scan alone
    assert plan_run(ctx, "run-reread-again", reread=True).documents == []
    switched = replace(RangeLimits.from_engine(local_engine()), ocr_model=current + "-next")
    again = plan_run(ctx, "run-after-switch", reread=True, limits=switched)
    assert [d.key for d in again.documents] == ["mixed/scan.pdf"]
    assert {r.reuse_only_ocr_model for r in again.ranges} == {current + "-next"}
