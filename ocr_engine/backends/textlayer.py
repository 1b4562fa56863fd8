"""The ``textlayer`` backend: a born-digital page's own text, as Markdown with blocks.

Headings are told apart from body text by font size relative to the page's body size;
tables drawn with rules become table blocks (``ocr_engine.api.tables``). Page numbers and
running headers stay in the page's result: the document reader (``kb.reading``) sets
aside what repeats across pages, which one page alone cannot tell.
Boxes are in the displayed page's points (its /Rotate applied), as OCR'd pages' are.
"""

from __future__ import annotations

import statistics
import time
from typing import NamedTuple

import pymupdf

from ocr_engine.backends.interface import Backend, Call
from ocr_engine.api.names import BackendName
from ocr_engine.api.pages import Block, PageResult, PageStatus, block_markdown, count_chars
from ocr_engine.api.tables import page_tables

NAME = BackendName.TEXTLAYER.value


def _is_cjk(ch: str) -> bool:
    return "\u3000" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff"


def _join_lines(lines: list[str]) -> str:
    out = ""
    for line in (ln.strip() for ln in lines):
        if not line:
            continue
        if not out:
            out = line
        elif out.endswith("-") and line[:1].islower():
            out = out[:-1] + line  # a word hyphenated across lines
        elif _is_cjk(out[-1]) or _is_cjk(line[0]):
            out += line
        else:
            out += " " + line
    return out


class _Text(NamedTuple):
    """A block of the text layer's lines, as the page is read."""

    bbox: tuple[float, float, float, float]
    text: str
    size: float  # the largest type in it
    most: float  # the size that half its characters reach at least


def _most_set_in(sizes: list[float]) -> float:
    """The size of type half the characters are set in or larger: a heading's, where a line
    of text with a few words set large is not one ("He likes {\\LARGE large and {\\small small}
    letters}", lshort-zh-cn p.73, was the title of every chunk after it). Not more than half:
    maint-guide sets "package" in "5.4 package.cron.*" at 9 pt, the rest at 14.3."""
    return statistics.median_high(sizes) if sizes else 0.0


def _merge_paragraph_lines(raw: list[_Text], body: float) -> list[_Text]:
    """Rejoin lines of one paragraph that MuPDF returned as separate blocks.

    Two blocks belong together when they share a font size and left edge and the gap
    between them is smaller than a fraction of a line: paragraph breaks are wider.
    """
    merged: list[_Text] = []
    for t in raw:
        if merged:
            p = merged[-1]
            gap = t.bbox[1] - p.bbox[3]
            beside = abs(t.bbox[0] - p.bbox[0]) < body * 2
            if body and abs(t.size - p.size) < 0.5 and -1 <= gap < body * 0.6 and beside:
                box = (min(p.bbox[0], t.bbox[0]), p.bbox[1], max(p.bbox[2], t.bbox[2]), t.bbox[3])
                merged[-1] = _Text(box, _join_lines([p.text, t.text]), t.size, min(p.most, t.most))
                continue
        merged.append(t)
    return merged


def _heading_level(text: str, size: float, body: float) -> int | None:
    """A block's heading level by the size of its type (``_Text.most``) against the page's
    body size, or None for text: larger by a quarter, a heading; by 60 %, a title or a chapter.

    (LaTeX's subsections, \\large bold, 12 pt on 10, are not headings by this rule. Taking bold
    type larger by a tenth for a level below was measured and not kept: sections that are
    outline headings went from 87.0 % to 91.2 % of the born-digital chunks' and born-digital
    table cells from 0.92 to 0.96, but the tuning set's English questions from 0.96 to 0.92,
    dense alone from 1.0 to 0.92: docs/benchmarks/structure.md.)"""
    if not body or len(text) > 200 or size < body * 1.25:
        return None
    return 1 if size >= body * 1.6 else 2


def column_halves(raw, width: float):
    """The blocks ((bbox, text, ...) each) wholly in the left and in the right half of a page
    set in two columns, or None for any other page. A page counts as two columns when each
    half holds three blocks or more, two of them real paragraphs (40 characters), so short
    lines beside each other (a key and its description, code) keep their order."""
    middle, slack = width / 2, 0.04 * width
    left = [r for r in raw if r[0][2] <= middle + slack]
    right = [r for r in raw if r[0][0] >= middle - slack and r[0][2] > middle + slack]
    if min(len(left), len(right)) < 3 or min(sum(len(r[1]) >= 40 for r in side) for side in (left, right)) < 2:
        return None
    return left, right


def _columns_first(raw, width: float):
    """Blocks of a two-column page (``column_halves``) in reading order: between blocks that
    span the page, the left column top to bottom, then the right one. MuPDF's sorted order goes
    by height across both columns, so a paragraph's end in one column would be read after the
    next column's start (the TUGboat and R News papers of the corpus)."""
    halves = column_halves(raw, width)
    if halves is None:
        return raw
    left, right = halves
    ordered, band = [], []
    for r in sorted(raw, key=lambda r: r[0][1]):
        if r in left or r in right:
            band.append(r)
            continue
        ordered += [b for b in band if b in left] + [b for b in band if b in right] + [r]  # a spanning block
        band = []
    return ordered + [b for b in band if b in left] + [b for b in band if b in right]


