"""Reading an OCR page by a layout model's regions (``ocr_engine.layout.to_blocks`` with regions):
lines drawn here, regions given as a model would give them, errors included."""

from ocr_engine.layout import Line, to_blocks
from ocr_engine.regions import Region, RegionLabel

W, H = 612.0, 792.0


def line(x0, y0, x1, text, h=11.0):
    return Line((x0, y0, x1, y0 + h), text, 0.9)


def region(x0, y0, x1, y1, label=RegionLabel.TEXT, score=0.9):
    return Region((x0, y0, x1, y1), label, score)


def bullets_beside_prose():
    """A left column of bullets and a right column of prose, their lines level with each other."""
    left = [line(72, 100 + 14 * i, 290, f"· keyword item number {i} of the list") for i in range(6)]
    right = [line(322, 100 + 14 * i, 540, f"class may be moved {i} or copied, usually") for i in range(6)]
    return left, right


def test_two_columns_of_prose_level_with_each_other_are_two_text_blocks_not_a_table():
    left, right = bullets_beside_prose()
    blocks, _ = to_blocks(left + right, W, [region(70, 98, 292, 186), region(320, 98, 542, 186)], H)
    assert [b.type for b in blocks] == ["text", "text"]
    assert blocks[0].text.startswith("· keyword item number 0") and "number 5" in blocks[0].text
    assert blocks[1].text.startswith("class may be moved 0") and "moved 5" in blocks[1].text


def test_a_table_region_is_read_as_a_table_and_its_caption_is_a_caption():
    header = [line(100, 200, 180, "Margin"), line(250, 200, 330, "A4 paper"), line(400, 200, 500, "US letter")]
    rows = [[line(100, 215 + 15 * i, 180, name), line(250, 215 + 15 * i, 330, f"{19 + i} mm"),
             line(400, 215 + 15 * i, 500, f"0.{75 + i} in")] for i, name in enumerate(["Top", "Bottom", "Left"])]
    caption = line(200, 180, 420, "Table 1: Margin specifications")
    regions = [region(95, 198, 505, 262, RegionLabel.TABLE), region(205, 181, 415, 190, RegionLabel.TABLE_CAPTION)]
    blocks, _ = to_blocks([caption] + header + [c for r in rows for c in r], W, regions, H)
    assert [b.type for b in blocks] == ["caption", "table"]
    assert blocks[1].rows[0] == ["Margin", "A4 paper", "US letter"] and blocks[1].rows[2] == ["Bottom", "20 mm", "0.76 in"]


def test_a_region_across_the_gutter_is_cut_into_its_columns():
    left = [line(72, 100 + 14 * i, 295, f"left column line {i} of running text") for i in range(8)]
    right = [line(318, 100 + 14 * i, 540, f"right column line {i} of running text") for i in range(8)]
    # the model's error: a one-line region over the first line of both columns
    regions = [region(80, 101, 450, 110), region(70, 112, 297, 214), region(316, 112, 542, 214)]
    blocks, _ = to_blocks(left + right, W, regions, H)
    text = " ".join(b.text for b in blocks)
    assert text.index("left column line 7") < text.index("right column line 0")
    order = [int(w) for w in text.replace("left column line", "").replace("right column line", "").split()
             if w.isdigit()]
    assert order == list(range(8)) + list(range(8))


def test_two_regions_found_for_one_column_are_read_as_one_column():
    col = [line(72, 100 + 14 * i, 295, f"paragraph line {i} goes on") for i in range(10)]
    other = [line(318, 100 + 14 * i, 540, f"other column line {i}") for i in range(10)]
    # a reference region inside a text region: the same column, found twice
    regions = [region(70, 98, 297, 242), region(70, 150, 297, 200, RegionLabel.REFERENCE), region(316, 98, 542, 242)]
    blocks, _ = to_blocks(col + other, W, regions, H)
    text = " ".join(b.text for b in blocks)
    firsts = [text.index(f"paragraph line {i} ") for i in range(10)]
    assert firsts == sorted(firsts) and firsts[-1] < text.index("other column line 0")


