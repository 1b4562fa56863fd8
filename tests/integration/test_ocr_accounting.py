"""The run summary accounts for what OCR cost: a scanned document read by the real unlimited
backend (a tiny random model) through sense, plan, extract, index and report (real S3 server,
the embedded store (Qdrant Edge))."""

from __future__ import annotations

import logging

import pytest

from kb.artifacts import ArtifactKeys
from kb.ledger import Status
from kb.limits import RangeLimits
from kb.pipeline.extract import extract, local_engine
from kb.pipeline.index import index_batch
from kb.pipeline.plan import plan
from kb.pipeline.report import report
from kb.pipeline.sense import sense
from tests.tiny_unlimited import build_tiny_model
from tests.integration.stages import context
from tests.pdfs import coded_pages, make_pdf, scanned_copy

pytestmark = pytest.mark.integration
KEY = "scanned-invoice.pdf"
PAGES = 2
GPU_COST_PER_HOUR = 3.5
# Seed 3's greedy output on a single page is a few words and an end token, so each page
# comes back ok and the document is indexed; the two-page call stops without its page
# separator (truncated), so the range is split once into single pages. (Seed 0 never ends
# within the budget: every page would fail, and failed pages are not accounted.)
SEED = 3


@pytest.fixture
def tiny_engine(kb_env, tmp_path, monkeypatch):
    """The pipeline's in-process engine on a tiny random Unlimited OCR, for this test only."""
    folder = build_tiny_model(tmp_path / "tiny-unlimited", seed=SEED)
    monkeypatch.setenv("OCR_MODEL_DIR", str(folder))
    monkeypatch.setenv("OCR_MAX_NEW_TOKENS_PER_PAGE", "24")
    monkeypatch.setenv("OCR_DPI", "72")
    monkeypatch.setenv("KB_GPU_COST_PER_HOUR", str(GPU_COST_PER_HOUR))
    local_engine.cache_clear()  # one engine per process: build it from this environment
    yield local_engine()
    local_engine.cache_clear()  # and let no other test inherit the tiny model


def test_the_run_summary_of_a_scanned_document_carries_the_accounting_fields(kb_env, tiny_engine, caplog):
    kb_env["store"].put_bytes(kb_env["inbox"], KEY, scanned_copy(make_pdf(coded_pages("invoice", PAGES)), dpi=72))
    ctx, run_id = context(), "run-1"
    sensed = sense(ctx)
    planned = plan(ctx, sensed, run_id, RangeLimits.from_engine(tiny_engine))
    [document] = planned.documents
    assert document.scanned_pages == [1, 2]
    for rng in planned.ranges:
        extract(ctx, rng, run_id=run_id)
    results = index_batch(ctx, planned.documents, run_id)
    [result] = results
    assert result.status == Status.INDEXED, (result.code, result.message)
    with caplog.at_level(logging.INFO, logger="kb.pipeline.report"):
        report(ctx, run_id, sensed, planned, results)

    summary = ctx.store.get_json(ctx.artifacts, ArtifactKeys.run_summary(run_id))
    ocr = summary["ocr"]
    assert ocr["pages"] == PAGES, "every scanned page read by OCR, none failed"
    visual = tiny_engine.limits().token_budget.visual_tokens_per_page
    assert visual > 0 and ocr["tokens_in"] == PAGES * visual
    assert ocr["tokens_out"] > 0
    assert ocr["service_seconds"] > 0
    assert ocr["pages_per_gpu_hour"] == pytest.approx(PAGES / (ocr["device_seconds"] / 3600), rel=1e-3)
    assert ocr["gpu_cost_per_hour"] == GPU_COST_PER_HOUR
    assert ocr["cost_per_1000_pages"] == pytest.approx(
        GPU_COST_PER_HOUR * ocr["device_seconds"] / 3600 / PAGES * 1000, rel=1e-3)
    [row] = summary["documents"]
    assert row["key"] == KEY and row["ocr"] == ocr, "one document: its row is the run's total"
    assert "'ocr': {'pages': 2" in caplog.text, "the totals are in the log line"

    # Filled by the unlimited backend itself (its device share and its metered KV cache);
    # a backend that leaves them out falls back to service seconds and shows None here.
    assert 0 < ocr["device_seconds"] <= ocr["service_seconds"]
    pages = ctx.store.get_json(ctx.artifacts, planned.ranges[0].result_key)["pages"]
    assert all(p["device_seconds"] is not None for p in pages), "the backend reports each page's device time"
    assert ocr["kv_peak_bytes_per_sequence"] > 0
    assert 0 < ocr["kv_mean_bytes_per_sequence"] <= ocr["kv_peak_bytes_per_sequence"]
