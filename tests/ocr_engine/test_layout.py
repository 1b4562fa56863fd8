import math

import pytest

from ocr_engine.layout import Line, page_skew, reading_order, to_blocks

W = 600.0


def line(x0, y0, x1, text, h=12.0, conf=0.9):
    return Line((x0, y0, x1, y0 + h), text, conf)


def test_a_paragraph_of_full_width_lines_ending_short_is_one_block():
    blocks, md = to_blocks([line(50, 100, 550, "This bulletin applies to pumps built before"),
                            line(50, 116, 300, "the year 2024."),
                            line(50, 160, 550, "A second paragraph starts after a wider gap.")], W)
    assert [b.text for b in blocks] == ["This bulletin applies to pumps built before the year 2024.",
                                        "A second paragraph starts after a wider gap."]
    assert blocks[0].bbox == (50, 100, 550, 128)


def test_a_row_is_read_left_to_right_even_when_its_boxes_differ_by_a_pixel():
    blocks, _ = to_blocks([line(400, 99, 550, "63 / 233"), line(50, 100, 200, "Debian Reference")], W)
    assert [b.text for b in blocks] == ["Debian Reference", "63 / 233"]


def test_columns_do_not_merge_and_taller_lines_become_headings():
    left = [line(50, 100 + 16 * i, 280, f"left {i}") for i in range(4)]
    right = [line(320, 100 + 16 * i, 550, f"right {i}") for i in range(4)]
    title = line(50, 60, 550, "Chapter title across both columns", h=20)
    blocks, md = to_blocks(right + left + [title], W)
    assert blocks[0].type == "heading" and md.startswith("## Chapter title across")
    assert [b.text for b in blocks[1:]] == ["left 0 left 1 left 2 left 3", "right 0 right 1 right 2 right 3"]
    assert blocks[1].confidence == 0.9


def skewed(lines: list[tuple[float, float, float, str]], degrees: float, h: float = 10.0) -> list[Line]:
    """Lines as a scanner skewed by ``degrees`` would show them: each (x0, y0, x1, text) is turned
    about the page's centre, and comes back as its axis-aligned box and its slope."""
    a = math.radians(degrees)
    out = []
    for x0, y0, x1, text in lines:
        corners = [(x0, y0), (x1, y0), (x1, y0 + h), (x0, y0 + h)]
        turned = [(300 + (x - 300) * math.cos(a) - (y - 400) * math.sin(a),
                   400 + (x - 300) * math.sin(a) + (y - 400) * math.cos(a)) for x, y in corners]
        xs, ys = [p[0] for p in turned], [p[1] for p in turned]
        out.append(Line((min(xs), min(ys), max(xs), max(ys)), text, 0.9, a))
    return out


def test_a_skewed_two_column_page_with_a_spanning_line_is_read_column_by_column():
    # 1.5 degrees moves a column's edge by 13 pt down these 40 lines (480 pt): more than the 10 pt gutter.
    left = [(72, 120 + 12 * i, 295, f"L{i}") for i in range(40)]
    right = [(305, 120 + 12 * i, 528, f"R{i}") for i in range(40)]
    caption = [(200, 612, 400, "CAPTION")]  # across the gutter, below both columns
    below = [(72, 630 + 12 * i, 295, f"l{i}") for i in range(5)] + [(305, 630 + 12 * i, 528, f"r{i}") for i in range(5)]
    header = [(150, 90, 450, "HEADER")]
    lines = skewed(right + header + below + caption + left, 1.5)
    order = [ln.text for run in reading_order(lines, W) for ln in run]
    assert order == (["HEADER"] + [f"L{i}" for i in range(40)] + [f"R{i}" for i in range(40)] + ["CAPTION"]
                     + [f"l{i}" for i in range(5)] + [f"r{i}" for i in range(5)])


def test_a_skewed_paragraph_is_one_block_and_its_box_is_on_the_page():
    # Skewed by 1.5 degrees, a 450 pt line's box is 12 pt taller than its text, more than the pitch.
    lines = skewed([(72, 120 + 12 * i, 522, f"line{i}") for i in range(9)] + [(72, 228, 250, "end.")], -1.5)
    blocks, md = to_blocks(lines, W)
    assert [b.text for b in blocks] == [" ".join(f"line{i}" for i in range(9)) + " end."]
    assert "#" not in md
    assert blocks[0].bbox == (min(ln.bbox[0] for ln in lines), min(ln.bbox[1] for ln in lines),
                              max(ln.bbox[2] for ln in lines), max(ln.bbox[3] for ln in lines))