def test_running_header_and_footer_regions_are_typed_only_in_the_pages_bands():
    header = line(72, 40, 300, "Journal of Examples 12 (2026)")
    body = [line(72, 300 + 14 * i, 540, f"body line {i} of the only column of this page") for i in range(4)]
    footer = line(280, 750, 330, "17")
    middle = line(72, 400, 300, "a line the model took for a footer")
    regions = [region(70, 38, 302, 52, RegionLabel.HEADER), region(70, 298, 542, 356),
               region(278, 748, 332, 762, RegionLabel.FOOTER), region(70, 398, 302, 412, RegionLabel.FOOTER)]
    blocks, _ = to_blocks([header, footer, middle] + body, W, regions, H)
    types = {b.text: b.type for b in blocks}
    assert types["Journal of Examples 12 (2026)"] == "header" and types["17"] == "footer"
    assert types["a line the model took for a footer"] == "text"


def test_a_figure_region_keeps_its_labels_out_of_the_text_unless_it_holds_prose():
    labels = [line(100 + 60 * i, 200, 130 + 60 * i, f"{i}.{i}") for i in range(4)]
    prose = [line(72, 400 + 14 * i, 540, f"a whole line of running text number {i} that the model called a figure")
             for i in range(5)]
    regions = [region(95, 150, 320, 215, RegionLabel.FIGURE), region(70, 398, 542, 470, RegionLabel.FIGURE)]
    blocks, _ = to_blocks(labels + prose, W, regions, H)
    assert [b.type for b in blocks] == ["figure", "text"]


def test_a_page_where_the_model_found_nothing_is_read_by_geometry():
    left, right = bullets_beside_prose()
    assert to_blocks(left + right, W, [], H) == to_blocks(left + right, W, None, H)


def test_a_title_region_is_a_heading_with_its_section_number_as_its_level():
    title = line(72, 100, 260, "2.3 Results of the survey", h=13)
    body = [line(72, 120 + 14 * i, 540, f"text under the section, line {i} of it") for i in range(3)]
    blocks, md = to_blocks([title] + body, W, [region(70, 99, 262, 114, RegionLabel.TITLE), region(70, 118, 542, 165)], H)
    assert blocks[0].type == "heading" and blocks[0].level == 3
    assert md.startswith("### 2.3 Results of the survey")


def merged(y: float, left: str, right: str, gutter: tuple[float, float] = (296.0, 316.0)) -> Line:
    """One detected line across the gutter: the left column's line and the right one's level with
    it, with each character's place and the blank stretches as the recogniser and the ink give them."""
    x0, x1 = 72.0, 540.0
    length = x1 - x0
    text = f"{left} {right}"
    places = [72 + (gutter[0] - 72) * i / len(left) for i in range(len(left))] + [(gutter[0] + gutter[1]) / 2]
    places += [gutter[1] + (540 - gutter[1]) * i / len(right) for i in range(len(right))]
    gaps = [((gutter[0] - x0) / length, (gutter[1] - x0) / length)]
    gaps += [((p - x0) / length + 0.001, (p - x0) / length + 0.006) for p, ch in zip(places, text) if ch == " "]
    return Line((x0, y, x1, y + 11), text, 0.9, 0.0, [(p - x0) / length for p in places], gaps)


def test_a_line_drawn_across_a_narrow_gutter_is_cut_into_its_columns_lines():
    lines = [merged(100 + 14 * i, f"left column words of line {i}", f"right column words of line {i}") for i in range(8)]
    regions = [region(70, 98, 294, 212), region(318, 98, 542, 212)]
    blocks, _ = to_blocks(lines, W, regions, H)
    assert [b.type for b in blocks] == ["text", "text"]
    assert blocks[0].text == " ".join(f"left column words of line {i}" for i in range(8))
    assert blocks[1].text == " ".join(f"right column words of line {i}" for i in range(8))
    assert blocks[0].bbox[2] < 300 < blocks[1].bbox[0]


