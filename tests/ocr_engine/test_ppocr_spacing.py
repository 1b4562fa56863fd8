"""PP-OCR on scan-like images the test draws itself: word spaces put back from the line's ink,
never inside Chinese, and a skewed two-column page read column by column."""

from __future__ import annotations


import cv2
import numpy as np
import pymupdf
import pytest

from ocr_engine.backends.ppocr import PPOCRBackend
from ocr_engine.spacing import restore_spaces
from ocr_engine.api.text import cer_spaced
from ocr_engine.render import RenderedPage

WORDS = "only be crudely imitated with ligatures according to Milo"


@pytest.fixture(scope="module")
def backend():
    return PPOCRBackend()


def line_image(text: str, *, fontname: str = "tiro", fontsize: float = 10, cjk_tracking: float = 0.0) -> np.ndarray:
    """One line at 150 dpi, cut as the detector cuts a line (a few pixels of paper around the
    ink). ``cjk_tracking`` adds that many points after every Chinese character."""
    doc = pymupdf.open()
    page = doc.new_page(width=600, height=40)
    font, x = pymupdf.Font(fontname), 10.0
    for ch in text:
        page.insert_text((x, 25), ch, fontsize=fontsize, fontname=fontname)
        x += font.text_length(ch, fontsize=fontsize) + (cjk_tracking if ch >= "\u4e00" else 0)
    pix = page.get_pixmap(dpi=150, colorspace=pymupdf.csRGB, alpha=False)
    image = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.height, pix.width, 3).copy()
    ys, xs = np.nonzero(image.min(axis=2) < 128)
    return image[ys.min() - 6 : ys.max() + 7, xs.min() - 4 : xs.max() + 5].copy()


def speckled(crop: np.ndarray) -> np.ndarray:
    """The scans' speckle where it hurts most: a dark pixel in the middle of every blank run of
    columns three pixels wide or more (every word gap), at mid-height."""
    out = crop.copy()
    blank = (crop.min(axis=2) >= 128).all(axis=0)
    x = 0
    while x < len(blank):
        if blank[x]:
            end = x
            while end < len(blank) and blank[end]:
                end += 1
            if end - x >= 3 and 0 < x and end < len(blank):
                out[crop.shape[0] // 2, (x + end) // 2] = 30
            x = end
        else:
            x += 1
    return out


def without_spaces(text: str, xs: list[float]) -> tuple[str, list[float]]:
    kept = [(ch, x) for ch, x in zip(text, xs) if ch != " "]
    return "".join(ch for ch, _ in kept), [x for _, x in kept]


def test_dropped_word_spaces_come_back_from_the_gaps_in_the_ink(backend):
    crop = line_image(WORDS)
    text, _, xs = backend.read_crops([crop])[0]
    assert text.replace(" ", "") == WORDS.replace(" ", "")  # the recogniser read every letter
    # What the recogniser does on the scans: the same letters, written together.
    squeezed, squeezed_xs = without_spaces(text, xs)
    assert restore_spaces(crop, squeezed, squeezed_xs) == WORDS
    assert restore_spaces(crop, text, xs) == WORDS  # spaces it did write are not doubled
    # A speck in each word gap (as on the scans) does not close it.
    assert restore_spaces(speckled(crop), squeezed, squeezed_xs) == WORDS


def test_no_space_is_put_next_to_a_chinese_character_however_far_apart(backend):
    # Latin set tight (its letter gaps set the line's scale) and Chinese set 6 pt apart: gaps
    # that, between Latin letters, would be word spaces.
    crop = line_image("PP-OCRv4型号档案扫描分辨率model", fontname="china-s", fontsize=12, cjk_tracking=6)
    text, _, xs = backend.read_crops([crop])[0]
    assert "档案扫描" in text.replace(" ", "")
    assert restore_spaces(crop, text, xs) == text
    # The same gaps and positions, read as if they held Latin letters, do get spaces.
    latin = "".join("x" if "\u4e00" <= ch <= "\u9fff" else ch for ch in text)
    assert restore_spaces(crop, latin, xs).count(" ") > text.count(" ") + 3


def skewed_two_column_page(left: str, right: str, degrees: float) -> tuple[np.ndarray, float]:
    """A Letter page at 150 dpi, two columns under a header that spans them, turned by ``degrees``."""
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    page.insert_textbox(pymupdf.Rect(150, 60, 470, 80), "RUNNING HEADER OVER BOTH COLUMNS", fontsize=10,
                        fontname="tiro", align=1)
    page.insert_textbox(pymupdf.Rect(72, 100, 300, 740), left, fontsize=10, fontname="tiro")
    page.insert_textbox(pymupdf.Rect(312, 100, 540, 740), right, fontsize=10, fontname="tiro")
    pix = page.get_pixmap(dpi=150, colorspace=pymupdf.csRGB, alpha=False)
    image = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.height, pix.width, 3)
    turn = cv2.getRotationMatrix2D((pix.width / 2, pix.height / 2), degrees, 1.0)
    image = cv2.warpAffine(image, turn, (pix.width, pix.height), borderValue=(255, 255, 255))
    return image, 150 / 72


def test_a_skewed_two_column_scan_is_read_column_by_column_with_its_page_size(backend):
    left = " ".join(f"Left column sentence number {i} ends here." for i in range(12)) + " LEFTEND"
    right = " ".join(f"Right column sentence number {i} ends here." for i in range(12)) + " RIGHTEND"
    image, zoom = skewed_two_column_page(left, right, 1.5)
    result = backend.recognize(RenderedPage(1, image, zoom, False), 612, 792)
    text = "\n".join(b.text for b in result.blocks)
    assert text.index("LEFTEND") < text.index("Right column sentence")
    assert text.index("RIGHTEND") > text.index("LEFTEND")
    assert cer_spaced(text, "RUNNING HEADER OVER BOTH COLUMNS " + left + " " + right) < 0.05
    assert (result.width, result.height) == (612, 792)
    for b in result.blocks:
        assert 0 <= b.bbox[0] < b.bbox[2] <= 612 and 0 <= b.bbox[1] < b.bbox[3] <= 792