def test_a_running_header_over_the_right_column_is_read_before_the_left_column():
    head = [line(420, 40, 550, "RUNNING HEAD")]
    left = [line(50, 80 + 14 * i, 290, f"L{i}") for i in range(6)]
    right = [line(310, 80 + 14 * i, 550, f"R{i}") for i in range(6)]
    order = [ln.text for run in reading_order(left + right + head, W) for ln in run]
    assert order == ["RUNNING HEAD"] + [f"L{i}" for i in range(6)] + [f"R{i}" for i in range(6)]


def test_a_right_column_beside_a_figure_heading_the_left_one_is_read_after_the_left_column():
    # The figure has no text: the left column's lines start below it, under its caption. The
    # right column's first lines stand above them, but run on at the line pitch: not a header.
    caption = [line(50, 200, 290, "Figure 3: a caption")]
    left = [line(50, 220 + 14 * i, 290, f"L{i}") for i in range(10)]
    right = [line(310, 80 + 14 * i, 550, f"R{i}") for i in range(20)]
    order = [ln.text for run in reading_order(right + caption + left, W) for ln in run]
    assert order == ["Figure 3: a caption"] + [f"L{i}" for i in range(10)] + [f"R{i}" for i in range(20)]


def test_aligned_fields_inside_a_column_are_not_cut_as_columns():
    # R output in the left column: two fields per row, a wide gap between them.
    left = [line(50, 80 + 14 * i, 290, f"L{i}") for i in range(4)]
    left += [ln for i in range(4, 10)
             for ln in (line(50, 80 + 14 * i, 120, f"a{i}"), line(200, 80 + 14 * i, 290, f"b{i}"))]
    right = [line(310, 80 + 14 * i, 550, f"R{i}") for i in range(10)]
    order = [ln.text for run in reading_order(right + left, W) for ln in run]
    assert order == ([f"L{i}" for i in range(4)] + [t for i in range(4, 10) for t in (f"a{i}", f"b{i}")]
                     + [f"R{i}" for i in range(10)])


def test_a_table_on_a_one_column_page_is_read_row_by_row_though_a_line_crosses_its_gap():
    text = [line(50, 100 + 14 * i, 550, f"para {i}") for i in range(3)] + [line(50, 142, 330, "para end:")]
    table = []
    for i in range(6):
        table += [line(60, 160 + 14 * i, 250, f"key {i}"), line(320, 160 + 14 * i, 540, f"value {i}")]
    after = [line(50, 250 + 14 * i, 550, f"after {i}") for i in range(3)]
    order = [ln.text for run in reading_order(after + table + text, W) for ln in run]
    assert order == [ln.text for ln in sorted(text + table + after, key=lambda ln: (ln.bbox[1], ln.bbox[0]))]
    # The same band with no full-width text around it is two columns, "para end:" across them.
    order = [ln.text for run in reading_order(table + text[3:], W) for ln in run]
    assert order == ["para end:"] + [f"key {i}" for i in range(6)] + [f"value {i}" for i in range(6)]


def test_a_table_of_four_columns_filling_a_page_is_read_row_by_row():
    rows = []
    for i in range(15):
        y = 80 + 16 * i
        rows += [line(50, y, 120, f"pkg{i}"), line(140, y, 230, f"V:{i}"), line(330, y, 370, f"{i}0"),
                 line(390, y, 540, f"what {i} does")]
    order = [ln.text for run in reading_order(rows, W) for ln in run]
    assert order == [ln.text for ln in sorted(rows, key=lambda ln: (ln.bbox[1], ln.bbox[0]))]