def test_a_line_across_the_whole_page_is_not_cut_where_no_regions_stand_side_by_side():
    lines = [merged(100, "a title that runs the width of the page", "and goes on past its middle")]
    lines += [line(72, 130 + 14 * i, 540, f"one column of text, line {i}") for i in range(3)]
    blocks, _ = to_blocks(lines, W, [region(70, 98, 542, 113, RegionLabel.TITLE), region(70, 128, 542, 172)], H)
    assert blocks[0].text == "a title that runs the width of the page and goes on past its middle"


def units_table(top: float = 200.0) -> list[Line]:
    """A table whose header is set on two lines (names, then units) over rows of numbers."""
    xs = [(100, 170), (220, 300), (350, 430)]
    out = [line(a, top, b, t) for (a, b), t in zip(xs, ["Program", "Run time", "Sync time"])]
    out += [line(a, top + 13, b, t) for (a, b), t in zip(xs[1:], ["seconds", "seconds"])]
    for i in range(4):
        out += [line(a, top + 30 + 14 * i, b, t) for (a, b), t in zip(xs, [f"LU.{i}", f"{2116 + i}.54", f"0.00{i}"])]
    return out


def test_a_header_on_two_lines_over_numbers_is_one_header_row_in_a_table_region():
    blocks, _ = to_blocks(units_table(), W, [region(95, 198, 435, 290, RegionLabel.TABLE)], H)
    assert [b.type for b in blocks] == ["table"]
    assert blocks[0].rows[0] == ["Program", "Run time seconds", "Sync time seconds"]
    assert blocks[0].rows[1] == ["LU.0", "2116.54", "0.000"] and len(blocks[0].rows) == 5


def test_a_table_the_model_calls_a_figure_is_read_as_a_table_and_a_plot_stays_a_figure():
    blocks, _ = to_blocks(units_table(), W, [region(95, 198, 435, 290, RegionLabel.FIGURE)], H)
    assert [b.type for b in blocks] == ["table"]
    blocks, _ = to_blocks(units_table(), W, [region(95, 198, 435, 290, RegionLabel.FIGURE),
                                             region(94, 197, 436, 291, RegionLabel.TABLE)], H)
    assert [b.type for b in blocks] == ["table"]
    ticks = [line(100 + 80 * i, 500, 120 + 80 * i, str(i * 200)) for i in range(5)] + [line(250, 520, 330, "n/samples")]
    blocks, _ = to_blocks(ticks, W, [region(95, 495, 450, 535, RegionLabel.FIGURE)], H)
    assert [b.type for b in blocks] == ["figure"]


def test_what_the_model_calls_a_table_is_text_when_its_cells_are_sentences_or_list_items():
    # an exam's two columns of questions inside one region the model drew around the page's body
    left = [line(72, 100 + 14 * i, 290, f"{i + 1}. Show that the function of question {i} is continuous") for i in range(5)]
    right = [line(322, 100 + 14 * i, 540, f"{i + 6}. Find the limit asked in question {i + 6} of the paper") for i in range(5)]
    blocks, _ = to_blocks(left + right, W, [region(70, 98, 542, 172, RegionLabel.TABLE)], H)
    assert "table" not in [b.type for b in blocks]
    text = " ".join(b.text for b in blocks)
    assert text.index("question 4 is") < text.index("question 6 of")
    # a column of names beside a column of descriptions is a table
    names = [line(72, 300 + 14 * i, 150, f"fn{i}()") for i in range(4)]
    said = [line(200, 300 + 14 * i, 540, f"returns the fitted values of the model number {i} as a vector") for i in range(4)]
    blocks, _ = to_blocks(names + said, W, [region(70, 298, 542, 358, RegionLabel.TABLE)], H)
    assert [b.type for b in blocks] == ["table"]
