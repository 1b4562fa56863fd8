"""OCR cost accounting: which pages count, the sums, the weighted KV mean, price per page."""

from __future__ import annotations

import pytest

from kb.ledger import Status
from kb.pipeline.accounting import OcrUsage, merge, usage_summary
from kb.pipeline.index import LoadedPages
from kb.pipeline.messages import DocumentResult, Plan, Sensed
from kb.pipeline.report import summarize
from ocr_engine.api.pages import PageResult, PageStatus


def page(n: int, backend: str = "unlimited", status: PageStatus = PageStatus.OK, **fields) -> PageResult:
    return PageResult(page=n, markdown="text", backend=backend, status=status, **fields)


def unlimited(n: int, *, kv_mean: int | None = 1000, kv_peak: int | None = 2000, device: float | None = 0.5,
              seconds: float = 2.0) -> dict:
    return page(n, tokens_in=273, tokens_out=400, seconds=seconds, device_seconds=device,
                kv_peak_bytes=kv_peak, kv_mean_bytes=kv_mean, batch_size=1)


def test_text_layer_and_failed_pages_cost_nothing_and_an_empty_ocr_page_counts():
    pages = [
        unlimited(1),
        page(2, backend="textlayer", seconds=0.05, tokens_out=999),
        page(3, status=PageStatus.FAILED, tokens_in=273, tokens_out=2048, seconds=9.0, device_seconds=8.0,
             kv_peak_bytes=10**9, kv_mean_bytes=10**9),
        page(4, status=PageStatus.EMPTY, tokens_in=273, tokens_out=3, seconds=1.0, device_seconds=0.25),
        page(5, backend="", seconds=4.0),  # no backend: a page nothing read
    ]
    usage = OcrUsage.of_pages(pages)
    assert usage.pages == 2
    assert (usage.tokens_in, usage.tokens_out) == (546, 403)
    assert usage.service_seconds == pytest.approx(3.0) and usage.device_seconds == pytest.approx(0.75)
    assert usage.kv_peak_bytes_per_sequence == 2000 and usage.kv_mean_bytes_per_sequence == 1000
    # the pipeline's count of OCR pages and the accounting's are the same rule
    assert LoadedPages(pages, 0, 0.0).ocr_pages == usage.pages == LoadedPages(pages, 0, 0.0).usage.pages


def test_a_page_without_device_time_counts_its_seconds_as_device_time():
    ppocr = page(1, backend="ppocr", seconds=1.5)  # PP-OCR's whole call runs on the device
    usage = OcrUsage.of_pages([ppocr, unlimited(2, device=0.5, seconds=2.0)])
    assert usage.service_seconds == pytest.approx(3.5)
    assert usage.device_seconds == pytest.approx(2.0)
    assert usage.kv_mean_bytes_per_sequence == 1000, "a page without a KV mean stays out of the mean"


def test_the_kv_mean_of_a_merge_is_weighted_by_pages_and_the_peak_is_the_largest():
    small = OcrUsage.of_pages([unlimited(1, kv_mean=100, kv_peak=150)])
    large = OcrUsage.of_pages([unlimited(n, kv_mean=200, kv_peak=400) for n in range(1, 4)])
    total = merge([small, large])
    assert total.pages == 4
    assert total.kv_mean_bytes_per_sequence == pytest.approx(175.0)  # (100 + 3 x 200) / 4, not (100 + 200) / 2
    assert total.kv_peak_bytes_per_sequence == 400
    assert merge([]) == OcrUsage() and OcrUsage().kv_mean_bytes_per_sequence is None
    no_kv = OcrUsage.of_pages([page(1, backend="ppocr", seconds=1.0)])
    assert no_kv.kv_peak_bytes_per_sequence is None and no_kv.kv_mean_bytes_per_sequence is None
    assert merge([no_kv, small]).kv_peak_bytes_per_sequence == 150


def test_a_usage_survives_the_trip_through_xcom_exactly():
    usage = OcrUsage.of_pages([unlimited(1, kv_mean=100), unlimited(2, kv_mean=300)])
    sent = DocumentResult("d", "a.pdf", Status.INDEXED, ocr_usage=usage.as_dict()).as_dict()
    back = OcrUsage.from_dict(DocumentResult.from_dict(sent).ocr_usage)
    assert back == usage
    assert merge([back, usage]).kv_mean_bytes_per_sequence == pytest.approx(200.0)


def test_pages_per_gpu_hour_and_cost_per_1000_pages_come_from_device_time_and_the_price():
    usage = OcrUsage(pages=4, tokens_in=1092, tokens_out=1600, service_seconds=2400.0, device_seconds=1800.0)
    shown = usage_summary(usage, gpu_cost_per_hour=2.0)
    assert shown["pages_per_gpu_hour"] == pytest.approx(8.0)  # 4 pages in half a GPU-hour
    assert shown["cost_per_1000_pages"] == pytest.approx(250.0)  # 2.0 x 0.5 h / 4 pages x 1000
    assert shown["gpu_cost_per_hour"] == 2.0
    assert (shown["pages"], shown["tokens_in"], shown["device_seconds"]) == (4, 1092, 1800.0)


def test_without_a_price_or_without_device_time_there_is_no_cost():
    usage = OcrUsage(pages=4, device_seconds=1800.0)
    unpriced = usage_summary(usage)
    assert unpriced["pages_per_gpu_hour"] == pytest.approx(8.0)
    assert unpriced["cost_per_1000_pages"] is None and unpriced["gpu_cost_per_hour"] is None
    textlayer_only = usage_summary(OcrUsage.of_pages([page(1, backend="textlayer", seconds=0.05)]), 2.0)
    assert textlayer_only["pages"] == 0
    assert textlayer_only["pages_per_gpu_hour"] is None and textlayer_only["cost_per_1000_pages"] is None


def test_the_run_total_sums_the_indexed_documents_and_each_row_carries_its_own():
    a = OcrUsage.of_pages([unlimited(1, device=1800.0)])
    b = OcrUsage.of_pages([unlimited(n, device=1800.0) for n in (1, 2, 3)])
    refused = OcrUsage.of_pages([unlimited(n, device=1800.0) for n in range(1, 10)])
    results = [
        DocumentResult("a", "a.pdf", Status.INDEXED, pages=1, ocr_usage=a.as_dict()),
        DocumentResult("b", "b.pdf", Status.INDEXED, pages=3, ocr_usage=b.as_dict()),
        DocumentResult("q", "q.pdf", Status.QUARANTINED, ocr_usage=refused.as_dict()),
        DocumentResult("t", "t.pdf", Status.INDEXED, pages=2),  # text layer only: no usage
    ]
    plan = Plan(documents=[], ranges=[], quarantined=[], skipped=[], batches=[], limits={})
    summary = summarize("run-1", Sensed(todo=[]), plan, results, gpu_cost_per_hour=2.0)
    total = summary["ocr"]
    assert total["pages"] == 4 and total["device_seconds"] == pytest.approx(4 * 1800.0)
    assert total["pages_per_gpu_hour"] == pytest.approx(2.0) and total["cost_per_1000_pages"] == pytest.approx(1000.0)
    rows = {r["key"]: r["ocr"] for r in summary["documents"]}
    assert rows["a.pdf"] == usage_summary(a, 2.0) and rows["b.pdf"] == usage_summary(b, 2.0)
    assert rows["q.pdf"]["pages"] == 9 and rows["t.pdf"] is None
    # callers that pass no price still get the block, without a cost
    assert summarize("run-1", Sensed(todo=[]), plan, results)["ocr"]["cost_per_1000_pages"] is None