def test_a_band_that_many_lines_cross_in_the_middle_is_read_row_by_row():
    # A form: label and value side by side, and every third row one entry across the middle.
    rows = []
    for i in range(12):
        y = 100 + 14 * i
        rows += [line(150, y, 480, f"wide {i}")] if i % 3 == 2 else [line(72, y, 250, f"label {i}"),
                                                                      line(350, y, 528, f"value {i}")]
    order = [ln.text for run in reading_order(rows, W) for ln in run]
    assert order == [ln.text for ln in sorted(rows, key=lambda ln: (ln.bbox[1], ln.bbox[0]))]


def test_the_skew_is_the_slope_of_the_long_lines():
    lines = skewed([(72, 120 + 12 * i, 528, "x") for i in range(5)], 1.2) + [line(72, 300, 100, "short")]
    assert math.degrees(page_skew(lines)) == pytest.approx(1.2)


def test_rows_of_aligned_cells_are_one_table_block_with_its_header_and_columns():
    text = [line(50, 60, 550, "The pumps of the 2024 series, by model, are listed below in full."),
            line(50, 74, 300, "See the table.")]
    table = [line(60, 100, 130, "Model"), line(200, 100, 280, "Flow"), line(380, 100, 470, "Pressure")]
    for i in range(4):
        y = 116 + 16 * i
        table += [line(60, y, 120, f"P-{i}"), line(200, y, 250, f"{i}0 l/s"), line(380, y, 430, f"{i} bar")]
    table.append(line(200, 116 + 16 * 4, 260, "(peak)"))  # P-3's flow, wrapped onto a second line
    after = [line(50, 220, 550, "Every model is tested at the factory before it leaves.")]
    blocks, md = to_blocks(text + table + after, W)
    assert [b.type for b in blocks] == ["text", "table", "text"]
    t = blocks[1]
    assert t.rows == [["Model", "Flow", "Pressure"], ["P-0", "00 l/s", "0 bar"], ["P-1", "10 l/s", "1 bar"],
                      ["P-2", "20 l/s", "2 bar"], ["P-3", "30 l/s (peak)", "3 bar"]]
    assert len(t.col_x) == 4 and t.col_x[0] == 60 and t.col_x[-1] == 470 and 130 < t.col_x[1] < 200
    assert len(t.row_y) == len(t.rows) + 1 and t.row_y[0] == 100 and t.row_y[-1] == 192
    assert "| Model | Flow | Pressure |" in md and "| P-3 | 30 l/s (peak) | 3 bar |" in md


def test_a_list_whose_numbers_were_boxed_apart_is_not_a_table():
    rows = []
    for i in range(5):
        rows += [line(60, 100 + 16 * i, 75, f"{i + 1}."), line(90, 100 + 16 * i, 400, f"step {i} of the procedure")]
    blocks, _ = to_blocks(rows, W)
    assert "table" not in {b.type for b in blocks}


def test_two_lines_side_by_side_are_a_label_and_its_value_not_a_table():
    blocks, _ = to_blocks([line(60, 100, 150, "Author:"), line(200, 100, 400, "J. Smith"),
                           line(60, 116, 150, "Date:"), line(200, 116, 400, "2024")], W)
    assert "table" not in {b.type for b in blocks}


def test_the_page_number_under_a_table_at_the_pages_foot_is_not_a_cell_of_its_last_row():
    # xtableGallery's scan, p.10: the folio centred at the foot, under a table in the left half,
    # was read as wrapped text of the table's last row
    table = [line(90, 600, 130, "grade"), line(160, 600, 190, "sex"), line(250, 600, 300, "tlimth")]
    for i in range(3):
        y = 616 + 16 * i
        table += [line(110, y, 130, f"{i + 1}"), line(170, y, 185, "M"), line(280, y, 300, f"{40 + i}")]
    text = [line(90, 560, 500, "The first rows of the data frame, printed with the default alignment."),
            line(90, 574, 200, "tli.table")]
    folio = line(293, 780, 303, "10")
    blocks, _ = to_blocks(text + table + [folio], W)
    assert [b.type for b in blocks] == ["text", "table", "text"] and blocks[2].text == "10"
    assert blocks[1].rows[-1] == ["3", "M", "42"]


