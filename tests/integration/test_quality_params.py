"""Thresholds per run (DAG param ``quality``) and the CER audit, on real documents."""

from __future__ import annotations

import pytest

from kb.errors import ValidationFailed
from kb.ledger import Status, doc_id_for
from kb.ledger_db import Ledger
from kb.pipeline.extract import extract
from kb.pipeline.index import check_pages
from kb.settings import PipelineSettings, QualitySettings
from ocr_engine.api.pages import PageResult
from tests.integration.stages import context, plan_run
from tests.integration.dagrun import run_ingest
from tests.pdfs import coded_pages, make_pdf, scanned_copy

pytestmark = pytest.mark.integration


def test_a_run_can_relax_a_threshold_and_bad_params_fail_the_run_without_retries(kb_env, airflow_db):
    # a real scan with two blank pages out of three: OCR finds nothing on them
    kb_env["store"].put_bytes(kb_env["inbox"], "blank.pdf", make_pdf(coded_pages("blank", 1) + ["", ""]))
    entry = lambda: Ledger.for_settings(PipelineSettings()).get(doc_id_for(kb_env["inbox"], "blank.pdf"))  # noqa: E731

    dr, summary = run_ingest()
    assert summary["documents_quarantined"] == 1 and entry().status == Status.QUARANTINED
    assert "expect_column_mean_to_be_between on empty" in entry().error["message"]

    dr, summary = run_ingest(force=True, quality={"max_empty_page_share": 0.9})
    assert summary["documents_indexed"] == 1 and entry().status == Status.INDEXED

    dr, _ = run_ingest(quality={"max_empty_share": 0.9})
    assert dr.state == "failed"
    [sense] = [ti for ti in dr.get_task_instances() if ti.task_id == "sense"]
    assert sense.state == "failed" and sense.try_number == 1, "bad params are not retried"


def test_the_cer_audit_compares_ocr_with_the_text_layer(kb_env):
    ctx = context(QualitySettings(cer_audit=True))
    kb_env["store"].put_bytes(kb_env["inbox"], "audited.pdf", make_pdf(coded_pages("audited", 2)))
    plan = plan_run(ctx, "run-1")
    [rng] = plan.ranges
    result = kb_env["store"].get_json(kb_env["artifacts"], extract(ctx, rng))
    audited = [p for p in result["pages"] if "audit" in p]
    assert len(audited) == 1 and audited[0]["page"] == 1, "one text-layer page per range is OCR'd as well"
    assert 0 <= audited[0]["audit"]["cer"] < 0.2, audited[0]["audit"]

    [document] = plan.documents
    check_pages(ctx, document, [PageResult.from_dict(p) for p in result["pages"]])  # passes at the default threshold


def _scan_with_a_wrong_text_layer() -> bytes:
    """What old archives often hold: a page image and an invisible text layer from some
    earlier OCR that does not match it."""
    import pymupdf

    scan = pymupdf.open(stream=scanned_copy(make_pdf(coded_pages("archive", 1))), filetype="pdf")
    scan[0].insert_textbox(pymupdf.Rect(60, 60, 535, 780), "Lorem ipsum dolor sit amet, consectetur adipiscing "
                           "elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.", render_mode=3)
    data = scan.tobytes()
    scan.close()
    return data


def test_a_text_layer_that_does_not_match_the_image_fails_the_cer_expectation(kb_env):
    ctx = context(QualitySettings(cer_audit=True))
    kb_env["store"].put_bytes(kb_env["inbox"], "archive.pdf", _scan_with_a_wrong_text_layer())
    plan = plan_run(ctx, "run-1")
    [rng], [document] = plan.ranges, plan.documents
    pages = kb_env["store"].get_json(kb_env["artifacts"], extract(ctx, rng))["pages"]
    assert pages[0]["backend"] == "textlayer" and pages[0]["audit"]["cer"] > 0.5
    with pytest.raises(ValidationFailed, match="on cer"):
        check_pages(ctx, document, [PageResult.from_dict(p) for p in pages])