def _inside(bbox, table: Block) -> bool:
    cx, cy = (bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2
    x0, y0, x1, y1 = table.bbox
    return x0 <= cx <= x1 and y0 <= cy <= y1


def _displayed(block: Block, m: pymupdf.Matrix) -> Block:
    """``block`` with its boxes moved from MuPDF's unrotated page space to the displayed page."""
    if m.b or m.c:  # a quarter turn: the grid's columns would become rows
        block.col_x = block.row_y = None
    elif block.col_x and block.row_y:
        block.col_x = sorted(round(m.a * x + m.e, 2) for x in block.col_x)
        block.row_y = sorted(round(m.d * y + m.f, 2) for y in block.row_y)
    block.bbox = tuple(round(v, 2) for v in pymupdf.Rect(block.bbox) * m)  # type: ignore[assignment]
    return block


def _line_size(line) -> float:
    return max((span["size"] for span in line["spans"] if span["text"].strip()), default=0.0)


def _set_apart(lines, page_height: float):
    """A MuPDF block's lines, as (bbox, lines) groups: at the top or foot of the page, a line
    in a smaller type set beside the previous one, a wide gap away, starts a group of its own.
    (A full slide's footer, "Debian Packaging Tutorial 47 / 89", shared a block with the last
    bullet, and so a chunk. Elsewhere such lines are a formula's or a table's: left alone.)"""
    groups: list[list] = []
    for line in lines:
        if groups:
            prev = groups[-1][-1]
            (_, py0, px1, py1), (x0, y0, _, y1) = prev["bbox"], line["bbox"]
            middle = (y0 + y1) / 2 / page_height
            beside = min(py1, y1) - max(py0, y0) > 0 and x0 - px1 > 2 * (py1 - py0)
            if not (beside and _line_size(line) < 0.8 * _line_size(prev) and not 0.1 < middle < 0.9):
                groups[-1].append(line)
                continue
        groups.append([line])
    return [((min(ln["bbox"][0] for ln in g), min(ln["bbox"][1] for ln in g),
              max(ln["bbox"][2] for ln in g), max(ln["bbox"][3] for ln in g)), g) for g in groups]


def extract_page(page: pymupdf.Page) -> PageResult:
    started = time.perf_counter()
    data = page.get_text("dict", sort=True, flags=pymupdf.TEXTFLAGS_TEXT)
    tables = page_tables(page)
    raw: list[_Text] = []
    sizes: list[float] = []
    for b in data["blocks"]:
        if b.get("type") != 0:
            continue
        # A table's words are in its cells. Lines, not whole blocks, are left out: MuPDF can put
        # a caption under a table's last rule in the block of its last rows (chfls1 p.8 lost
        # "Table 4: ..." and "Table 5: ..." that way).
        kept = [ln for ln in b["lines"] if not any(_inside(ln["bbox"], t) for t in tables)]
        if not kept:
            continue
        for bbox, lines in _set_apart(kept, page.rect.height):
            texts, block_size, chars = [], 0.0, []
            for line in lines:
                texts.append("".join(span["text"] for span in line["spans"]))
                for span in line["spans"]:
                    if span["text"].strip():
                        chars.extend([span["size"]] * len(span["text"].strip()))
                        block_size = max(block_size, span["size"])
            sizes.extend(chars)
            text = _join_lines(texts)
            if text:
                raw.append(_Text(tuple(round(v, 2) for v in bbox), text, block_size, _most_set_in(chars)))
    body = statistics.median(sizes) if sizes else 0.0
    raw = _merge_paragraph_lines(_columns_first(raw, page.rect.width), body)
    blocks: list[Block] = []
    for bbox, text, _, most in raw:
        while tables and tables[0].bbox[1] <= bbox[1]:  # a table goes where it stands on the page
            blocks.append(tables.pop(0))
        level = _heading_level(text, most, body)
        if level is not None:
            blocks.append(Block("heading", bbox, text, level=level))
        else:
            blocks.append(Block("text", bbox, text))
    blocks.extend(tables)
    blocks = [_displayed(b, page.rotation_matrix) for b in blocks]
    markdown = "\n\n".join(block_markdown(b) for b in blocks)
    chars = count_chars(markdown)
    return PageResult(
        page=page.number + 1,
        markdown=markdown,
        blocks=blocks,
        backend=NAME,
        status=PageStatus.OK if chars else PageStatus.EMPTY,
        chars=chars,
        seconds=round(time.perf_counter() - started, 4),
        width=round(page.rect.width, 2),
        height=round(page.rect.height, 2),
    )


def extract_range(doc: pymupdf.Document, first: int, last: int) -> list[PageResult]:
    """Pages ``first``..``last`` (1-based, inclusive), one page loaded at a time."""
    return [extract_page(doc.load_page(n - 1)) for n in range(first, last + 1)]


class TextLayerBackend(Backend):
    """Reads pages one at a time under the engine's MuPDF lock; no model, no call limits."""

    name = NAME
    model_version = f"PyMuPDF {pymupdf.__version__}"
    weights_digest = None

    def parse(self, doc: pymupdf.Document, pages: list[int], call: Call) -> list[PageResult]:
        results = []
        for n in pages:
            call.check_cancel()
            results.append(extract_page(doc.load_page(n - 1)))
        return results