def _gallery_table(top: float, header: list[str], rows: int) -> list[Line]:
    xs = [(110, 140), (170, 200), (240, 280), (320, 360)]
    out = [line(x0, top, x1, h, h=16.0) for (x0, x1), h in zip(xs, header)]  # header cells boxed tall
    for i in range(rows):
        out += [line(x0, top + 18 + 12 * i, x1, f"{i}{c}") for c, (x0, x1) in enumerate(xs)]
    return out


def test_two_tables_with_a_heading_and_code_between_them_are_two_table_blocks():
    # xtableGallery's scan p.2: code between two tables came in four overlapping boxes; read as a
    # row of cells it bridged the tables' columns, so neither was found, and the tall boxes of
    # the header cells ("grade", "disadvg") became headings
    first = _gallery_table(100, ["grade", "sex", "disadvg", "tlimth"], 5)
    between = [line(90, 200, 110, "2.2"), line(118, 200, 170, "Matrix"),  # a blank line above it
               line(90, 222, 165, "design.matrix"), line(158, 222, 256, "<- model.matrix(~"),
               line(252, 222, 316, "sex*grade,"), line(311, 222, 420, "data = tli[1:10,])")]
    second = _gallery_table(242, ["(Intercept)", "sexM", "grade", "sexM:grade"], 4)
    intro = [line(50, 60, 550, "This document gives a gallery of tables which can be made using the package."),
             line(50, 74, 550, "The first step is to load the package and set an option for this document.")]
    blocks, _ = to_blocks(intro + first + between + second, W)
    tables = [b for b in blocks if b.type == "table"]
    assert [t.rows[0] for t in tables] == [["grade", "sex", "disadvg", "tlimth"],
                                           ["(Intercept)", "sexM", "grade", "sexM:grade"]]
    assert [len(t.rows) for t in tables] == [6, 5]
    assert [b.text for b in blocks if b.type == "heading"] == ["2.2 Matrix"]  # the section title only
    assert any("model.matrix" in b.text for b in blocks if b.type == "text")


def test_a_rows_last_value_in_a_row_of_its_own_does_not_cut_the_table():
    # xtableGallery's scan p.23, skewed: a row's last value sits a little lower than the rest
    # of it and forms a one-cell row; the table goes on under it
    xs = [(100, 120), (150, 180), (210, 240), (270, 300)]
    lines = [line(50, 60, 550, "A matrix of random numbers, printed with two digits after the point in full.")]
    lines += [line(x0, 100, x1, f"c{c}") for c, (x0, x1) in enumerate(xs)]
    for i in range(8):
        y = 116 + 16 * i
        cells = [line(x0, y, x1, f"{i}.{c}") for c, (x0, x1) in enumerate(xs)]
        if i == 3:
            cells[-1] = line(270, y + 8, 300, "3.3")
        lines += cells
    blocks, _ = to_blocks(lines, W)
    assert [b.type for b in blocks] == ["text", "table"]
    assert len(blocks[1].rows) == 9 and blocks[1].rows[4] == ["3.0", "3.1", "3.2", "3.3"]


def test_a_column_of_a_letter_here_and_there_beside_text_is_not_a_table():
    # exam-zh's scan p.2: the binding margin's vertical "装订线", a letter beside some lines
    # of the questions, whose options stand in four aligned columns
    lines = [line(50, 60, 550, "一、选择题：本题共8小题，每小题5分，共40分。在每小题给出的四个选项中。")]
    options = [(104, 142), (220, 271), (338, 389), (456, 516)]
    y = 100
    for n, letter in ((1, "订"), (2, None), (3, "线")):
        if letter:
            lines.append(line(12, y, 30, letter))
        lines.append(line(88, y, 388, f"{n}. 已知集合A，B，则A∩B的元素是"))
        y += 18
        lines += [line(x0, y, x1, f"{'ABCD'[k]}. {{{n}{k}}}") for k, (x0, x1) in enumerate(options)]
        y += 18
    blocks, _ = to_blocks(lines, W)
    assert "table" not in {b.type for b in blocks}


