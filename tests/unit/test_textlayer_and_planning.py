import pymupdf

from kb.planning import SCANNED, TEXT, classify_pages, split_ranges
from ocr_engine.api.pdf import usable_text
from ocr_engine.backends.textlayer import extract_range
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


def test_a_line_with_a_few_words_set_large_is_not_a_heading():
    # lshort-zh-cn p.73 shows "He likes {\\LARGE large and {\\small small} letters}": the line
    # with its two large words was a level-1 heading, the title of every chunk after it
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 80), "Fonts and sizes", fontsize=14.4)
    page.insert_textbox(pymupdf.Rect(72, 100, 520, 300), "The size commands change the type. " * 6, fontsize=10)
    page.insert_text((72, 320), "He likes all the letters of the alphabet, both", fontsize=10)
    page.insert_text((290, 320), "large and", fontsize=17.28)
    page.insert_textbox(pymupdf.Rect(72, 330, 520, 400), "More text of the body follows here. " * 4, fontsize=10)
    headings = [(b.level, b.text) for b in extract_range(doc, 1, 1)[0].blocks if b.type == "heading"]
    assert headings == [(2, "Fonts and sizes")]


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


def _caps(**kw):
    from kb.planning import RangeCaps

    base = dict(text_pages=64, ocr_pages=16, seconds=None, text_seconds=0.05, scanned_seconds=3.0)
    return RangeCaps(**{**base, **kw})


def _fits(ranges, kinds, caps):
    for a, b in ranges:
        part = kinds[a - 1 : b]
        seconds = sum(caps.page_seconds(k) for k in part)
        assert len(part) == 1 or caps.fits(len(part), SCANNED in part, seconds), (a, b)


def test_cut_ranges_cover_every_page_once_and_fit_pages_and_time():
    import random

    from kb.planning import cut_ranges

    rng = random.Random(3)
    for _ in range(300):
        kinds = [rng.choice((TEXT, TEXT, TEXT, SCANNED)) for _ in range(rng.randint(1, 150))]
        caps = _caps(text_pages=rng.choice((5, 10, 64)), ocr_pages=rng.choice((1, 4, 16)),
                     seconds=rng.choice((None, 2.0, 10.0, 60.0)))
        ranges = cut_ranges(kinds, caps)
        assert [n for a, b in ranges for n in range(a, b + 1)] == list(range(1, len(kinds) + 1))
        _fits(ranges, kinds, caps)


def test_the_time_budget_cuts_scanned_ranges_shorter_than_the_page_limit():
    from kb.planning import cut_ranges

    # 10 pages a request, 20 s timeout at a share of 0.5: 10 s of work, 3 s a scanned page
    caps = _caps(text_pages=10, ocr_pages=10, seconds=10.0)
    assert cut_ranges([SCANNED] * 9, caps) == [(1, 3), (4, 6), (7, 9)]
    assert cut_ranges([TEXT] * 25, caps) == [(1, 9), (10, 18), (19, 25)]  # even cuts, at most 10
    # a page slower than the whole budget still gets a range of its own
    assert cut_ranges([SCANNED] * 2, _caps(seconds=1.0)) == [(1, 1), (2, 2)]


def test_range_caps_take_the_smallest_of_every_owners_limit():
    from kb.limits import RangeLimits
    from kb.planning import RangeCaps
    from kb.settings import PipelineSettings

    limits = RangeLimits(source="test", ocr_backend="unlimited", text_seconds_per_page=0.02,
                         scanned_seconds_per_page=4.0, max_pages=50, timeout_s=120.0, max_pages_per_call=12)
    caps = RangeCaps.of(PipelineSettings(max_pages_per_range=16, max_textlayer_pages_per_range=64), limits)
    assert (caps.text_pages, caps.ocr_pages, caps.seconds) == (50, 12, 60.0)
    local = RangeLimits(source="engine", ocr_backend="ppocr", text_seconds_per_page=0.02, scanned_seconds_per_page=4.0)
    caps = RangeCaps.of(PipelineSettings(max_pages_per_range=16, max_textlayer_pages_per_range=64), local)
    assert (caps.text_pages, caps.ocr_pages, caps.seconds) == (64, 16, None)
