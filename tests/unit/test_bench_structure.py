"""kb bench structure's located-hit figures: the highlighted share of a page, real sections."""

import pytest

from kb_dev.bench.structure import Document, _union_area, highlighted_shares, real_sections


def test_the_union_of_overlapping_boxes_counts_their_overlap_once():
    assert _union_area([(0, 0, 10, 10)]) == 100
    assert _union_area([(0, 0, 10, 10), (5, 5, 15, 15)]) == 175
    assert _union_area([(0, 0, 10, 10), (0, 0, 10, 10), (20, 0, 30, 5)]) == 150


def _doc(chunks, outline=None):
    return Document("d.pdf", "en", True, 2, chunks, sizes={1: (100.0, 200.0), 2: (100.0, 200.0)}, outline=outline)


def test_a_chunk_is_measured_on_each_page_it_has_boxes_on():
    chunk = {"text": "x", "pages": [1, 2], "boxes": [{"page": 1, "bbox": [0, 0, 100, 100]},
                                                       {"page": 1, "bbox": [0, 50, 100, 150]},
                                                       {"page": 2, "bbox": [0, 0, 50, 40]},
                                                       {"page": 2, "bbox": None}]}
    assert highlighted_shares(_doc([chunk])) == [pytest.approx(0.75), pytest.approx(0.1)]


def test_a_section_counts_when_the_outline_holds_it_numbers_aside():
    chunks = [{"text": "a", "section": "Manual / 2.1 Installing the pump"},
              {"text": "b", "section": "Manual / Julius P. Kumquat"},
              {"text": "c", "section": None}]
    assert real_sections(_doc(chunks, outline=["Manual", "2 Setup", "2.1 Installing the pump"])) == (1, 2)
    assert real_sections(_doc(chunks)) == (0, 0)  # no outline: not counted
