import pymupdf

from kb.planning import SCANNED, TEXT, classify_pages, split_ranges
from ocr_engine.backends.textlayer import extract_range, usable_text
from tests.pdfs import coded_pages, image_only_pdf, make_pdf


def test_text_layer_pages_come_back_in_order_with_their_own_text():
    doc = pymupdf.open(stream=make_pdf(coded_pages("gamma", 4)), filetype="pdf")
    pages = extract_range(doc, 2, 4)
    assert [p.page for p in pages] == [2, 3, 4]
    for p in pages:
        assert f"GAMMA-{p.page:03d}" in p.markdown
        assert p.status == "ok" and p.blocks


def test_headings_become_markdown_headings():
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 80), "Maintenance", fontsize=20)
    page.insert_textbox(pymupdf.Rect(72, 100, 520, 300), "Replace the seal every year. " * 5, fontsize=11)
    result = extract_range(doc, 1, 1)[0]
    assert result.markdown.startswith("# Maintenance")
    assert result.blocks[0].type == "heading"


def test_scanned_pages_are_told_apart_from_text_pages():
    scanned = pymupdf.open(stream=image_only_pdf(), filetype="pdf")
    text = pymupdf.open(stream=make_pdf(coded_pages("delta", 2)), filetype="pdf")
    assert classify_pages(scanned, 20) == [SCANNED]
    assert classify_pages(text, 20) == [TEXT, TEXT]
    assert extract_range(scanned, 1, 1)[0].status == "empty"


def test_garbage_text_is_not_usable():
    assert not usable_text("\ufffd" * 50, 20)
    assert not usable_text("short", 20)
    assert usable_text("A real sentence with enough characters in it.", 20)


def test_ranges_cover_every_page_exactly_once_and_respect_the_cap():
    for pages in range(1, 60):
        for cap in (1, 3, 16):
            ranges = split_ranges(pages, cap)
            covered = [n for a, b in ranges for n in range(a, b + 1)]
            assert covered == list(range(1, pages + 1))
            assert all(b - a + 1 <= cap for a, b in ranges)
    assert split_ranges(0, 16) == []
