"""The document reader on real pages: a PDF written here with a running header, page
numbers, a paragraph over a page break and a ruled table over a page break, read from its
text layer and, for the same rules on OCR'd pages, from an image-only copy through PP-OCR."""

from __future__ import annotations

import pymupdf
import pytest

from kb.chunking import ChunkKind, chunk_document
from kb.reading import PieceKind, read_document
from ocr_engine.backends.textlayer import extract_range
from tests.pdfs import GUIDE_HEADER, GUIDE_SPLIT, GUIDE_TABLE, guide_pdf, scanned_copy
from ocr_engine.api.pages import PageResult


def words(text: str) -> int:
    return len(text.split())


def textlayer_pages(data: bytes) -> list[dict]:
    with pymupdf.open(stream=data) as doc:
        return [r.as_dict() for r in extract_range(doc, 1, doc.page_count)]


def stored(pages: list[dict]) -> list[PageResult]:
    """Page results as a store holds them (``PageResult.as_dict()``, or older), read back."""
    return [PageResult.from_dict(p) for p in pages]


@pytest.fixture(scope="module")
def guide() -> list[dict]:
    return textlayer_pages(guide_pdf())


def overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_a_paragraph_over_a_page_break_is_one_chunk_located_on_both_pages(guide):
    chunks = chunk_document(read_document(stored(guide)), words, max_tokens=80)
    whole = " ".join(GUIDE_SPLIT)
    [chunk] = [c for c in chunks if whole in c.text]
    assert chunk.pages == [1, 2]
    with pymupdf.open(stream=guide_pdf()) as doc:
        for page_no, half in zip((1, 2), GUIDE_SPLIT):
            word = half.split()[-1 if page_no == 1 else 0].rstrip(".")
            where = doc[page_no - 1].search_for(word)
            assert where and any(b.page == page_no and overlaps(b.bbox, tuple(where[0])) for b in chunk.boxes), \
                (page_no, word, chunk.boxes)


def test_running_headers_and_page_numbers_stay_in_the_page_results_but_not_in_chunks(guide):
    reading = read_document(stored(guide))
    assert sorted((r.page, r.text) for r in reading.running) == sorted(
        [(n, GUIDE_HEADER) for n in (1, 2, 3)] + [(n, str(n)) for n in (1, 2, 3)])
    assert all(GUIDE_HEADER in p["markdown"] for p in guide)  # the stored reading keeps them
    chunks = chunk_document(reading, words, max_tokens=80)
    assert chunks and not any("Field Guide" in c.text for c in chunks)
    assert not any(c.text.strip().endswith(("1", "2")) for c in chunks if c.kind == ChunkKind.TEXT)


def test_a_table_continued_on_the_next_page_is_one_table_with_its_header_in_every_chunk(guide):
    reading = read_document(stored(guide))
    [table] = [p for p in reading.pieces if p.kind == PieceKind.TABLE]
    assert table.header.cells == GUIDE_TABLE[0]
    assert [r.cells for r in table.rows] == GUIDE_TABLE[1:]  # the repeated header is not a row
    assert table.pages == [2, 3]
    # a budget that fits two rows: three chunks, each led by the header row
    parts = [c for c in chunk_document(reading, words, max_tokens=26) if c.kind == ChunkKind.TABLE]
    assert len(parts) >= 2
    assert all(c.text.startswith("| code | meaning |\n| --- | --- |\n") for c in parts)
    assert sum(c.text.count("| E") for c in parts) == len(GUIDE_TABLE) - 1
    assert {p for c in parts for p in c.pages} == {2, 3} and all(c.tokens <= 26 for c in parts)


def test_a_closed_paragraph_at_the_foot_of_a_page_is_not_joined_to_the_next():
    data = guide_pdf()
    pages = textlayer_pages(data)
    # close the open paragraph of page 1: the reader must now keep pages apart
    for b in pages[0]["blocks"]:
        if b["text"].startswith(GUIDE_SPLIT[0][:20]):
            b["text"] += "."
    chunks = chunk_document(read_document(stored(pages)), words, max_tokens=80)
    assert all(c.pages in ([1], [2], [3], [2, 3]) for c in chunks), [c.pages for c in chunks]


