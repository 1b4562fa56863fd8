"""One registry chooses the backends; the engine routes pages by it and uses a backend only
through its interface, so a backend registered in a test alone is used like a built-in one."""

from __future__ import annotations

import pymupdf
import pytest

from kb.planning import SCANNED, TEXT, classify_pages
from ocr_engine.api import cost
from ocr_engine.api.pages import EXTRACTION_VERSION
from ocr_engine.backends.registry import Registry
from ocr_engine.engine import OcrEngine
from ocr_engine.api.pages import PageResult, PageStatus
from ocr_engine.settings import EngineSettings
from tests.ocr_engine.fake_backend import BOUND, NAME, PER_CALL, FakeBackend, registry_with
from tests.pdfs import coded_pages, image_only_pdf, make_pdf

SHORT = "Figure 3: pump seal, top view"  # 25 characters of text layer: a caption on a scan


def mixed_pdf() -> bytes:
    """Pages: text, scanned (an image, no text), a short caption, text."""
    long_1, long_4 = coded_pages("mixed", 4)[0], coded_pages("mixed", 4)[3]
    doc = pymupdf.open(stream=make_pdf([long_1, SHORT, long_4]), filetype="pdf")
    doc.insert_pdf(pymupdf.open(stream=image_only_pdf(), filetype="pdf"), start_at=1)
    return doc.tobytes()


def fake_engine(fake: FakeBackend, **settings) -> OcrEngine:
    return OcrEngine(EngineSettings(ocr_backend=NAME, **settings), registry_with(fake))


@pytest.mark.parametrize("min_text_chars, kinds", [
    (40, [TEXT, SCANNED, SCANNED, TEXT]),  # the caption is under 40 characters: scanned
    (20, [TEXT, SCANNED, TEXT, TEXT]),
])
def test_the_pages_the_planner_counts_as_scanned_are_exactly_those_auto_sends_to_ocr(min_text_chars, kinds):
    pdf = mixed_pdf()
    engine = fake_engine(FakeBackend(), min_text_chars=min_text_chars)
    published = engine.limits().min_text_chars
    assert published == min_text_chars
    assert classify_pages(pymupdf.open(stream=pdf, filetype="pdf"), published) == kinds
    results = engine.parse_pdf(pdf)  # backend: auto
    assert [r.backend for r in results] == [NAME if k == SCANNED else "textlayer" for k in kinds]
    assert engine.route(pdf) == {r.page: r.backend for r in results}
    # every page, whichever backend read it, names the reading rules it was read by
    assert {r.extraction_version for r in results} == {engine.limits().extraction_version} == {EXTRACTION_VERSION}
    # and each scanned page the OCR model the engine publishes, in the same words; text-layer pages none
    assert {r.ocr_model for r in results if r.backend == NAME} == {engine.limits().ocr_model} == {
        f"{NAME}:{FakeBackend.model_version}@{FakeBackend.weights_digest[:16]}"}
    assert {r.ocr_model for r in results if r.backend == "textlayer"} == {None}


def test_a_named_backend_reads_every_page_and_its_calls_come_back_from_it():
    fake = FakeBackend()
    engine = fake_engine(fake)
    results = engine.parse_pdf(mixed_pdf(), 2, 4, backend=NAME)
    assert [(r.page, r.backend, r.status) for r in results] == [(2, NAME, PageStatus.OK), (3, NAME, PageStatus.OK), (4, NAME, PageStatus.OK)]
    assert results[0].markdown.startswith("fake read page 2") and fake.calls == [[2, 3, 4]]
    assert {r.backend for r in engine.parse_pdf(mixed_pdf(), backend="textlayer")} == {"textlayer"}
    assert engine.limits().pace[NAME]["samples"] == 3  # the engine's clock timed the fake's pages


def test_admission_reads_the_kv_bound_the_backend_declares():
    engine = fake_engine(FakeBackend())
    pdf = make_pdf(["one line"] * 5)  # too little text everywhere: all five go to the fake
    routes = engine.route(pdf)
    assert set(routes.values()) == {NAME}
    assert engine.kv_bytes(routes) == BOUND.bytes(PER_CALL)  # five pages: calls of three and two
    assert engine.kv_bytes(engine.route(pdf, 1, 2)) == BOUND.bytes(2)
    assert engine.kv_bytes(engine.route(pdf, backend="textlayer")) == 0
    assert fake_engine(FakeBackend(kv=False)).kv_bytes(routes) == 0


def test_the_registry_chooses_the_ocr_backend_and_what_a_request_may_ask_for(tmp_path):
    registry = Registry()
    assert registry.requestable() == ("auto", "textlayer", "ppocr", "unlimited")
    assert registry.ocr_backend(EngineSettings()) == "ppocr"
    assert registry.ocr_backend(EngineSettings(model_dir=tmp_path)) == "unlimited"
    assert registry.ocr_backend(EngineSettings(ocr_backend="ppocr", model_dir=tmp_path)) == "ppocr"
    for wrong in ("textlayer", NAME, "magic"):  # not an OCR backend, or not registered here
        with pytest.raises(ValueError, match="not an OCR backend"):
            OcrEngine(EngineSettings(ocr_backend=wrong))
    assert NAME in registry_with(FakeBackend()).requestable()
    with pytest.raises(ValueError, match="unknown backend"):
        OcrEngine().parse_pdf(make_pdf(["x"]), backend="magic")


def test_cost_counts_every_page_a_backend_read_from_images_and_no_text_layer_page():
    def page(backend: str, status: PageStatus = PageStatus.OK) -> PageResult:
        return PageResult(page=1, markdown="x", backend=backend, status=status)

    assert [cost.read_by_ocr(page(b)) for b in ("textlayer", "ppocr", "unlimited", NAME, "")] == \
        [False, True, True, True, False]
    assert not cost.read_by_ocr(page("ppocr", PageStatus.FAILED))
