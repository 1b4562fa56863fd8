"""Tables read from the text layer: set between horizontal rules only (booktabs), or ruled
in part (rules around the header and the whole, none between the rows)."""

import pymupdf

from ocr_engine.backends.textlayer import extract_page

HEADER = ["Model", "Flow rate", "Pressure"]
BODY = [["P-100", "12 l/s", "3 bar"], ["P-200", "20 l/s", "5 bar"], ["P-300", "31 l/s", "7 bar"]]


def _booktabs(page: pymupdf.Page, top: float, x=(72, 200, 330), right=460, rows=(HEADER, *BODY),
              font: str = "helv") -> float:
    """A booktabs table: top rule, header, middle rule, body, bottom rule; returns its bottom."""
    page.draw_line((x[0], top), (right, top), width=0.8)
    y = top + 14
    for i, row in enumerate(rows):
        for xi, cell in zip(x, row):
            page.insert_text((xi + 2, y), cell, fontsize=10, fontname=font)
        y += 14
        if i == 0:
            page.draw_line((x[0], y - 9), (right, y - 9), width=0.5)
            y += 4
    page.draw_line((x[0], y - 8), (right, y - 8), width=0.8)
    return y


def _page(draw) -> pymupdf.Page:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    draw(page)
    return page


def _tables(page):
    return [b for b in extract_page(page).blocks if b.type == "table"]


def test_a_booktabs_table_is_one_table_with_its_header_row_and_columns():
    def draw(page):
        page.insert_text((72, 100), "Table 1: the pumps of the 2024 series.", fontsize=10)
        _booktabs(page, 120)
        page.insert_text((72, 230), "Every pump is tested before it leaves the factory.", fontsize=10)

    page = _page(draw)
    [table] = _tables(page)
    assert table.rows == [HEADER, *BODY]
    assert len(table.col_x) == 4 and table.col_x[0] == 72 and table.col_x[-1] == 460
    assert len(table.row_y) == len(table.rows) + 1
    assert "| Model | Flow rate | Pressure |" in table.text and "| P-300 | 31 l/s | 7 bar |" in table.text
    texts = [b.text for b in extract_page(page).blocks if b.type != "table"]
    assert any("Table 1" in t for t in texts) and not any("P-200" in t for t in texts)  # cells only in the table


def test_prose_between_a_pages_header_and_footer_rules_is_not_a_table():
    def draw(page):
        page.draw_line((72, 50), (523, 50))
        page.draw_line((72, 790), (523, 790))
        for i in range(10):
            page.insert_text((72, 100 + 14 * i), f"Line {i} of a paragraph of running text that fills the width.",
                             fontsize=10)

    assert _tables(_page(draw)) == []


def test_a_listing_framed_by_rules_and_a_table_of_contents_are_not_tables():
    def listing(page):
        _booktabs(page, 120, rows=[["$ ls -l", "", ""], ["-rw-r--r--", "1 root", "Makefile"],
                                   ["-rw-r--r--", "1 root", "README"], ["-rw-r--r--", "1 root", "setup.py"]],
                  font="cour")

    def contents(page):
        page.draw_line((72, 100), (523, 100))
        for i in range(6):
            page.insert_text((72, 120 + 14 * i), f"{i + 1} Chapter {i + 1}", fontsize=10)
            page.insert_text((200, 120 + 14 * i), " ".join(["."] * 20), fontsize=10)
            page.insert_text((500, 120 + 14 * i), str(10 * i + 1), fontsize=10)
        page.draw_line((72, 210), (523, 210))

    assert _tables(_page(listing)) == []
    assert _tables(_page(contents)) == []


def test_a_caption_that_mupdf_puts_in_the_block_of_the_last_rows_is_kept():
    # chfls1 p.8: the caption set tight under the bottom rule shared a MuPDF block with the
    # table's rows, and the whole block was left out as the table's, caption and all
    def draw(page):
        font, x, top = pymupdf.Font("helv"), (72, 200, 330), 120
        page.draw_line((x[0], top), (460, top), width=0.8)
        writer = pymupdf.TextWriter(page.rect)  # one text object: MuPDF makes one block of the lines
        y = top + 14
        for i, row in enumerate((HEADER, *BODY)):
            for xi, cell in zip(x, row):
                writer.append((xi + 2, y), cell, font=font, fontsize=10)
            y += 14
            if i == 0:
                page.draw_line((x[0], y - 9), (460, y - 9), width=0.5)
                y += 4
        page.draw_line((x[0], y - 8), (460, y - 8), width=0.8)
        writer.append((74, y), "Table 2: Flow rates of the pumps at rated speed, measured on the stand.",
                      font=font, fontsize=10)
        writer.append((74, y + 12), "Each pump was run for an hour first.", font=font, fontsize=10)
        writer.write_text(page)

    page = _page(draw)
    assert len(page.get_text("blocks")) == 2  # the rows and the caption in one block, as MuPDF reads them
    [table] = _tables(page)
    assert table.rows == [HEADER, *BODY]
    texts = [b.text for b in extract_page(page).blocks if b.type != "table"]
    assert texts == ["Table 2: Flow rates of the pumps at rated speed, measured on the stand. "
                     "Each pump was run for an hour first."]