def test_results_stored_before_page_sizes_and_heading_levels_read_the_same(guide):
    old = [{**p, "width": None, "height": None, "blocks": [{k: v for k, v in b.items() if k != "level"}
                                                          for b in p["blocks"]]} for p in guide]
    a, b = chunk_document(read_document(stored(guide)), words), chunk_document(read_document(stored(old)), words)
    assert [(c.text, c.pages, c.section) for c in a] == [(c.text, c.pages, c.section) for c in b]


def test_a_page_of_markdown_only_is_read_without_boxes():
    pages = [{"page": 1, "markdown": "## Setup\n\nMount the pump with its motor on a level", "blocks": []},
             {"page": 2, "markdown": "concrete foundation with four bolts.", "blocks": []}]
    [chunk] = chunk_document(read_document(stored(pages)), words)
    assert chunk.pages == [1, 2] and chunk.section == "Setup"
    assert chunk.text == "Mount the pump with its motor on a level concrete foundation with four bolts."
    assert all(b.bbox is None for b in chunk.boxes)


def block(text: str, bbox, kind: str = "text") -> dict:
    return {"type": kind, "bbox": list(bbox), "text": text}


def test_the_bottom_of_a_column_joins_the_top_of_the_next_column():
    left = block("The impeller must be balanced after every repair of the casing, because an", (50, 100, 290, 700))
    right = block("unbalanced impeller wears the seal out within weeks.", (310, 90, 550, 130))
    after = block("A new paragraph in the right column starts here and is complete.", (310, 140, 550, 200))
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": [left, right, after]}]
    reading = read_document(stored(pages))
    assert reading.joins == 1
    assert reading.pieces[0].text.endswith("because an unbalanced impeller wears the seal out within weeks.")
    assert len(reading.pieces) == 2


def test_a_footnote_between_the_two_halves_is_stepped_over():
    p1 = [block("Long paragraph text that fills the page with prose and goes on without an end, until the", (50, 80, 550, 700)),
          block("¹ A footnote at the foot of the page, which is complete.", (50, 720, 550, 735))]
    p2 = [block("pump stops and the valves close.", (50, 80, 550, 100))]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": p1},
             {"page": 2, "width": 600, "height": 800, "markdown": "", "blocks": p2}]
    reading = read_document(stored(pages))
    assert reading.pieces[0].text.endswith("until the pump stops and the valves close.")
    assert reading.pieces[0].pages == [1, 2] and reading.pieces[1].text.startswith("¹ A footnote")


def test_chinese_continues_chinese_but_code_does_not_continue_into_chinese():
    p1 = [block("数字化成果应当在异地机房每周备份一次，备份介质应当", (50, 80, 550, 700))]
    p2 = [block("定期检测并记录结果。", (50, 80, 550, 100))]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": p1},
             {"page": 2, "width": 600, "height": 800, "markdown": "", "blocks": p2}]
    assert read_document(stored(pages)).pieces[0].text == "数字化成果应当在异地机房每周备份一次，备份介质应当定期检测并记录结果。"
    p1 = [block("install -m644 gentoorc-example $(DESTDIR)/etc/gentoorc", (50, 80, 550, 700))]
    p2 = [block("你一定会注意到规则里在其他命令前有了一个命令。", (50, 80, 550, 100))]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": p1},
             {"page": 2, "width": 600, "height": 800, "markdown": "", "blocks": p2}]
    assert len(read_document(stored(pages)).pieces) == 2


def test_scanned_pages_are_read_by_the_same_rules():
    """The same guide as an image-only copy, read by PP-OCR: the running header and the page
    numbers are set aside and the paragraph over the break is one chunk on pages 1 and 2."""
    from ocr_engine.engine import OcrEngine

    scan = scanned_copy(guide_pdf(), dpi=150)
    pages = [r.as_dict() for r in OcrEngine().parse_pdf(scan, 1, 3, backend="ppocr")]
    reading = read_document(stored(pages))
    assert {r.page for r in reading.running if "Guide" in r.text} == {1, 2, 3}
    chunks = chunk_document(reading, words, max_tokens=80)
    [chunk] = [c for c in chunks if "certified" in c.text]
    assert chunk.pages == [1, 2] and "every three years" in chunk.text
    assert not any("Field Guide" in c.text for c in chunks)


