"""kb_ingest with its page ranges sent to the real OCR service on loopback."""

from __future__ import annotations

import json

import pymupdf
import pytest

from tests.conftest import start_service
from tests.integration.dagrun import points_by_doc, run_ingest
from tests.pdfs import coded_pages, make_pdf, scanned_copy

# sequential: the timeout tests cut their request timeout from a page's time measured first,
# and a machine busier after that measurement would split ranges further
pytestmark = [pytest.mark.integration, pytest.mark.sequential]
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


def _statuses(base: str) -> dict[str, float]:
    """Requests to /v1/parse by status, from the service's own metrics."""
    import re

    import httpx

    text = httpx.get(f"{base}/metrics").text
    return {m[0]: float(m[1]) for m in re.findall(r'ocr_requests_total\{route="/v1/parse",status="(\d+)"\} (\S+)', text)}


def test_a_document_longer_than_the_services_page_limit_is_cut_to_fit_and_indexed_whole(
        via_service, ocr_service, airflow_db, monkeypatch):
    # The service takes at most 8 pages a request; the pipeline's own cap would allow 10.
    monkeypatch.setenv("KB_MAX_TEXTLAYER_PAGES_PER_RANGE", "10")
    store = via_service["store"]
    store.put_bytes(via_service["inbox"], "long.pdf", make_pdf(coded_pages("long", 10)))
    store.put_bytes(via_service["inbox"], "short.pdf", make_pdf(coded_pages("short", 2)))
    before = _statuses(ocr_service["base"])
    dr, summary = run_ingest()
    assert dr.state == "success"
    assert summary["documents_indexed"] == 2 and summary["documents_quarantined"] == 0 and summary["pages"] == 12
    assert summary["limits"]["max_pages"] == 8 and summary["limits"]["source"].endswith(str(ocr_service["port"]))
    assert summary["ranges_split"] == 0, "the plan read the limit: nothing had to be split"
    after = _statuses(ocr_service["base"])
    assert after.get("422", 0) == before.get("422", 0), "no range was refused"
    pages = {n for p in points_by_doc("long.pdf") for n in p.payload["pages"]}
    assert pages == set(range(1, 11))


def _optimistic(ocr_service) -> dict[str, str]:
    """A service whose request timeout is 4 scanned pages' time on this machine today (timed
    by the module's patient service: 0.2 s a page on a quiet day, 0.4 s on a busy one), and
    which believes, before it has timed a page, that one takes a tenth of that."""
    from kb.ocr_client import OcrClient

    _, *timed = OcrClient(ocr_service["base"], KEY).parse(image_only(coded_pages("timing", 3)), 1, 3)
    page_s = sum(p.seconds for p in timed) / len(timed)
    return {"OCR_SERVICE_API_KEYS": KEY, "OCR_SERVICE_REQUEST_TIMEOUT_S": f"{4 * page_s:.2f}",
            "OCR_SECONDS_PER_PAGE_PRIOR": json.dumps({"textlayer": 0.01, "ppocr": round(page_s / 10, 4)})}


def test_ranges_the_service_times_out_are_split_until_they_pass(via_service, ocr_service, s3_server, airflow_db,
                                                                 tmp_path, monkeypatch):
    # 12 scanned pages, a timeout of 4 pages' time, and a service that believes a page takes a
    # tenth of its time (an optimistic prior, as before any page was timed): the plan sends all
    # 12 in one range, the service answers 504, the pipeline splits.
    with start_service(s3_server, tmp_path, _optimistic(ocr_service)) as svc:
        monkeypatch.setenv("AIRFLOW_CONN_OCR_SERVICE", json.dumps({
            "conn_type": "http", "host": "127.0.0.1", "port": svc["port"], "schema": "http", "password": KEY,
            "extra": {"retries": 2, "backoff_s": 0.2},
        }))
        monkeypatch.setenv("KB_MAX_PAGES_PER_RANGE", "16")
        store = via_service["store"]
        store.put_bytes(via_service["inbox"], "scans/box-12.pdf", image_only(coded_pages("box", 12)))
        dr, summary = run_ingest()
        statuses = _statuses(svc["base"])
    assert dr.state == "success", summary
    assert summary["documents_indexed"] == 1 and summary["pages"] == 12 and summary["pages_failed"] == []
    assert summary["ranges"] == 1 and summary["ranges_split"] >= 1
    assert statuses.get("504", 0) >= 1 and statuses.get("200", 0) >= 2
    points = points_by_doc("scans/box-12.pdf")
    assert {n for p in points for n in p.payload["pages"]} == set(range(1, 13))
    assert all("manual" in p.payload["text"] for p in points), "each page's own text, read by OCR"


def test_a_range_planned_at_a_cold_services_prior_is_split_before_it_is_sent_once_pages_are_timed(
        kb_env, ocr_service, s3_server, tmp_path, monkeypatch):
    # The optimistic service of the test above: planned at its prior, 12 scanned pages are one
    # range. Before that range is extracted, the service times two pages of another request
    # and publishes their pace: the range is cut to fit it before it is sent, so no request
    # of it times out.
    from kb.ocr_client import OcrClient
    from kb.pipeline.extract import ServiceExtractor, extract
    from tests.integration.stages import context, plan_run

    monkeypatch.setenv("KB_MAX_PAGES_PER_RANGE", "16")
    optimistic = _optimistic(ocr_service)
    with start_service(s3_server, tmp_path, optimistic) as svc:
        client = OcrClient(svc["base"], KEY)
        kb_env["store"].put_bytes(kb_env["inbox"], "scans/box-12.pdf", image_only(coded_pages("box", 12)))
        ctx = context()
        [rng] = plan_run(ctx, "manual__cold", limits=client.limits()).ranges
        assert (rng.first, rng.last) == (1, 12)
        client.parse(image_only(coded_pages("timed", 2)), 1, 2)
        pace = client.limits().scanned_seconds_per_page
        assert pace > json.loads(optimistic["OCR_SECONDS_PER_PAGE_PRIOR"])["ppocr"], "the service kept its prior"
        key = extract(ctx, rng, ServiceExtractor(client, ctx.settings), run_id="manual__cold")
        statuses = _statuses(svc["base"])
    result = kb_env["store"].get_json(kb_env["artifacts"], key)
    assert [p["page"] for p in result["pages"]] == list(range(1, 13)) and not result["failed_pages"]
    assert result["splits"] >= 1, "the range went whole"
    assert statuses.get("504", 0) == 0 and statuses.get("200", 0) >= 3, (pace, statuses)