# --- ruled in part: xtable's "|rr|l|lr|" (rules at the top, under the header and at the bottom;
# column rules drawn a row's height at a time; no rule between the rows or inside a ruled cell)

TLI = [["", "grade", "sex", "disadvg", "ethnicty", "tlimth"],
       ["1", "6", "M", "YES", "HISPANIC", "43"], ["2", "7", "M", "NO", "BLACK", "88"],
       ["3", "5", "F", "YES", "HISPANIC", "34"], ["4", "3", "M", "YES", "HISPANIC", "65"]]


def _partly_ruled(page: pymupdf.Page, top: float = 120) -> None:
    xs, rules, step = (75, 110, 150, 190, 250, 330), (72, 142, 182, 245, 372), 12
    for y in (top, top + step, top + step * len(TLI)):
        page.draw_line((rules[0], y), (rules[-1], y), width=0.4)
    for r, row in enumerate(TLI):
        for x in rules:  # each row's stretch of a column rule is a segment of its own
            page.draw_line((x, top + r * step), (x, top + (r + 1) * step), width=0.4)
        for x, cell in zip(xs, row):
            page.insert_text((x, top + r * step + 9), cell, fontsize=9)


def test_a_table_ruled_only_around_its_header_has_a_row_per_line_and_a_column_per_strip():
    page = _page(_partly_ruled)
    [table] = _tables(page)
    assert table.rows == TLI
    assert len(table.col_x) == len(TLI[0]) + 1 and len(table.row_y) == len(TLI) + 1
    assert table.row_y == sorted(table.row_y)


def test_a_ruled_cell_wrapped_over_two_lines_stays_one_row():
    # debmake-doc p.68: two cells of a row wrap, the first column's does not
    rows = [["path", "i386", "amd64"], ["/usr/include/", "/usr/include/i386-linux-gnu/pkg", "/usr/include/x86_64/pkg"],
            ["", "name/", "name/"], ["/usr/lib/", "/usr/lib/i386-linux-gnu/", "/usr/lib/x86_64-linux-gnu/"]]

    def draw(page):
        xs, top, step = (72, 180, 340, 520), 100, 14
        for y in (top, top + step, top + 3 * step, top + 4 * step):  # no rule between a row's two lines
            page.draw_line((xs[0], y), (xs[-1], y), width=0.5)
        for x in xs:
            page.draw_line((x, top), (x, top + 4 * step), width=0.5)
        for r, row in enumerate(rows):
            for x, cell in zip(xs, row):
                page.insert_text((x + 3, top + r * step + 10), cell, fontsize=9)

    [table] = _tables(_page(draw))
    assert table.rows == [rows[0], ["/usr/include/", "/usr/include/i386-linux-gnu/pkg name/", "/usr/include/x86_64/pkg name/"],
                          rows[3]]


def test_a_plots_crossing_lines_with_a_label_here_and_there_are_not_a_table():
    # fitdistrplus' CDF plots: axes, a frame, step curves, two legend labels
    def draw(page):
        page.draw_rect((100, 100, 400, 300), width=0.5)
        for i in range(1, 9):
            x, y = 100 + 35 * i, 300 - 24 * i
            page.draw_line((x - 35, y + 24), (x - 35, y), width=0.5)
            page.draw_line((x - 35, y), (x, y), width=0.5)
        page.insert_text((330, 130), "lognormal", fontsize=8)
        page.insert_text((330, 142), "MLE", fontsize=8)
        page.insert_text((80, 310), "0.0", fontsize=8)

    assert _tables(_page(draw)) == []


def test_a_table_boxed_in_a_frame_is_one_table_the_inner_one():
    """An example's output shown in a framed box (lshort-zh-cn p.40): the frame's rectangle is
    a grid round the table, and the table's own rules another; it was read twice, so two
    chunks of the same rows took two of a search's five places."""
    def draw(page):
        page.draw_rect((60, 100, 480, 230), width=0.6)  # the frame
        _booktabs(page, 120)

    [table] = _tables(_page(draw))
    assert table.rows == [HEADER, *BODY]
    assert table.bbox[0] >= 72 and table.bbox[2] <= 460  # the table's own edges, not the frame's
