"""``kb bench scans``' measures (``kb_dev.bench.scans``) on pages drawn here, whose truth is known:
each must rise and fall with what it claims to measure."""

from __future__ import annotations

import pymupdf

from kb_dev.bench.scans import false_tables, mixed, order, tables, token_columns
from kb_dev.scanbench import BenchDocument, Table, tokens, truth
from ocr_engine.api.pages import Block, PageResult

LEFT = [f"alpha{i} bravo{i} charlie{i} delta{i}" for i in range(16)]
RIGHT = [f"echo{i} foxtrot{i} golf{i} hotel{i}" for i in range(16)]
DOC = BenchDocument("drawn.pdf", "", "", "", "", "", 1, (1,), "two-column", "drawn", "en", "", "tuning")


def two_column_page() -> bytes:
    """One page: a title across both columns, then 16 lines in each column, written left column
    first (the content order a LaTeX class writes)."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=612, height=792)
    page.insert_text((72, 60), "A title across both columns of the page", fontsize=14)
    for i, text in enumerate(LEFT):
        page.insert_text((72, 100 + 14 * i), text, fontsize=10)
    for i, text in enumerate(RIGHT):
        page.insert_text((320, 100 + 14 * i), text, fontsize=10)
    return pdf.tobytes()


def test_the_truth_is_the_files_words_in_content_order_with_their_columns():
    page = truth(two_column_page(), DOC, {})[0]
    assert page.two_column and page.kind == "two-column"
    assert page.text.startswith("A title across") and page.text.index("alpha15") < page.text.index("echo0")
    columns = token_columns(page)
    assert columns["alpha3"] == "L" and columns["hotel9"] == "R" and "title" not in columns


def test_order_is_one_for_the_files_order_and_falls_when_columns_are_read_across():
    page = truth(two_column_page(), DOC, {})[0]
    good = "\n".join(["A title across both columns of the page"] + LEFT + RIGHT)
    across = "\n".join(["A title across both columns of the page"] + [f"{a} {b}" for a, b in zip(LEFT, RIGHT)])
    in_order, matched = order(page, good)
    assert in_order == matched == len(tokens(page.text))
    in_order, matched = order(page, across)
    assert matched == len(tokens(page.text)) and in_order < 0.6 * matched


def test_a_chunk_mixes_columns_when_it_goes_back_to_a_column_it_left():
    page = truth(two_column_page(), DOC, {})[0]
    columns = {1: token_columns(page)}
    assert mixed(" ".join(LEFT[10:] + RIGHT[:5]), [1], columns) is False  # the end of one column, then the next
    assert mixed(" ".join(f"{a} {b}" for a, b in zip(LEFT[:4], RIGHT[:4])), [1], columns) is True  # rows across
    assert mixed(" ".join(LEFT[:8] + RIGHT[:2] + LEFT[8:10]), [1], columns) is True  # a line run into the other column
    assert mixed("nothing of the page here", [1], columns) is None


def test_a_table_chunk_keeps_its_header_only_when_it_holds_the_header_row():
    page = truth(two_column_page(), DOC, {})[0]
    page.tables = [Table((72, 300, 540, 400), ["Model", "Flow rate", "Pressure"],
                         [["P-100", "40 l/s", "6 bar"], ["P-200", "55 l/s", "8 bar"]], None)]
    whole = {"text": "| Model | Flow rate | Pressure |\n| --- | --- | --- |\n| P-100 | 40 l/s | 6 bar |\n"
                     "| P-200 | 55 l/s | 8 bar |", "pages": [1]}
    headless = {"text": "| P-200 | 55 l/s | 8 bar |", "pages": [1]}
    count = tables([page], [whole, headless])
    assert (count.rows, count.rows_found, count.row_chunks, count.with_header) == (2, 2, 2, 1)


def test_a_table_block_where_the_original_has_no_table_is_claimed_falsely():
    page = truth(two_column_page(), DOC, {})[0]
    claimed = PageResult(page=1, markdown="", blocks=[Block("table", (72, 95, 540, 330), "| a | b |")])
    assert false_tables([page], [claimed]) == 1
    page.tables = [Table((70, 90, 545, 335), ["a", "b"], [["1", "2"]], None)]
    assert false_tables([page], [claimed]) == 0


def test_an_image_only_copy_is_the_same_bytes_every_time():
    """A copy is ingested by its bytes: a copy made again must be the same document, not a new version."""
    from kb_dev.scanbench import scanned

    born = two_column_page()
    assert scanned(DOC, born, 1.0) == scanned(DOC, born, 1.0)
    assert scanned(DOC, born, 1.0) != scanned(DOC, born, 2.0)


def test_a_tables_cells_side_by_side_are_not_columns_mixed():
    page = truth(two_column_page(), DOC, {})[0]
    page.tables = [Table((60, 90, 560, 130), ["h"], [["r"]], None)]  # over the first two rows of both columns
    columns = {1: token_columns(page)}
    assert "alpha0" not in columns[1] and "echo1" not in columns[1] and columns[1]["alpha5"] == "L"
    assert mixed(" ".join(f"{a} {b}" for a, b in zip(LEFT[:2], RIGHT[:2])), [1], columns) is None


def test_a_table_printed_without_a_header_row_counts_for_rows_not_for_headers():
    page = truth(two_column_page(), DOC, {})[0]
    page.tables = [Table((72, 300, 540, 400), [], [["P-100", "40 l/s", "6 bar"], ["P-200", "55 l/s", "8 bar"]], None)]
    count = tables([page], [{"text": "| P-100 | 40 l/s | 6 bar |\n| P-200 | 55 l/s | 8 bar |", "pages": [1]}])
    assert (count.rows, count.rows_found, count.row_chunks, count.with_header) == (2, 2, 0, 0)
