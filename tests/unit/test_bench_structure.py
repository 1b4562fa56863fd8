"""kb bench structure's located-hit figures: the highlighted share of a page, real sections."""

import pytest

from kb_dev.bench.structure import Document, _union_area, headless_table_chunks, highlighted_shares, real_sections


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


def test_an_axis_label_or_a_stray_letter_is_not_a_part_of_every_title():
    outline = ["Manual", "2 Setup", "2.1 Installing the pump"]
    labels = ["0.04", "s", "2", "Installing the pump on its base", "Installing"]
    chunks = [{"text": "a", "section": f"Manual / {label}"} for label in labels]
    # only the label that holds a whole title counts; "Installing" (10 characters) is a part of one
    assert real_sections(_doc(chunks, outline=outline)) == (2, 5)


def test_a_chunk_ending_open_at_a_page_break_counts_whatever_the_next_starts_with():
    from kb_dev.bench.structure import mid_sentence_cuts, open_at_page_break

    chunks = [{"text": "It runs on the", "pages": [1], "kind": "text"},
              {"text": "Pump P-100 keeps going.", "pages": [2], "kind": "text"},  # a capital: the reader's rule misses it
              {"text": "A closed sentence.", "pages": [2], "kind": "text"},
              {"text": "and on.", "pages": [3], "kind": "text"}]
    assert open_at_page_break(chunks) == 1
    assert mid_sentence_cuts(chunks)[0] == 0


def test_lines_set_aside_that_the_text_layer_does_not_hold_as_running_are_over_removed():
    from kb_dev.bench.structure import Line, over_removed

    doc = _doc([])
    doc.running = [Line(1, (0, 0, 10, 10), "Field Guide 12"), Line(2, (0, 0, 10, 10), "Field Guide 13")]
    doc.set_aside = [Line(1, (0, 0, 10, 10), "Field Guide 12"), Line(2, (0, 0, 10, 10), "Fie1d Guide 13"),
                     Line(2, (0, 50, 10, 60), "The pump must be primed before it is started.")]
    assert [ln.text for ln in over_removed(doc)] == ["The pump must be primed before it is started."]


def test_cer_is_reported_for_the_scans_thresholds_were_fitted_on_and_for_the_other_scans_apart():
    from kb_dev.bench.structure import FIT_SCANS, _cer_table

    fit = next(iter(FIT_SCANS))
    parts = [{"language": "en", "document": fit, "pages": 2, "reference_chars": 100, "ppocr_edits": 10,
              "tesseract_edits": 20, "ppocr_seconds": 2.0, "tesseract_seconds": 1.0},
             {"language": "en", "document": "other.scan.pdf", "pages": 1, "reference_chars": 100, "ppocr_edits": 30,
              "tesseract_edits": 5, "ppocr_seconds": 1.0, "tesseract_seconds": 1.0}]
    table = _cer_table(parts)
    assert table["en"]["ppocr_cer"] == 0.2 and table["en"]["pages"] == 3
    assert table["en fit"]["ppocr_cer"] == 0.1 and table["en other"]["ppocr_cer"] == 0.3
    assert table["en other"]["tesseract_cer"] == 0.05


def test_a_table_row_counts_headless_only_in_a_chunk_on_its_tables_page():
    # the xtable gallery prints one data frame in many tables: a row of page 2's table held by
    # page 5's table chunk, under that table's own header, is not page 2's row without its header
    row = ["6", "M", "HISPANIC", "43"]
    chunks = [{"text": "| grade | sex | ethnicty | tlimth |\n| 6 | M | HISPANIC | 43 |", "pages": [2]},
              {"text": "| A | B | C | D |\n| 6 | M | HISPANIC | 43 |", "pages": [5]},
              {"text": "6 M HISPANIC 43, the first row, without its header", "pages": [2]}]
    doc = _doc(chunks)
    doc.tables = [(2, ["grade", "sex", "ethnicty", "tlimth"], [row])]
    assert headless_table_chunks(doc) == (1, 2)


def test_a_row_of_a_tables_part_below_a_group_row_is_held_under_the_tables_header():
    # lshort-zh-cn p.76, Table 5.4: the finder ends a table at a group row's rules, and its
    # part below starts with a row, not a header; the reader joins the parts again
    first, part = ["lmodern", "Latin Modern fonts"], ["cm-unicode", "Computer Modern Unicode"]
    row = ["inconsolata", "Inconsolata mono"]
    chunk = {"text": "| lmodern | Latin Modern fonts |\n| --- | --- |\n| 符号宏包 |  |\n| inconsolata | Inconsolata mono |",
             "pages": [76]}
    doc = _doc([chunk])
    doc.tables = [(76, first, [["cmbright", "Computer Modern Bright"]]), (76, part, [row])]
    assert headless_table_chunks(doc) == (0, 1)
    # a table of other columns above it is not its table
    doc.tables = [(76, first + ["x"], [["cmbright", "Computer Modern Bright", "y"]]), (76, part, [row])]
    assert headless_table_chunks(doc) == (1, 1)


def test_a_row_is_matched_within_one_line_and_under_any_header_of_its_page_that_holds_it():
    row = ["9", "6", "M NO WHITE"]
    # xtableGallery p.17: "| 8 | BLACK 79 |" then "| 6 | M NO WHITE |" read as the row "9 6 M NO WHITE"
    # when the chunk was flattened whole
    doc = _doc([{"text": "| age | sex |\n| --- | --- |\n| 8 | BLACK 79 |\n| 6 | M NO WHITE |", "pages": [17]}])
    doc.tables = [(17, ["grade", "sex"], [row])]
    assert headless_table_chunks(doc) == (0, 0)
    # one data frame printed twice on a page: its rows are held under either table's header
    doc = _doc([{"text": "| age | sex |\n| --- | --- |\n| 9 | 6 | M NO WHITE |", "pages": [17]}])
    doc.tables = [(17, ["grade", "sex"], [row]), (17, ["age", "sex"], [row])]
    assert headless_table_chunks(doc) == (0, 1)
    doc.tables = [(17, ["grade", "sex"], [row])]
    assert headless_table_chunks(doc) == (1, 1)
    # a header cell's pipe, escaped in the chunk's Markdown, is still the header
    doc = _doc([{"text": "| Pr(>\\|t\\|) | form |\n| --- | --- |\n| 9 | 6 | M NO WHITE |", "pages": [17]}])
    doc.tables = [(17, ["Pr(>|t|)", "form"], [row])]
    assert headless_table_chunks(doc) == (0, 1)
