"""The gates' contract: which expectation fails for which defect, with what observed value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kb.errors import BadParams
from kb.quality.alerts import Alert
from kb.quality.gate import validate
from kb.quality.measures import chunk_frame, page_frame, text_tokens
from kb.quality.suites import chunks_suite, pages_suite
from kb.settings import QualitySettings
from ocr_engine.api.pages import PageResult

TEXT = "The pump must be serviced every 500 hours. Replace the filter when the pressure drops below two bar."


def _pages(n=3, **overrides):
    pages = [{"page": i, "markdown": f"{TEXT} Page {i}.", "status": "ok", "confidence": None} for i in range(1, n + 1)]
    for i, change in overrides.items():
        pages[int(i[1:]) - 1].update(change)
    return [PageResult.from_dict(p) for p in pages]


def _failed(frame, expectations, tmp_path):
    report = validate(frame, "t", expectations, "run", tmp_path)
    return report, {(f.expectation, f.column): f for f in report.failures}


def test_good_pages_pass(tmp_path):
    q = QualitySettings()
    frame = page_frame(_pages(), q.distinct_n)
    report, failed = _failed(frame, pages_suite(q, 3, frame), tmp_path)
    assert report.success and not failed and report.evaluated >= 7
    assert report.docs_url is None, "Data Docs are built for failures only"


@pytest.mark.parametrize("pages, expectation, observed", [
    (_pages(3)[:2], ("expect_table_row_count_to_equal", None), 2),
    (_pages(3)[:2] + [_pages(3)[1]], ("expect_column_values_to_be_unique", "page"), None),
    (_pages(p2={"markdown": "scan error " * 100}), ("expect_column_values_to_be_between", "distinct"), None),
    (_pages(p1={"markdown": "", "status": "empty"}, p2={"markdown": "", "status": "empty"}),
     ("expect_column_mean_to_be_between", "empty"), 2 / 3),
    (_pages(p3={"status": "truncated"}), ("expect_column_values_to_not_be_in_set", "status"), None),
    (_pages(p1={"confidence": 0.3}, p2={"confidence": 0.4}), ("expect_column_mean_to_be_between", "confidence"), 0.35),
    (_pages(p2={"audit": {"backend": "ppocr", "cer": 0.9}}), ("expect_column_values_to_be_between", "cer"), None),
    (_pages(p2={"markdown": "x" * 30_000}), ("expect_column_values_to_be_between", "chars"), None),
    (_pages(p2={"markdown": "", "status": "failed", "reason": "range_timeout: 504"}),
     ("expect_column_mean_to_be_between", "failed"), 1 / 3),
])
def test_each_page_defect_fails_its_own_expectation(pages, expectation, observed, tmp_path):
    q = QualitySettings()
    frame = page_frame(pages, q.distinct_n)
    report, failed = _failed(frame, pages_suite(q, 3, frame), tmp_path)
    assert not report.success and report.docs_url.startswith("file://")
    assert list(failed) == [expectation]
    if observed is not None:
        assert failed[expectation].observed == pytest.approx(observed)
    else:
        assert failed[expectation].observed["unexpected_count"] >= 1


def test_thresholds_move_the_verdict(tmp_path):
    pages = _pages(p1={"markdown": "", "status": "empty"}, p2={"markdown": "", "status": "empty"})
    for share, success in ((0.5, False), (0.9, True)):
        q = QualitySettings.with_overrides({"max_empty_page_share": share})
        frame = page_frame(pages, q.distinct_n)
        assert validate(frame, "t", pages_suite(q, 3, frame), "run", tmp_path).success is success


def test_a_failed_page_within_the_share_passes_and_is_neither_empty_nor_a_loop(tmp_path):
    pages = _pages(25, p7={"markdown": "", "status": "failed", "reason": "range_timeout: 504"})
    q = QualitySettings()  # 1 of 25 pages is 0.04, within the default 0.05
    frame = page_frame(pages, q.distinct_n)
    assert frame["failed"].sum() == 1 and frame["empty"].sum() == 0 and math.isnan(frame["distinct"][6])
    assert validate(frame, "t", pages_suite(q, 25, frame), "run", tmp_path).success


def test_overrides_are_checked():
    with pytest.raises(BadParams, match="unknown quality setting"):
        QualitySettings.with_overrides({"max_empty_share": 0.2})
    with pytest.raises(BadParams, match="max_empty_page_share"):
        QualitySettings.with_overrides({"max_empty_page_share": 2})
    assert QualitySettings.with_overrides(None) == QualitySettings()


def test_distinct_n_catches_loops_in_chinese_too():
    loop = "扫描仪卡纸了，" * 60
    assert len(text_tokens("中文abc def")) == 4
    frame = page_frame([PageResult(page=1, markdown=loop),
                        PageResult(page=2, markdown="档案扫描分辨率不低于三百点每英寸，彩色文件使用二十四位色深，并保存原始图像。" * 2)], 20)
    assert frame["distinct"][0] < 0.1 and frame["distinct"][1] > 0.5


def _chunks(n=3, dim=8):
    ids = [f"id-{i}" for i in range(n)]
    payloads = [{"text": f"chunk {i}", "tokens": 5, "pages": [1]} for i in range(n)]
    vectors = np.ones((n, dim), dtype=np.float32) / math.sqrt(dim)
    return ids, payloads, vectors


@pytest.mark.parametrize("defect, expectation", [
    (lambda ids, p, v: ids.__setitem__(1, ids[0]), ("expect_column_values_to_be_unique", "id")),
    (lambda ids, p, v: p[0].update(text="  "), ("expect_column_values_to_be_between", "text_chars")),
    (lambda ids, p, v: p[0].update(tokens=999), ("expect_column_values_to_be_between", "tokens")),
    (lambda ids, p, v: p[2].update(pages=[]), ("expect_column_values_to_be_between", "pages")),
    (lambda ids, p, v: v.__setitem__((1, 3), np.nan), ("expect_column_values_to_be_in_set", "finite")),
    (lambda ids, p, v: v.__setitem__(2, 0.0), ("expect_column_values_to_be_between", "norm")),
])
def test_each_chunk_defect_fails_its_own_expectation(defect, expectation, tmp_path):
    ids, payloads, vectors = _chunks()
    defect(ids, payloads, vectors)
    report, failed = _failed(chunk_frame(ids, payloads, vectors), chunks_suite(QualitySettings(), 8, 256), tmp_path)
    assert list(failed) == [expectation]


def test_a_vector_of_another_dimension_fails_with_the_observed_size(tmp_path):
    ids, payloads, _ = _chunks(dim=8)
    report, failed = _failed(chunk_frame(ids, payloads, _chunks(dim=4)[2]), chunks_suite(QualitySettings(), 8, 256), tmp_path)
    failure = failed[("expect_column_values_to_be_between", "dimension")]
    assert failure.observed["examples"] == [4, 4, 4] and failure.threshold == {"min_value": 8, "max_value": 8}


def test_alert_names_document_version_run_failures_and_report_and_escapes_html():
    record = {
        "doc_id": "d1", "key": "<script>x</script>.pdf", "version_id": "v9", "run_id": "manual__1", "code": "validation_failed",
        "message": "1 page expectation(s) failed", "record": "quarantine/d1/v9.json",
        "validation": {"docs_url": "file:///docs/x.html", "gates": [
            {"suite": "pages", "failures": [{"line": "expect_table_row_count_to_equal: observed 2; expected value=3"}]}]},
    }
    alert = Alert.from_record(record, "kb-artifacts")
    for text, key in ((alert.text(), "<script>x</script>.pdf"), (alert.slack()["text"], "&lt;script&gt;x&lt;/script&gt;.pdf")):
        for part in (key, "Version: v9", "Run: manual__1", "observed 2; expected value=3",
                     "s3://kb-artifacts/quarantine/d1/v9.json", "file:///docs/x.html"):
            assert part in text
    assert "<script>" not in alert.html() and "&lt;script&gt;" in alert.html()


def test_an_alert_for_pages_left_out_names_each_page_and_its_reason():
    record = {
        "event": "pages-failed", "doc_id": "d1", "key": "manual.pdf", "version_id": "v2", "run_id": "manual__2",
        "code": "pages_failed", "message": "indexed without 1 of 311 pages", "record": "failed-pages/d1/v2.json",
        "failed_pages": [{"page": 7, "reason": "range_timeout: the OCR service answered 504"}],
    }
    alert = Alert.from_record(record, "kb-artifacts")
    assert alert.subject == "[kb] indexed manual.pdf without 1 page(s)"
    assert "page 7: range_timeout: the OCR service answered 504" in alert.text()
    assert "s3://kb-artifacts/failed-pages/d1/v2.json" in alert.slack()["text"]
    assert alert.slack()["kb"]["event"] == "pages-failed"
