"""kb_ingest with its page ranges sent to the real OCR service on loopback."""

from __future__ import annotations

import json

import pymupdf
import pytest

from tests.conftest import start_service
from tests.integration.dagrun import points_by_doc, run_ingest
from tests.pdfs import coded_pages, make_pdf, scanned_copy

pytestmark = pytest.mark.integration
KEY = "integration-test-key"


@pytest.fixture(scope="module")
def ocr_service(s3_server, tmp_path_factory):
    with start_service(s3_server, tmp_path_factory.mktemp("ocr-service"), {
        "OCR_SERVICE_API_KEYS": KEY, "OCR_SERVICE_REQUEST_TIMEOUT_S": "300", "OCR_SERVICE_MAX_PAGES_PER_REQUEST": "8",
    }) as svc:
        yield svc


@pytest.fixture
def via_service(kb_env, ocr_service, monkeypatch):
    monkeypatch.setenv("KB_OCR_MODE", "service")
    monkeypatch.setenv("AIRFLOW_CONN_OCR_SERVICE", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": ocr_service["port"], "schema": "http", "password": KEY,
        "extra": {"retries": 2, "backoff_s": 0.2},
    }))
    return kb_env


def image_only(pages: list[str]) -> bytes:
    return scanned_copy(make_pdf(pages))


def test_an_image_only_pdf_becomes_searchable_with_its_pages(via_service, airflow_db):
    store = via_service["store"]
    store.put_bytes(via_service["inbox"], "scans/archive.pdf", image_only(coded_pages("scanned", 3)))
    assert pymupdf.open(stream=image_only(["x"]), filetype="pdf")[0].get_text().strip() == ""  # really no text layer

    dr, summary = run_ingest()
    assert dr.state == "success" and summary["documents_indexed"] == 1 and summary["pages"] == 3
    points = points_by_doc("scans/archive.pdf")
    pages_of = {}
    for p in points:
        for code in ("SCANNED-001", "SCANNED-002", "SCANNED-003"):
            if code in p.payload["text"].replace(" ", ""):
                pages_of[code] = p.payload["pages"]
    assert pages_of == {"SCANNED-001": [1], "SCANNED-002": [2], "SCANNED-003": [3]}

    # the result records which backend read the page
    result_keys = [o.key for o in store.list_latest(via_service["artifacts"], "pages/")]
    result = store.get_json(via_service["artifacts"], result_keys[0])
    assert {p["backend"] for p in result["pages"]} == {"ppocr"}


def test_a_document_the_service_refuses_is_quarantined_and_the_run_succeeds(via_service, airflow_db, monkeypatch):
    # The service takes at most 8 pages a request; ranges of 10 pages are refused with 422.
    monkeypatch.setenv("KB_MAX_TEXTLAYER_PAGES_PER_RANGE", "10")
    store = via_service["store"]
    store.put_bytes(via_service["inbox"], "long.pdf", make_pdf(coded_pages("long", 10)))
    store.put_bytes(via_service["inbox"], "short.pdf", make_pdf(coded_pages("short", 2)))
    dr, summary = run_ingest()
    assert dr.state == "success"
    assert summary["documents_indexed"] == 1 and summary["documents_quarantined"] == 1
    [q] = summary["quarantine"]
    assert q["key"] == "long.pdf" and q["code"] == "too_many_pages"  # the service's own code, kept
    assert "OCR service answered 422" in q["message"]
    assert points_by_doc("long.pdf") == [] and points_by_doc("short.pdf")
