"""The OCR service's wire contract, through the live service and its real client: every
refusal the service can be made to give here answers with the contract's status and scope,
and the client turns each scope into the pipeline's decision (quarantine, split, fail)."""

from __future__ import annotations

import httpx
import pytest

from kb.errors import RangeTooLarge
from kb.ocr_client import OcrClient, OcrRejected, OcrRequestRefused
from ocr_engine.api import contract
from ocr_engine.api.pages import EXTRACTION_VERSION, PageResult
from tests import pdfs

DOCUMENTS = [
    (b"plain text, not a document", "not_pdf"),
    (b"", "empty_file"),
    (pdfs.truncated_pdf(), "corrupt_pdf"),
    (pdfs.encrypted_pdf(), "encrypted_pdf"),
    (pdfs.recursive_page_tree_pdf(), "malformed_pdf"),
    (pdfs.deeply_nested_pdf(), "malformed_pdf"),
    (pdfs.claims_more_pages_pdf(), "claims_exceed_file"),
    (pdfs.giant_page_pdf(), "page_too_large"),
]


def check(resp: httpx.Response, code: str) -> None:
    refusal = contract.REFUSALS[code]
    assert resp.status_code == refusal.status, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["scope"]) == (code, refusal.scope.value), error


def test_the_service_publishes_the_contract_it_answers_by(live):
    limits = httpx.get(f"{live.ocr_url}/v1/limits", headers=live.headers("ocr")).json()
    assert limits["refusals"] == contract.published()
    assert limits["engine"]["min_text_chars"] >= 0
    assert limits["engine"]["extraction_version"] == EXTRACTION_VERSION  # what a reread compares pages with
    # and the model a reread compares OCR pages with, named as the pages name it
    scan = pdfs.scanned_copy(pdfs.make_pdf(pdfs.coded_pages("contract", 1)), dpi=72)
    page = httpx.post(f"{live.ocr_url}/v1/parse", headers=live.headers("ocr"), data={"backend": limits["engine"]["ocr_backend"]},
                      files={"file": ("s.pdf", scan, "application/pdf")}, timeout=120).json()["pages"][0]
    assert limits["engine"]["ocr_model"] == PageResult.from_dict(page).ocr_model is not None


@pytest.mark.parametrize("data, code", DOCUMENTS, ids=[c for _, c in DOCUMENTS])
def test_every_document_refusal_is_quarantined_by_the_client(live, data, code):
    resp = httpx.post(f"{live.ocr_url}/v1/parse", headers=live.headers("ocr"),
                      files={"file": ("d.pdf", data, "application/pdf")}, timeout=60)
    check(resp, code)
    client = OcrClient(live.ocr_url, live.secrets["KB_OCR_API_KEY"], retries=0)
    with pytest.raises(OcrRejected) as info:  # quarantined, never retried as a refusal of ours
        client.parse(data, 1, 1)
    assert info.value.code == code


def test_range_and_request_refusals_answer_by_the_contract(live):
    url, headers = f"{live.ocr_url}/v1/parse", live.headers("ocr")
    one = pdfs.make_pdf(["one page"])
    limits = httpx.get(f"{live.ocr_url}/v1/limits", headers=headers).json()
    too_many = pdfs.make_pdf([f"page {n}" for n in range(limits["request"]["max_pages"] + 1)])

    def post(data=one, **form):
        return httpx.post(url, headers=headers, files={"file": ("d.pdf", data, "application/pdf")}, data=form,
                          timeout=60)

    check(post(too_many), "too_many_pages")
    check(post(pages="two"), "bad_page_range")
    check(post(pages="2-5"), "bad_page_range")  # past the document's end: the request's, not the PDF's
    check(post(backend="magic"), "bad_backend")
    check(post(output="xml"), "bad_output")
    check(httpx.post(url, headers=headers, data={"pages": "1"}), "bad_source")
    check(httpx.post(url, headers=headers, data={"s3_uri": "http://not-s3"}), "bad_s3_uri")
    check(httpx.post(url, files={"file": ("d.pdf", one, "application/pdf")}), "unauthorized")
    check(httpx.get(f"{live.ocr_url}/v1/nothing-here", headers=headers), "not_found")
    check(httpx.delete(f"{live.ocr_url}/v1/limits", headers=headers), "method_not_allowed")
    check(httpx.post(url, headers=headers, data={"file": "a form field where the file should be"}), "invalid_request")

    client = OcrClient(live.ocr_url, live.secrets["KB_OCR_API_KEY"], retries=0)
    with pytest.raises(RangeTooLarge):  # split by the caller, never quarantined
        client.parse(too_many, 1, limits["request"]["max_pages"] + 1)
    with pytest.raises(OcrRequestRefused):  # the deployment's mistake: the document is not at fault
        OcrClient(live.ocr_url, "not-the-key", retries=0).parse(one, 1, 1)
