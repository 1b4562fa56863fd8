from ocr_engine.layout import Line, to_blocks

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