def test_a_two_column_page_is_read_column_by_column_and_a_sentence_goes_on_into_the_next_column():
    """MuPDF sorts blocks by height across both columns; the text layer reads the left column
    first, and the reader joins the sentence the left column leaves open."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    left = ["Pumps of the Aquila series move clean water in plants and need little care.",
            "Check the strainer once a week and clean it when the pressure drop grows.",
            "Before the first start after any repair of the casing, the pump"]
    right = ["must be primed with water, or its seal runs dry and fails within minutes.",
             "Bearings are greased every 500 hours with lithium grease of one kind only.",
             "Write every service into the log that hangs beside the control cabinet."]
    for i, (a, b) in enumerate(zip(left, right)):
        assert page.insert_textbox(pymupdf.Rect(50, 80 + 120 * i, 285, 170 + 120 * i), a, fontsize=11) >= 0
        assert page.insert_textbox(pymupdf.Rect(310, 125 + 120 * i, 545, 215 + 120 * i), b, fontsize=11) >= 0
    pages = textlayer_pages(doc.tobytes())
    texts = [b["text"] for b in pages[0]["blocks"]]
    assert texts.index(left[2]) < texts.index(right[0]) and texts.index(left[1]) < texts.index(left[2])
    reading = read_document(stored(pages))
    assert reading.joins == 1
    assert any(p.text.endswith("after any repair of the casing, the pump " + right[0]) for p in reading.pieces)


def test_a_figure_at_the_top_of_the_next_page_is_stepped_over_labels_caption_and_all():
    p1 = [block("Each time a numerical minimization is carried out, the default method is used for the", (50, 600, 550, 780))]
    p2 = [block("CDF", (170, 120, 190, 140)), block("0.0 0.2 0.4 0.6 0.8 1.0", (190, 40, 210, 220)),
          block("data in log scale", (270, 250, 350, 270)),
          block("Figure 8: Comparison between the two fits of a lognormal distribution.", (50, 300, 550, 320)),
          block("\"BFGS\" method for distributions characterized by only one parameter.", (50, 340, 550, 380))]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": p1},
             {"page": 2, "width": 600, "height": 800, "markdown": "", "blocks": p2}]
    reading = read_document(stored(pages))
    assert reading.pieces[0].text.endswith("used for the \"BFGS\" method for distributions characterized by only one "
                                           "parameter.") is False  # a quote is not lower case: no join by itself
    p2[-1]["text"] = "the \"BFGS\" method for distributions characterized by only one parameter."
    reading = read_document(stored(pages))
    assert reading.pieces[0].text.endswith("is used for the the \"BFGS\" method for distributions characterized by "
                                           "only one parameter.")
    assert reading.pieces[0].pages == [1, 2] and [p.text for p in reading.pieces[1:]][0] == "CDF"


def test_an_unfinished_sentence_leads_into_the_list_on_the_next_page():
    p1 = [block("若你希望使用zhmCJK作为底层中文支持方式，那么你需要自行安装该宏包。我们建议你", (50, 600, 550, 780))]
    p2 = [block("1. 从CTAN 下载zhmCJK 宏包的TDS 安装包， 2. 按目录结构将文件复制到本地目录。", (70, 80, 550, 120))]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": p1},
             {"page": 2, "width": 600, "height": 800, "markdown": "", "blocks": p2}]
    assert read_document(stored(pages)).pieces[0].text.endswith("我们建议你1. 从CTAN 下载zhmCJK 宏包的TDS 安装包， 2. 按目录结构将文件复制到本地目录。")
    p1[0]["text"] = "The packages this guide uses are the following:"  # a colon closes: the list is its own
    assert len(read_document(stored(pages)).pieces) == 2


def test_a_line_alone_on_every_page_is_the_text_not_a_running_line():
    # Both shapes once set every page's only line aside and indexed nothing: a line numbered
    # by its page, and a line that comes back with the same words, digits aside.
    doc = pymupdf.open()
    for i in range(1, 6):
        page = doc.new_page(width=595, height=842)
        page.insert_textbox(pymupdf.Rect(60, 60, 535, 200),
                            f"Archive folio {i}. Register of shipments, batch {1000 + i}, checked by the clerk.",
                            fontsize=14, fontname="helv")
    numbered = doc.new_page(width=595, height=842)  # a last page whose line starts with its number
    numbered.insert_text((60, 80), "6 Register closed by the clerk at the end of the year.", fontsize=14)
    reading = read_document(stored(textlayer_pages(doc.tobytes())))
    doc.close()
    assert not reading.running
    assert [p.pages for p in reading.pieces] == [[n] for n in range(1, 7)]
    assert "folio 3." in reading.pieces[2].text


def test_a_skewed_scans_page_number_above_its_title_is_one_running_line_with_it():
    # The boxes PP-OCR gave maint-guide.zh-cn's scan (pages 8, 11, 16 of 6-17): where the
    # page number sits at the skewed line's high end it starts 7-10 points above the title.
    tops = {6: [(31, 47, "Debian新维护者手册"), (39, 50, "{n}/57")], 7: [(31, 42, "{n}/57"), (38, 56, "Debian新维护者手册")],
            8: [(34, 47, "Debian新维护者手册"), (40, 53, "{n}/57")], 9: [(29, 43, "{n}/57"), (39, 55, "Debian新维护者手册")],
            10: [(35, 50, "Debian新维护者手册"), (35, 47, "{n}/57")]}
    pages = []
    for n, top in tops.items():
        blocks = [{"type": "text", "bbox": [400 if "/" in t else 60, y0, 540 if "/" in t else 200, y1],
                   "text": t.format(n=n - 5)} for y0, y1, t in top]
        blocks.append({"type": "text", "bbox": [60, 90, 540, 300], "text": f"第{n}页的正文，讲软件包的维护方法。"})
        pages.append({"page": n, "width": 595.0, "height": 842.0, "blocks": blocks, "markdown": ""})
    reading = read_document(stored(pages))
    assert not [p.text for p in reading.pieces if "手册" in p.text or "/57" in p.text]
    assert len(reading.running) == 10


def test_a_slides_footer_that_mupdf_puts_in_the_last_bullets_block_is_still_set_aside():
    # packaging-tutorial.pdf p.47: a full slide's last bullet and its small footer ("Debian
    # Packaging Tutorial 47 / 89") came out of MuPDF as one block, and into a chunk.
    doc = pymupdf.open()
    topics = ["orphaned packages", "bug triage", "library transitions", "porting work"]
    people = ["the QA team", "the release team", "a sponsor", "the porters"]
    for n, (topic, who) in enumerate(zip(topics, people), 1):
        page = doc.new_page(width=362.8, height=272.1)
        page.insert_text((16, 30), f"Helping with {topic}", fontsize=12)
        page.insert_text((16, 256), f"When in doubt about {topic}, ask {who}", fontsize=9)
        page.insert_text((28, 268), f"or write to them about {topic} on IRC", fontsize=9)
        page.insert_text((277, 269.5), "Debian Packaging Tutorial", fontsize=4)
        page.insert_text((345, 269.5), f"{n} / 4", fontsize=4)
    pages = textlayer_pages(doc.tobytes())
    doc.close()
    assert all(any(b["text"].startswith("Debian Packaging Tutorial") for b in p["blocks"]) for p in pages)
    reading = read_document(stored(pages))
    assert not [p.text for p in reading.pieces if "Packaging Tutorial" in p.text]
    assert len(reading.running) == 4 and all("on IRC" in p.text for p in reading.pieces[1::2])


def test_a_chunk_holding_part_of_an_ocr_block_is_located_by_the_lines_it_holds_only():
    from ocr_engine.layout import Line, to_blocks

    # one OCR'd paragraph of 12 lines down the left column, and a short one on the right
    left = [Line((50, 100 + 14 * i, 280, 112 + 14 * i), f"Sentence {i} of the left column goes on here.", 0.9)
            for i in range(12)]
    right = [Line((320, 100 + 14 * i, 550, 112 + 14 * i), f"Right line {i} is short.", 0.9) for i in range(3)]
    blocks, markdown = to_blocks(left + right, 600)
    page = PageResult.from_dict(PageResult(page=1, markdown=markdown, blocks=blocks, backend="ppocr",
                                           status="ok", chars=len(markdown), width=600, height=800).as_dict())
    chunks = chunk_document(read_document([page]), words, max_tokens=40, overlap_sentences=0)
    first = next(c for c in chunks if "Sentence 0 " in c.text)
    last = next(c for c in chunks if "Sentence 11 " in c.text)
    assert first is not last
    [box] = first.boxes  # its lines, as one box: not the whole column, nor the right one
    held = [i for i in range(12) if f"Sentence {i} " in first.text]
    assert box.bbox[1] == 100 and box.bbox[3] == 112 + 14 * held[-1] and box.bbox[2] <= 280
    assert all(b.bbox[1] >= 100 + 14 * min(i for i in range(12) if f"Sentence {i} " in last.text) for b in last.boxes
               if b.bbox[0] < 300)


def table_block(rows, bbox) -> dict:
    text = "\n".join("| " + " | ".join(r) + " |" for r in rows)
    return {"type": "table", "bbox": list(bbox), "text": text, "rows": rows}


PUMPS = [["Model", "Flow", "Head"], ["P-100", "12 l/s", "30 m"], ["P-200", "20 l/s", "45 m"]]
VALVES = [["Valve", "Size", "Rating"], ["V-10", "DN50", "PN16"], ["V-20", "DN80", "PN25"]]


def test_each_table_gets_the_caption_beside_it_by_the_documents_habit():
    # captions below their tables, as chfls1 sets them: the caption between the two tables is
    # the first one's, though it also stands above the second
    blocks = [block("The pumps and the valves of the plant are listed below.", (50, 60, 550, 80)),
              table_block(PUMPS, (50, 90, 550, 150)),
              block("¹ Flow at the rated speed.", (50, 152, 550, 160)),
              block("Table 1: Pumps of the plant.", (50, 162, 550, 175)),
              table_block(VALVES, (50, 190, 550, 250)),
              block("Table 2. Valves of the plant.", (50, 255, 550, 268)),
              block("Table 1 shows that every pump has a head of 30 m or more.", (50, 300, 550, 320))]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": blocks}]
    tables = [p for p in read_document(stored(pages)).pieces if p.kind == PieceKind.TABLE]
    assert [t.caption for t in tables] == ["Table 1: Pumps of the plant.", "Table 2. Valves of the plant."]
    parts = [c for c in chunk_document(read_document(stored(pages)), words, max_tokens=60) if c.kind == ChunkKind.TABLE]
    assert [c.text.split("\n")[0] for c in parts] == ["Table 1: Pumps of the plant.", "Table 2. Valves of the plant."]
    # a sentence about a table is not its caption, and a caption is not taken across a heading
    blocks = [table_block(PUMPS, (50, 90, 550, 150)), block("Table 1 shows the pumps.", (50, 160, 550, 175)),
              {**block("Valves", (50, 180, 550, 195)), "type": "heading"}, block("Table 9: Valves.", (50, 200, 550, 215))]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": blocks}]
    [table] = [p for p in read_document(stored(pages)).pieces if p.kind == PieceKind.TABLE]
    assert table.caption is None


def test_a_table_slice_repeats_the_group_row_its_rows_fall_under():
    rows = [["", "Start", "Step 1"], ["By the paper:", "", ""], ["AIC", "1872.1", "407.6"], ["BIC", "1882.8", "412.9"],
            ["Correct:", "", ""], ["AIC", "3915.8", "3916.7"], ["BIC", "3947.8", "3943.4"]]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "",
              "blocks": [table_block(rows, (50, 90, 550, 250)), block("Table 1: Fit criteria.", (50, 255, 550, 268))]}]
    # a budget that cuts each group after its first row
    parts = [c for c in chunk_document(read_document(stored(pages)), words, max_tokens=34) if c.kind == ChunkKind.TABLE]
    assert len(parts) == 4
    for part in parts:  # every BIC row is read with the group it belongs to
        assert part.text.startswith("Table 1: Fit criteria.\n\n|  | Start | Step 1 |")
        if "3943.4" in part.text:
            assert "| Correct: |" in part.text and "| By the paper: |" not in part.text
        if "412.9" in part.text:
            assert "| By the paper: |" in part.text
    assert sum(p.text.count("| AIC |") for p in parts) == 2 and all(p.tokens <= 40 for p in parts)


def test_a_section_heading_numbered_as_its_page_is_not_a_running_line():
    # the Aquila sample manual starts page n with section n: "2 Installation" on page 2
    titles = ["Introduction and safety", "Installation", "Operation", "Maintenance schedule", "Troubleshooting"]
    pages = [{"page": n, "width": 600, "height": 800, "markdown": "", "blocks": [
        {**block(f"{n} {title}", (60, 60, 300, 81)), "type": "heading", "level": 2},
        block(f"The body text of the section on {title.lower()} goes here and is complete.", (60, 100, 520, 130)),
        block(str(n), (295, 760, 305, 770))]} for n, title in enumerate(titles, 1)]
    reading = read_document(stored(pages))
    assert sorted(r.text for r in reading.running) == ["1", "2", "3", "4", "5"]
    assert [p.text for p in reading.pieces if p.kind == PieceKind.HEADING] == [f"{n} {t}" for n, t in enumerate(titles, 1)]


def test_numbered_headings_starting_pages_that_end_alike_are_not_running_titles():
    # xtableGallery pp.16-18: "5.4 Suppress row/column names" and "5.5 Rotate row/column names",
    # in the body's type, each start a page and end alike; a running title with a section's
    # number ("2.5. Debian documents") comes back whole on the section's other pages
    tops = ["5.3 Number of digits", "5.4 Suppress row/column names", "Long tables", "5.5 Rotate row/column names",
            "5.6 Horizontal lines", "5.7 Align row/column names"]
    pages = [{"page": n, "width": 600, "height": 800, "markdown": "", "blocks": [
        block(top, (60, 60, 300, 72)),
        block(f"The body of page {n} sets a table in one of the gallery's styles and says so.", (60, 100, 520, 130)),
        block(str(n), (295, 760, 305, 770))]} for n, top in enumerate(tops, 1)]
    reading = read_document(stored(pages))
    assert sorted(r.text for r in reading.running) == [str(n) for n in range(1, 7)]
    for page in pages[::2]:
        page["blocks"][0]["text"] = "2.5. Debian documents"
    reading = read_document(stored(pages))
    assert "2.5. Debian documents" in {r.text for r in reading.running}


def test_a_line_ocr_found_tall_is_a_heading_only_when_it_reads_as_one():
    # fitdistrplus' scanned plots ("8:0", "-0.20"), a formula on the exam's scan ("(π)")
    def ocr_heading(text, y):
        return {**block(text, (60, y, 400, y + 14), "heading"), "lines": [[60, y, 400, y + 14, len(text)]]}

    tall = ["2.3 aov", "8:0", "-0.20", "(π)", "s"]
    pages = [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": [
        ocr_heading(text, 60 + 40 * i) for i, text in enumerate(tall)] + [
        {**block("1", (60, 300, 80, 340), "heading")}]}]  # the text layer's heading: its font size says so
    reading = read_document(stored(pages))
    assert [p.text for p in reading.pieces if p.kind == PieceKind.HEADING] == ["2.3 aov", "1"]


def test_a_caption_at_the_top_of_the_next_page_is_its_tables_not_the_end_of_an_open_sentence():
    # lshort-zh-cn p.39 ends "基本的列格式见表" (the "3.1。" after it in a block of its own);
    # p.40 starts with the float it points to: "表3.1: LATEX 表格列格式", then the table
    p1 = [block("tabular 环境使用⟨column-spec⟩参数指定表格的列数以及每列的格式。基本的列格式见表", (90, 720, 490, 740)),
          block("3.1。", (72, 742, 95, 752))]
    p2 = [block("表3.1: LATEX 表格列格式", (260, 86, 371, 98)),
          {**table_block([["列格式", "说明"], ["l/c/r", "单元格内容左对齐"], ["|", "绘制竖线"]], (190, 109, 441, 188)),
           "col_x": [190, 250, 441]},
          block("\\begin{tabular}{lcr|p{6em}} \\hline left & center & right", (115, 214, 242, 251))]
    pages = [{"page": 39, "width": 595, "height": 842, "markdown": "", "blocks": p1},
             {"page": 40, "width": 595, "height": 842, "markdown": "", "blocks": p2}]
    pieces = read_document(stored(pages)).pieces
    assert pieces[0].text.endswith("基本的列格式见表") and pieces[0].pages == [39]
    [table] = [p for p in pieces if p.kind == PieceKind.TABLE]
    assert table.caption == "表3.1: LATEX 表格列格式"


def test_the_parts_of_a_table_below_its_group_rows_are_rows_of_it_under_its_caption():
    # lshort-zh-cn p.76: Table 5.4 in three groups, each under a row set across the table; the
    # text finder ends a table at the rules round such a row
    def part(rows, top, middle):
        return {**table_block(rows, (128, top, 503, top + 15 * len(rows))), "col_x": [128, middle, 503]}

    blocks = [block("表5.4: 常见的LATEX 字体宏包", (248, 195, 383, 207)), block("文本/数学字体搭配的宏包", (264, 220, 368, 230)),
              part([["lmodern", "Latin Modern 字体"], ["cmbright", "仿Computer Modern 风格的无衬线字体"]], 233, 222),
              block("文本字体宏包", (289, 449, 343, 458)),
              block("以下字体包括传统的LATEX 字体格式以及TrueType / OpenType 格式。", (134, 465, 388, 475)),
              part([["cm-unicode", "Computer Modern 风格的Unicode 字体"], ["inconsolata", "Inconsolata 开源等宽字体"]], 476, 207),
              block("符号宏包", (298, 592, 334, 602)),
              part([["mathabx", "数学符号宏包之一"], ["pifont", "Zapf Dingbats 符号宏包"]], 605, 201),
              block("表5.5: 另一张表", (248, 680, 383, 690)),
              {**table_block([["a", "b"], ["c", "d"]], (128, 700, 300, 740)), "col_x": [128, 200, 300]}]
    pages = [{"page": 76, "width": 595, "height": 842, "markdown": "", "blocks": blocks}]
    pieces = read_document(stored(pages)).pieces
    tables = [p for p in pieces if p.kind == PieceKind.TABLE]
    assert [t.caption for t in tables] == ["表5.4: 常见的LATEX 字体宏包", "表5.5: 另一张表"]
    assert [r.cells for r in tables[0].rows] == [
        ["cmbright", "仿Computer Modern 风格的无衬线字体"], ["文本字体宏包", ""],
        ["以下字体包括传统的LATEX 字体格式以及TrueType / OpenType 格式。", ""],
        ["cm-unicode", "Computer Modern 风格的Unicode 字体"], ["inconsolata", "Inconsolata 开源等宽字体"],
        ["符号宏包", ""], ["mathabx", "数学符号宏包之一"], ["pifont", "Zapf Dingbats 符号宏包"]]
    assert not any(p.kind == PieceKind.TEXT and p.text in ("文本字体宏包", "符号宏包") for p in pieces)
    assert {b.page for b in tables[0].boxes} == {76} and tables[0].rows[1].box.bbox == (289, 449, 343, 458)
    # a table of other edges, after a caption-less table, is not its part
    blocks[-2] = block("这张表没有标题。", (248, 680, 383, 690))
    tables = [p for p in read_document(stored(pages)).pieces if p.kind == PieceKind.TABLE]
    assert tables[-1].caption is None


def test_a_table_after_one_of_its_shape_that_repeats_its_header_is_a_table_of_its_own():
    # xtableGallery p.15: one data frame printed three times, with the code between them
    def table(top, header):
        rows = [header, ["1", "6", "M"], ["2", "7", "M"]]
        return {**table_block(rows, (100, top, 400, top + 45)), "col_x": [100, 200, 300, 400]}

    blocks = [table(100, ["", "grade", "sex"]), block("digits(tli.table) <- 3", (100, 160, 250, 170)),
              table(180, ["", "grade.", "sex"])]  # OCR read its header a little differently
    pages = [{"page": 15, "width": 595, "height": 842, "markdown": "", "blocks": blocks}]
    pieces = read_document(stored(pages)).pieces
    assert [p.kind for p in pieces] == [PieceKind.TABLE, PieceKind.TEXT, PieceKind.TABLE]


def test_an_ocr_tables_parts_whose_edges_are_their_cells_text_are_joined_when_their_columns_stand_over_one_another():
    # chfls1's scan p.8, Table 4: an OCR table's edges are its cells' text, and under a group
    # row the names are indented and the values narrower than the header ("Adjusted p-value"
    # over "1.000"): the outer edges of its parts differ by 5 % of its width
    def part(rows, top, col_x):
        return {**table_block(rows, (col_x[0], top, col_x[-1], top + 14 * len(rows))), "col_x": col_x}

    blocks = [part([["Variable", "Estimate", "Adjusted p-value"], ["Age", "-0.37", "0.092"]], 100, [132, 294, 381, 466]),
              block("Education", (132, 130, 190, 142)),
              part([["University (reference category)", "NA", ""], ["Primary", "-0.98", "0.078"]], 145, [150, 321, 390, 442]),
              block("Health", (132, 175, 175, 187)),
              part([["Poor (reference category)", "NA", ""], ["Good", "1.70", "0.091"]], 190, [152, 311, 390, 443]),
              block("Table 4: Parameter estimates of the saturated cumulative logit model.", (132, 220, 466, 232)),
              part([["Compared levels of education", "Estimated log odds ratio", "Adjusted p-value"],
                    ["University - Junior college", "-0.11", "0.999"]], 240, [125, 273, 403, 497]),
              # columns that do not stand over the first table's: another table after the caption-less one
              block("Region", (132, 275, 175, 287)),
              part([["North", "0.20", "0.989"], ["South", "0.59", "0.015"]], 290, [300, 340, 380, 520])]
    pages = [{"page": 8, "width": 595, "height": 842, "markdown": "", "blocks": blocks}]
    tables = [p for p in read_document(stored(pages)).pieces if p.kind == PieceKind.TABLE]
    assert tables[0].header.cells == ["Variable", "Estimate", "Adjusted p-value"]
    assert [r.cells[0] for r in tables[0].rows] == ["Age", "Education", "University (reference category)", "Primary",
                                                    "Health", "Poor (reference category)", "Good"]
    assert tables[0].caption == "Table 4: Parameter estimates of the saturated cumulative logit model."
    assert [t.header.cells[0] for t in tables[1:]] == ["Compared levels of education", "North"]


def test_an_ocr_documents_first_heading_on_its_first_page_is_its_title_and_heads_every_section():
    # xtableGallery's scan: its title stands 1.5 times over the page's median line, as its
    # section headings do, so OCR gives it no level of its own
    def ocr(kind, text, y, level=None):
        return {**block(text, (60, y, 400, y + 14), kind), "lines": [[60, y, 400, y + 14, len(text)]],
                **({"level": level} if level else {})}

    def pages(first):
        return [{"page": 1, "width": 600, "height": 800, "markdown": "", "blocks": [
                    first, ocr("text", "This document gives a gallery of tables made with the package.", 100)]},
                {"page": 2, "width": 600, "height": 800, "markdown": "", "blocks": [
                    ocr("heading", "2 Gallery", 30, level=2), ocr("heading", "2.5 glm", 60, level=3),
                    ocr("text", "A logistic regression of disadvg on ethnicity and grade.", 100)]}]

    chunks = chunk_document(read_document(stored(pages(ocr("heading", "The xtable Gallery", 60)))), words)
    assert [c.section for c in chunks] == ["The xtable Gallery", "The xtable Gallery / 2 Gallery / 2.5 glm"]
    # the text layer's headings keep the levels their font sizes give them
    text_layer = {**block("The xtable Gallery", (60, 60, 400, 74), "heading"), "level": 2}
    assert read_document(stored(pages(text_layer))).pieces[0].level == 2


def test_a_header_and_a_footer_the_layout_model_saw_are_set_aside_on_a_page_of_their_own():
    """A layout model's ``header``/``footer`` blocks (``ocr_engine.layout``) are running lines even
    where they come back on no other page: a first page's "Preprint submitted to ..."."""
    from ocr_engine.api.pages import Block

    page = PageResult(page=1, markdown="", backend="ppocr", width=612.0, height=792.0, blocks=[
        Block("header", (72, 40, 300, 52), "Journal of Examples 12 (2026)"),
        Block("text", (72, 100, 540, 160), "The body of the page, read as the one paragraph it is."),
        Block("footer", (72, 750, 400, 762), "Preprint submitted to Elsevier, 1 December 2026"),
    ])
    reading = read_document([page])
    assert [p.text for p in reading.pieces] == ["The body of the page, read as the one paragraph it is."]
    assert sorted(r.text for r in reading.running) == ["Journal of Examples 12 (2026)",
                                                        "Preprint submitted to Elsevier, 1 December 2026"]


def test_a_caption_the_layout_model_saw_captions_the_table_beside_it_unless_it_names_a_figure():
    """IEEE's "TABLE I" has no number the caption rule knows; the OCR layout model's ``caption``
    block says what it is. A figure's caption beside a table is not the table's."""
    from ocr_engine.api.pages import Block

    rows = [["Margin", "A4 paper"], ["Top", "19 mm"], ["Bottom", "37 mm"]]

    def page(caption: str) -> PageResult:
        return PageResult(page=1, markdown="", backend="ppocr", width=612.0, height=792.0, blocks=[
            Block("caption", (200, 100, 420, 112), caption),
            Block("table", (150, 120, 460, 170), "| Margin | A4 paper |", rows=rows, col_x=[150, 300, 460]),
            Block("text", (72, 200, 540, 240), "A paragraph under the table, long enough to be a paragraph of text."),
        ])

    table = next(p for p in read_document([page("TABLE I MARGIN SPECIFICATIONS")]).pieces if p.kind == PieceKind.TABLE)
    assert table.caption == "TABLE I MARGIN SPECIFICATIONS"
    table = next(p for p in read_document([page("Figure 2: the layout of a page")]).pieces if p.kind == PieceKind.TABLE)
    assert table.caption is None