def test_a_row_whose_name_the_detector_missed_is_a_row_not_wrapped_text_of_the_row_above():
    # xtableGallery's scan p.18: the one-digit row names "4" to "7" were not found, and their
    # rows were joined to row 3 ("34 65 75 74 72" in one cell)
    xs = [(100, 110), (150, 180), (210, 240), (270, 300)]
    lines = [line(50, 60, 550, "The data frame again, with the row names rotated by ninety degrees in the output.")]
    lines += [line(x0, 100, x1, h) for (x0, x1), h in zip(xs[1:], ["grade", "sex", "tlimth"])]
    for i in range(1, 6):
        y = 100 + 16 * i
        lines += [line(x0, y, x1, f"{i}{c}") for c, (x0, x1) in enumerate(xs) if c or i != 4]
    lines.append(line(270, 100 + 16 * 6, 300, "(max)"))  # a wrapped cell is still joined
    blocks, _ = to_blocks(lines, W)
    assert [b.type for b in blocks] == ["text", "table"]
    assert blocks[1].rows == [["", "grade", "sex", "tlimth"], ["10", "11", "12", "13"], ["20", "21", "22", "23"],
                              ["30", "31", "32", "33"], ["", "41", "42", "43"], ["50", "51", "52", "53 (max)"]]


def test_tall_lines_of_prose_code_or_cells_are_no_headings_but_titles_are():
    # xtableGallery's scan: most lines of a gallery page are table cells (digits, no ascenders),
    # so body text and code stand 1.3 times over the page's median box; each such line became a
    # heading and the section of the chunks after it (249 of the scans' 289 headings)
    cells = [line(100 + 60 * c, 400 + 12 * r, 140 + 60 * c, f"{r}.{c}", h=10) for r in range(6) for c in range(5)]
    tall = [
        line(50, 60, 200, "5.1 Adding a centering environment", h=18),  # a numbered title
        line(50, 82, 500, "print(xtable(anova(fm3)), caption = 'centred')", h=16),  # code below it
        line(50, 120, 150, "Time series", h=18),  # an unnumbered title
        line(50, 150, 500, "Booktabs is incompatible with vertical lines in tables, so the line is removed.", h=16),
        line(50, 180, 300, "temp.table <- xtable(temp.ts, digits = 0)", h=16),
        line(50, 210, 550, "Row and column variable names can be formatted specially using sanitization, and row and", h=16),
        line(50, 227, 300, "column variable names can be rotated.", h=16),
        line(50, 270, 550, "所以gentoo的man手册页应叫gentoo.1。如果原始代码中没有gentoo.1", h=16),
        line(50, 300, 80, "12.", h=16),
        line(50, 330, 250, 'tabular.environment = "longtable")', h=16),
    ]
    blocks, _ = to_blocks(tall + cells, W)
    assert [b.text for b in blocks if b.type == "heading"] == ["5.1 Adding a centering environment", "Time series"]
    # the wrapped line and the one it goes on in are one paragraph again
    assert any(b.text.startswith("Row and column") and b.text.endswith("rotated.") for b in blocks)


def test_a_section_number_and_its_title_are_a_heading_at_the_numbers_depth_however_tall():
    # xtableGallery's scan: LaTeX sets a subsection under the height that makes a heading, and
    # the detector boxes "2.6" and "prcomp" apart; "2.3 aov" comes in one box
    body = [line(50, 100 + 14 * i, 550, f"Body line {i} of the section text goes on here") for i in range(3)]
    lines = [line(50, 60, 62, "2", h=12), line(70, 60, 150, "Gallery", h=12), *body,
             line(50, 160, 70, "2.6", h=12), line(78, 160, 140, "prcomp", h=12),
             line(50, 180, 300, "pr1 <- prcomp(USArrests)"),
             line(50, 200, 120, "2.3 aov", h=12),
             line(50, 220, 62, "1", h=12), line(70, 220, 140, "1127409", h=12),  # a data row: digits
             line(50, 240, 70, "3.1", h=12), line(78, 240, 200, "Ends a sentence.", h=12),
             line(50, 260, 70, "4.2", h=12), line(78, 260, 140, "Flow", h=12), line(300, 260, 340, "12 l/s", h=12)]
    blocks, md = to_blocks(lines, W)
    assert [(b.text, b.level) for b in blocks if b.type == "heading"] == [("2 Gallery", 2), ("2.6 prcomp", 3),
                                                                          ("2.3 aov", 3)]
    assert "### 2.6 prcomp" in md and "## 2 Gallery" in md
