"""PP-OCR on pages the test renders itself, the auto router, and bounded rendering."""

from __future__ import annotations

import pymupdf
import pytest

from ocr_engine.engine import OcrEngine
from ocr_engine.api.text import cer
from ocr_engine.settings import EngineSettings

ENGLISH = ("Replace the mechanical impeller seal every 2000 operating hours. "
           "Error code E42 means low suction pressure at the pump inlet.")
CHINESE = "档案扫描分辨率不低于三百点每英寸。彩色档案采用二十四位真彩色模式扫描。"


def scanned_pdf(texts: list[str], *, fontname: str = "helv", rotate: int = 0, columns: bool = False) -> bytes:
    """Image-only pages: the text is drawn, rasterised at 200 dpi and placed as a picture."""
    doc = pymupdf.open()
    for text in texts:
        src = pymupdf.open()
        page = src.new_page(width=595, height=842)
        if columns:
            left, right = text
            page.insert_textbox(pymupdf.Rect(50, 80, 280, 700), left, fontsize=12, fontname=fontname)
            page.insert_textbox(pymupdf.Rect(320, 80, 550, 700), right, fontsize=12, fontname=fontname)
        else:
            page.insert_textbox(pymupdf.Rect(50, 80, 545, 700), text, fontsize=13, fontname=fontname)
        pix = page.get_pixmap(dpi=200)
        if rotate:
            # As a scanner fed sideways writes it: the picture stored turned, on a landscape
            # page, and /Rotate set so that viewers show it upright.
            out = doc.new_page(width=842, height=595)
            out.insert_image(out.rect, pixmap=pix, rotate=rotate)
            out.set_rotation(rotate)
        else:
            out = doc.new_page(width=595, height=842)
            out.insert_image(out.rect, pixmap=pix)
    return doc.tobytes()


@pytest.fixture(scope="module")
def engine():
    return OcrEngine(EngineSettings(dpi=150))


def test_ppocr_reads_english_and_chinese_under_a_cer_threshold(engine):
    en, zh = engine.parse_pdf(scanned_pdf([ENGLISH]), backend="ppocr")[0], None
    zh = engine.parse_pdf(scanned_pdf([CHINESE], fontname="china-s"), backend="ppocr")[0]
    assert en.backend == zh.backend == "ppocr"
    assert cer(en.markdown, ENGLISH) < 0.05, en.markdown
    assert cer(zh.markdown, CHINESE) < 0.05, zh.markdown
    assert 0.8 < en.confidence <= 1.0 and all(b.confidence is not None for b in en.blocks)
    # blocks come back in page coordinates (points), inside the page
    for b in en.blocks:
        assert 0 <= b.bbox[0] < b.bbox[2] <= 595 and 0 <= b.bbox[1] < b.bbox[3] <= 842


def test_two_columns_are_read_column_by_column(engine):
    left = "Left column first sentence. " * 6 + "LEFTEND"
    right = "RIGHTSTART " + "Right column text goes on here. " * 6
    result = engine.parse_pdf(scanned_pdf([(left, right)], columns=True), backend="ppocr")[0]
    text = result.markdown
    assert "LEFTEND" in text and "RIGHTSTART" in text
    assert text.index("LEFTEND") < text.index("RIGHTSTART"), text


def test_the_router_sends_text_pages_to_the_text_layer_and_scans_to_ocr(engine):
    doc = pymupdf.open()
    doc.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 400), "A born-digital page. " * 5, fontsize=12)
    scanned = pymupdf.open(stream=scanned_pdf([ENGLISH]), filetype="pdf")
    doc.insert_pdf(scanned)
    results = engine.parse_pdf(doc.tobytes(), backend="auto")
    assert [r.backend for r in results] == ["textlayer", "ppocr"]
    assert cer(results[1].markdown, ENGLISH) < 0.05


@pytest.mark.parametrize("rotate", [90, 270])
def test_a_rotated_scan_is_read_upright(engine, rotate):
    result = engine.parse_pdf(scanned_pdf([ENGLISH], rotate=rotate), backend="ppocr")[0]
    assert cer(result.markdown, ENGLISH) < 0.05, result.markdown


HUGE_PAGE = """
import pymupdf
from ocr_engine.render import render_page
doc = pymupdf.open()
page = doc.new_page(width=14_400, height=14_400)  # 200 x 200 inches: 900 million pixels at 150 dpi
page.insert_text((100, 200), "poster", fontsize=200)
rendered = render_page(page, dpi=150, max_pixels=4_000_000)
h, w, _ = rendered.image.shape
# VmHWM, not ru_maxrss: the latter survives exec and would report pytest's own peak.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(h * w, rendered.downscaled, hwm // 1024)
"""


def test_a_huge_page_is_downscaled_within_the_pixel_budget():
    # A fresh process, so its peak resident memory is this render's alone (MuPDF's own
    # allocations included, which tracemalloc would not see). Whole, the page is 2.7 GB.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HUGE_PAGE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pixels, downscaled, peak_mib = done.stdout.split()
    assert downscaled == "True" and int(pixels) <= 4_000_000
    assert int(peak_mib) < 400, f"rendering peaked at {peak_mib} MiB"


def test_a_skewed_two_column_scan_is_read_by_the_layout_models_regions(engine):
    """The default engine orders OCR lines by PP-Layout's regions (``OCR_LAYOUT_MODEL=cdla``): two
    columns of prose on a page turned by 1.5 degrees come back column by column, as text (no
    table), and the page names the layout model beside the recogniser."""
    from kb_dev.samples import scanned_copy

    left = " ".join(f"The left column says {w} in its sentence number {i}." for i, w in enumerate(
        "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split())) + " LEFTEND"
    right = "RIGHTSTART " + " ".join(f"Then the right column goes on with {w} and more words {i}." for i, w in enumerate(
        "mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray".split()))
    src = pymupdf.open()
    page = src.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(50, 80, 285, 760), left, fontsize=11)
    page.insert_textbox(pymupdf.Rect(310, 80, 545, 760), right, fontsize=11)
    scan = scanned_copy(src.tobytes(), 200, skew_deg=1.5, exact_skew=True, speckle=0.001, seed=5)
    result = engine.parse_pdf(scan, backend="ppocr")[0]
    assert "PP-Layout CDLA" in result.model_version
    assert not [b for b in result.blocks if b.type == "table"], [b.text[:60] for b in result.blocks]
    text = result.markdown
    assert text.index("LEFTEND") < text.index("RIGHTSTART"), text
    assert text.index("sentence number 11") < text.index("more words 0"), text
