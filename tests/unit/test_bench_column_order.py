"""The structure bench's column-order figure: OCR text read across two columns scores low,
read column by column it scores 1, and short or unmatched pieces are left out."""

from kb_dev.bench.structure import column_order, in_order, pieces, two_column

LEFT = ["The genotype class stores both alleles of a marker as a single factor variable in R.",
        "Its levels are built by pasting the first and second allele together with a slash."]
RIGHT = ["Haplotypes keep the order of the alleles, since the phase of a marker is then known.",
         "A translation table maps each factor level to the names of its two separate alleles."]
REFERENCE = LEFT + RIGHT  # the text layer reads the left column, then the right


def lines(paragraph: str, size: int = 40) -> list[str]:
    return pieces([paragraph], size)


def test_the_longest_non_decreasing_run_counts_the_places_read_in_order():
    assert in_order([]) == 0
    assert in_order([(0, 0), (0, 5), (1, 0), (1, 9)]) == 4
    assert in_order([(1, 0), (0, 0), (1, 5), (0, 5)]) == 2
    assert in_order([3, 1, 2, 2, 5]) == 4


def test_columns_read_one_after_the_other_score_one():
    read = [ln for p in LEFT + RIGHT for ln in lines(p)]
    got = column_order(read, REFERENCE)
    assert got["matched"] == got["pieces"] == len(read) > 4
    assert got["in_order"] == got["matched"]


def test_rows_read_across_both_columns_score_low():
    left = [ln for p in LEFT for ln in lines(p)]
    right = [ln for p in RIGHT for ln in lines(p)]
    across = [ln for pair in zip(left, right) for ln in pair]  # left line, right line, left line...
    got = column_order(across, REFERENCE)
    assert got["matched"] == len(across)
    # one column read in order, and one line of the other: about half the lines
    assert got["in_order"] == len(left) + 1 < 0.7 * got["matched"]


def test_short_and_unknown_pieces_are_left_out_but_counted():
    read = ["2", "Figure", "Nothing like this sentence is anywhere in the text layer at all."] + lines(LEFT[0])
    got = column_order(read, REFERENCE)
    assert got["pieces"] == len(read)
    assert got["matched"] == got["in_order"] == len(read) - 3


def test_ocr_misreadings_still_match_their_place():
    read = ["The genotvpe class st0res both alleles of", "Haplotypes keep the order of the a1leles, since"]
    assert column_order(read, REFERENCE) == {"pieces": 2, "matched": 2, "in_order": 2}
    assert column_order(list(reversed(read)), REFERENCE)["in_order"] == 1


def test_a_page_is_two_columns_when_each_half_holds_paragraphs():
    para = "x" * 60
    left = [((50, 100 + 40 * i, 290, 130 + 40 * i), para) for i in range(3)]
    right = [((310, 100 + 40 * i, 550, 130 + 40 * i), para) for i in range(3)]
    full = [((50, 100 + 40 * i, 550, 130 + 40 * i), para) for i in range(6)]
    assert two_column(left + right, 600)
    assert not two_column(full, 600)
    assert not two_column(left + right[:2], 600)


def test_the_bench_pools_documents_and_prints_the_share():
    from kb_dev.bench.structure import column_order_table, format_table

    order = column_order_table([{"document": "a.scan.pdf", "pages": 2, "pieces": 30, "matched": 20, "in_order": 19},
                                {"document": "b.scan.pdf", "pages": 3, "pieces": 40, "matched": 30, "in_order": 30}])
    assert (order["pages"], order["matched"], order["in_order"], order["share"]) == (5, 50, 49, 0.98)
    assert [d["share"] for d in order["documents"]] == [0.95, 1.0]
    totals = {"pages": 5, "chunks": 1, "text_chunks": 1, "mid_sentence_at_page_break": 0,
              "mid_sentence_at_page_break_share": 0, "running_lines_in_chunks": 0, "running_lines": 0,
              "table_chunks_without_header": 0, "table_chunks": 0, "chunks_with_boxes": 1, "chunks_with_boxes_share": 1}
    table = format_table({"documents": [], "totals": totals, "column_order": order})
    assert "column_order, two-column scans (5 pages): 0.9800 of 50 matched OCR lines" in table


def test_the_report_labels_the_figures_graded_by_the_code_under_test_as_self_consistency_checks():
    """Issue 53: column order against the project's own text-layer reader on the pages XY-cut
    was tuned on, and table headers against the reader's own table finder, are no quality
    figures; the report says so beside them and points to kb bench scans."""
    from kb_dev.bench.structure import column_order_table, format_table

    order = column_order_table([{"document": "a.scan.pdf", "pages": 2, "pieces": 30, "matched": 20, "in_order": 19}])
    totals = {"pages": 5, "chunks": 1, "text_chunks": 1, "mid_sentence_at_page_break": 0,
              "mid_sentence_at_page_break_share": 0, "running_lines_in_chunks": 0, "running_lines": 0,
              "table_chunks_without_header": 1, "table_chunks": 3, "chunks_with_boxes": 1, "chunks_with_boxes_share": 1,
              "highlighted_page_share_median_scanned": 0.1, "sections_in_outline_scanned": 2,
              "sections_checked_scanned": 4, "sections_in_outline_share_scanned": 0.5}
    cer = {"en fit": {"pages": 1, "ppocr_cer": 0.1, "tesseract_cer": 0.2, "ppocr_pages_per_s": 1.0,
                      "tesseract_pages_per_s": 1.0}}
    lines = format_table({"documents": [], "totals": totals, "column_order": order, "cer": cer}).splitlines()
    for start in ("column_order,", "table chunks without their header row", "a hit's highlight, median share of "
                                                                            "its page, image-only copies"):
        line = next(x for x in lines if x.startswith(start))
        assert "self-consistency check, not quality" in line and "kb bench scans" in line
    assert any("neither is out of sample" in x for x in lines)
