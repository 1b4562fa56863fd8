"""Reading a document: its pages' results, in page order, as one text located on its pages.

Index reads a document here after extract and before chunking, across the results of all
its page ranges. Only blocks are read (type, box, text; a table's rows and grid) and each
page's size, so text-layer pages and OCR'd pages are read by the same rules:

- **Running headers and footers.** A short block near the top or the bottom of pages that
  comes back, with its digits masked, at the same height on several pages (a running
  title, "Debian Reference 25 / 233"), or a bare page number there, is set aside: it is
  left out of the pieces, and kept in the stored page results.
- **Continuity.** A paragraph or list item that ends a page (or a column) without closing
  its sentence is joined with its continuation at the top of the next page (or column).
  Footnotes or figure labels that sit between the two halves are stepped over, and then
  only a continuation that starts in lower case (or Chinese after unfinished Chinese) is
  taken. A table that continues on the next page with the same columns is one table, and
  a header row the next page repeats is dropped. So is a table cut at its group rows (a
  row set across it, "Correct calculations:"): its parts below them are rows of it again,
  each group row a row of its own.
- **Location.** Every piece keeps spans of its text, each with its page and box in PDF
  points of the displayed page, so a chunk cut from it knows every page it spans and where.

Old stored page results (no page size, no heading levels) are read too: the page's frame is
then the extent of the document's blocks, and heading levels come from the Markdown.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Iterable, Sequence

from ocr_engine.api.text import is_cjk as _cjk
from ocr_engine.api.pages import PageResult
from ocr_engine.api.tables import parse_table_text, table_markdown

BBox = tuple[float, float, float, float]


class PieceKind(StrEnum):
    HEADING = "heading"
    TEXT = "text"
    TABLE = "table"


@dataclass(frozen=True)
class Box:
    """Where a stretch of text is: a page (1-based) and a box on it (None: somewhere on it)."""

    page: int
    bbox: BBox | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"page": self.page, "bbox": [round(v, 1) for v in self.bbox] if self.bbox else None}


@dataclass
class Span:
    """Characters ``start``..``end`` of a piece's text, and where they are."""

    start: int
    end: int
    box: Box


@dataclass
class Row:
    cells: list[str]
    box: Box


@dataclass
class Piece:
    """A heading, a paragraph (or list item) or a table, as the document has it."""

    kind: PieceKind
    text: str = ""
    spans: list[Span] = field(default_factory=list)
    level: int = 2  # a heading's: 1 the document's title, 2 a section, 3 below
    header: Row | None = None  # a table's header row
    rows: list[Row] = field(default_factory=list)  # a table's other rows
    col_x: list[float] | None = None  # a table's column boundaries, where known
    caption: str | None = None  # a table's caption ("Table 1: ..."), where one stands beside it
    captioned: bool = False  # a text piece the OCR layout model saw as a caption (block type ``caption``)

    @property
    def boxes(self) -> list[Box]:
        if self.kind == PieceKind.TABLE:
            return [r.box for r in ([self.header] if self.header else []) + self.rows]
        return [s.box for s in self.spans]

    @property
    def pages(self) -> list[int]:
        return sorted({b.page for b in self.boxes})

    @property
    def first_page(self) -> int:
        return min(self.pages)

    @property
    def last_page(self) -> int:
        return max(self.pages)

    def markdown(self) -> str:
        if self.kind == PieceKind.TABLE:
            return table_markdown([r.cells for r in ([self.header] if self.header else []) + self.rows])
        return self.text

    def boxes_between(self, start: int, end: int) -> list[Box]:
        """The boxes of the spans that hold any of characters ``start``..``end``."""
        return [s.box for s in self.spans if s.start < end and start < s.end] or self.boxes[:1]


@dataclass(frozen=True)
class RunningLine:
    page: int
    bbox: BBox
    text: str


@dataclass
class Reading:
    pieces: list[Piece]
    running: list[RunningLine]  # what was set aside as running headers and footers
    joins: int = 0  # paragraphs and tables joined over a page or column break


# --- blocks as the reader sees them -------------------------------------------------------

@dataclass
class _Block:
    type: str
    bbox: BBox | None
    text: str
    level: int | None = None
    rows: list[list[str]] | None = None
    col_x: list[float] | None = None
    row_y: list[float] | None = None
    lines: list[list[float]] | None = None  # an OCR'd block's line boxes (``Block.lines``)

    @property
    def is_table(self) -> bool:
        return self.type == "table" and bool(self.rows) and len(self.rows) >= 2

    @property
    def is_heading(self) -> bool:
        # OCR takes a line for a heading by its height alone (``ocr_engine.layout``): a plot's
        # axis numbers ("8:0", "-0.20") or a formula set larger are not headings.
        return self.type in _HEADINGS and (self.lines is None or _heading_like(self.text))


def _heading_like(text: str) -> bool:
    """Words, mostly letters: what a heading OCR found by its height must read as. (A sentence
    set larger stays a heading: taking those for text too moved one scanned table-cell
    question of the eval out of the top 5, among four near-identical tables of one page.)"""
    chars = [c for c in text if not c.isspace()]
    letters = sum(1 for c in chars if c.isalpha())  # CJK characters are letters to isalpha
    return letters >= 3 and 2 * letters >= len(chars)


# Unlimited OCR's region types, PP-OCR's and the text layer's; what none of them is text
_HEADINGS = {"heading": None, "title": 2, "sub_title": 3}
_SKIPPED = {"image", "figure", "seal"}
_RUNNING = {"header", "footer"}
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


@dataclass
class _Page:
    number: int
    blocks: list[_Block]
    width: float
    height: float


def _blocks_of(page: PageResult) -> list[_Block]:
    levels = {m.group(2).strip(): len(m.group(1)) for m in
              (_MD_HEADING.match(p.strip()) for p in page.markdown.split("\n\n")) if m}
    out = []
    for b in page.blocks:
        text = (b.text or "").strip()
        kind = b.type or "text"
        if not text or kind in _SKIPPED:
            continue
        rows = b.rows
        if kind == "table" and not rows:
            rows = parse_table_text(text) or None
        level = b.level or _HEADINGS.get(kind) or levels.get(text)
        out.append(_Block(kind, b.bbox or None, text, level, rows, b.col_x, b.row_y, b.lines))
    if out or not page.markdown.strip():
        return out
    # a result with text and no blocks: its Markdown paragraphs, somewhere on the page
    for para in (p.strip() for p in page.markdown.split("\n\n")):
        m = _MD_HEADING.match(para)
        if m:
            out.append(_Block("heading", None, m.group(2).strip(), len(m.group(1))))
        elif para:
            rows = parse_table_text(para)
            out.append(_Block("table", None, para, rows=rows) if rows else _Block("text", None, para))
    return out


def _pages(results: Iterable[PageResult]) -> list[_Page]:
    raw = [(p.page, _blocks_of(p), p.width, p.height) for p in results]
    # Without a stored page size, the document's blocks mark out its pages.
    boxes = [b.bbox for _, blocks, _, _ in raw for b in blocks if b.bbox]
    width = max((b[2] for b in boxes), default=1.0)
    height = max((b[3] for b in boxes), default=1.0)
    return [_Page(n, blocks, w or width, h or height) for n, blocks, w, h in sorted(raw, key=lambda r: r[0])]


# --- running headers and footers ------------------------------------------------------

_PAGE_NUMBER = re.compile(r"^\s*(page\s*)?[-–—]?\s*(\d{1,4}|[ivxlc]{1,7})\s*[-–—]?(\s*(/|of)\s*\d{1,4})?\s*$", re.IGNORECASE)
_BAND = 0.15  # the top and bottom share of a page where running lines sit
_SAME_HEIGHT = 0.025  # of the page's height: a skewed scan moves a line ~1 % at its ends
# a number at either end of a line, or before "/ 233" or "of 233" at its end
# (Chinese text has no word boundary before a number: "§1.4 LATEX 宏包和文档类5".)
_EDGE_NUMBER = re.compile(r"^\s*(\d{1,4})(?!\d)|(?<!\d)(\d{1,4})(?:\s*(?:/|of)\s*\d{1,4})?\s*$", re.IGNORECASE)
_ONE_LINE = 0.03  # of the page's height: a block no taller is one line
_HEIGHT_STEP = 0.004  # of the page's height: lines this close start at the same height
_FURNITURE = 0.3  # the share of pages whose first or last line starts at one height: a running line's height
_SAME_TEXT = 85  # rapidfuzz ratio of the masked texts: OCR reads one header a little differently each time


def _mask(text: str) -> str:
    """What stays the same of a running line from page to page: letters, and digits as '#'."""
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"\d+", "#", "".join(c for c in text if c.isalnum()))


_SECTION_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)+\.?\s+\S")  # "5.4 Suppress ...", "2.5. DEBIAN 文档"
_ENDS = 8  # masked characters at either end that two running titles of one height share


def _same_line(a: BBox, b: BBox, page_height: float) -> bool:
    """Two boxes on one line: their middles closer than half the taller one (a scan skewed by
    1.5 degrees puts a footer's ends 9 points apart), or than 1 % of the page, or a quarter of
    the shorter one's height shared (on a skewed scan a header's page number at the high end
    sat 10 points above its title: maint-guide's scan, pages 8, 11 and 16)."""
    gap = abs((a[1] + a[3]) - (b[1] + b[3])) / 2
    shared = min(a[3], b[3]) - max(a[1], b[1])
    return (gap <= max(0.01 * page_height, 0.5 * max(a[3] - a[1], b[3] - b[1]))
            or shared >= 0.25 * min(a[3] - a[1], b[3] - b[1]))


def _outermost(page: _Page) -> list[tuple[int, str, float]]:
    """(block index, band, height of its middle as a share of the page) of the blocks that
    could be running lines: the top and the bottom located block, and a block on the same
    line as either (a page number set apart from its title)."""
    located = sorted((i for i, b in enumerate(page.blocks) if b.bbox), key=lambda i: page.blocks[i].bbox[1])
    out = []
    for band, ends in (("top", located[:3]), ("bottom", located[-3:][::-1])):
        for rank, i in enumerate(ends):
            b = page.blocks[i]
            if rank and not _same_line(b.bbox, page.blocks[ends[0]].bbox, page.height):  # type: ignore[arg-type]
                break  # the next block down (or up) is body text, not the same line
            middle = (b.bbox[1] + b.bbox[3]) / 2 / page.height  # type: ignore[index]
            if (middle < _BAND if band == "top" else middle > 1 - _BAND) and not b.is_table and len(b.text) <= 160:
                out.append((i, band, middle))
    return out


@dataclass(frozen=True)
class _Edge:
    """A block that could be a running line: the outermost at the top or bottom of a page."""

    page: int  # index into the document's pages
    block: int
    band: str
    middle: float  # its middle's height, as a share of the page's
    step: int  # where it starts, in steps of _HEIGHT_STEP of the page's height
    one_line: bool
    heading: bool
    text: str

    @property
    def key(self) -> tuple[int, int]:
        return self.page, self.block


def _edges(pages: list[_Page]) -> list[_Edge]:
    out = []
    for pi, page in enumerate(pages):
        for bi, band, middle in {c[0]: c for c in _outermost(page)}.values():
            b = page.blocks[bi]
            out.append(_Edge(pi, bi, band, middle, round(b.bbox[1] / page.height / _HEIGHT_STEP),  # type: ignore[index]
                             b.bbox[3] - b.bbox[1] <= _ONE_LINE * page.height, b.is_heading, b.text))  # type: ignore[index]
    return out


def _numbered(edges: list[_Edge], pages: list[_Page], least: int) -> set[tuple[int, int]]:
    """Lines whose number at one end is the page's number less one offset, at one height
    (footnotes numbered one a page go up with the page too, at other heights). Not headings:
    a manual with a section a page starts each page with "2 Installation" on page 2."""
    by_offset: dict[tuple[str, int], list[_Edge]] = {}
    for e in edges:
        if e.one_line and not e.heading and len(e.text) <= 100:
            for n in {int(m) for pair in _EDGE_NUMBER.findall(e.text) for m in pair if m}:
                by_offset.setdefault((e.band, pages[e.page].number - n), []).append(e)
    found = set()
    for members in by_offset.values():
        for step in {e.step for e in members}:
            same = [e for e in members if abs(e.step - step) <= 1]
            if len({e.page for e in same}) >= least:
                found.update(e.key for e in same)
    return found


def _at_running_height(edges: list[_Edge], pages: list[_Page], least: int) -> set[tuple[int, int]]:
    """A running title whose words change with the chapter or section ("CHAPTER 2. 预备知识2.5.
    DEBIAN 文档"): one line at the height where most pages have their first (or last) line,
    which begins or ends as the lines there on other pages do. (A page's body starts at one
    height too, with other words each time.)"""
    at: dict[tuple[str, int], list[_Edge]] = {}
    masks: dict[tuple[int, int], str] = {}
    for e in edges:
        if e.one_line and not e.heading:
            at.setdefault((e.band, e.step), []).append(e)
            masks[e.key] = _mask(e.text)
    found = set()
    for (band, step), members in at.items():
        near = [e for s in (step - 1, step, step + 1) for e in at.get((band, s), [])]
        if len({e.page for e in near}) < max(least, _FURNITURE * len(pages)):
            continue
        # The pages near this height by how their line begins and ends: one pass over the
        # lines, not one per pair (a 1,000-page document has about a thousand at one height).
        pages_by_end: dict[tuple[str, str], set[int]] = {}
        pages_by_text: dict[str, set[int]] = {}
        for o in near:
            m = masks[o.key]
            pages_by_text.setdefault(m, set()).add(o.page)
            if len(m) >= _ENDS:
                pages_by_end.setdefault(("begins", m[:_ENDS]), set()).add(o.page)
                pages_by_end.setdefault(("ends", m[-_ENDS:]), set()).add(o.page)
        for e in members:
            m = masks[e.key]
            if len(m) < _ENDS:
                continue
            begins = pages_by_end[("begins", m[:_ENDS])] - {e.page}
            ends = pages_by_end[("ends", m[-_ENDS:])] - {e.page}
            # A numbered section's heading starting its page, found once in the document,
            # may end like the headings starting other pages ("5.4 Suppress row/column names",
            # "5.5 Rotate row/column names": xtableGallery lost them); a running title with a
            # section's number comes back whole on the section's other pages.
            once = len(pages_by_text[m]) == 1 and _SECTION_NUMBER.match(e.text)
            alike = begins if once else begins | ends
            if len(alike) >= least - 1:
                found.add(e.key)
    return found


def _repeated(edges: list[_Edge], pages: list[_Page], least: int) -> set[tuple[int, int]]:
    """Lines that come back at the same height with the same words, digits masked."""
    from rapidfuzz import fuzz

    clusters: list[tuple[str, list[_Edge]]] = []  # (the first line's masked text, the lines)
    for e in edges:
        key = _mask(e.text)
        if len(key) < 2:
            continue
        for first_key, cluster in clusters:
            first = cluster[0]
            if (first.band == e.band and abs(first.middle - e.middle) <= _SAME_HEIGHT
                    and (first_key == key or fuzz.ratio(first_key, key) >= _SAME_TEXT)):
                cluster.append(e)
                break
        else:
            clusters.append((key, [e]))
    found = set()
    for _, cluster in clusters:
        # Text that comes back without a page number must come back often: a label at the
        # foot of a few pages ("Syntax:" on 9 of gnuplot's 311) is the body's; a heading
        # that repeats at the top (a slide's "Outline") is running on half the pages only.
        needed = max(least, len(pages) // 2) if all(e.heading for e in cluster) else max(least, len(pages) // 10)
        if len({e.page for e in cluster}) >= needed:
            found.update(e.key for e in cluster)
    return found


def _running(pages: list[_Page]) -> set[tuple[int, int]]:
    """(page index, block index) of every running header and footer: a bare page number, a
    line whose number goes up with the page's, a line at the running lines' height that
    begins or ends like the others there, a line that comes back with the same words."""
    edges = _edges(pages)
    least = 2 if len(pages) <= 4 else 3
    found = ({e.key for e in edges if _PAGE_NUMBER.match(e.text)} | _numbered(edges, pages, least)
             | _at_running_height(edges, pages, least) | _repeated(edges, pages, least))
    # Running lines frame a body. Where most of the pages that hold them hold nothing else
    # ("Archive folio 7. Register of shipments, batch 1006." alone on each scanned page),
    # the lines are the document's text, and setting them aside would leave it empty.
    holding = {pi for pi, _ in found}
    bare = [pi for pi in holding if all((pi, bi) in found for bi in range(len(pages[pi].blocks)))]
    if holding and 2 * len(bare) > len(holding):
        found -= {(pi, bi) for pi in bare for bi in range(len(pages[pi].blocks)) if not _PAGE_NUMBER.match(pages[pi].blocks[bi].text)}
    # What the OCR engine's layout model saw as a running header or footer, in the page's top or
    # bottom band (``ocr_engine.layout``), on one page as well as on many: a first page's footer
    # ("Preprint submitted to ...") comes back nowhere.
    return found | {(pi, bi) for pi, page in enumerate(pages) for bi, b in enumerate(page.blocks) if b.type in _RUNNING}


# --- continuity -------------------------------------------------------------------------

_CLOSES = set(".!?:;…。！？：；")
_NOTE_MARK = re.compile(r"(?<=[.!?。！？:;：；])[\d¹²³⁴⁵⁶⁷⁸⁹⁰]{1,2}$")  # "...之举。11": a footnote's mark
_TRAILERS = set("\"'”’)]}）」』》")
_LIST_ITEM = re.compile(r"^\s*([•◦▪‣∙·●○■□*–—-]|\(?\d{1,3}[.)]|\(?[a-zA-Z][.)]|\(?[ivx]{1,4}\))\s")
_SHORT = 40  # characters (``_size``): shorter text at a break is a label, a title, a footnote
_FOOTNOTE = re.compile(r"^\s*([∗*†‡§¶]|[¹²³⁴⁵⁶⁷⁸⁹⁰]+|\d{1,2}\s+[A-Z])")
_CAPTION = re.compile(r"^\s*(Figure|Fig\.|Table|Listing|图|表)\s*\d", re.IGNORECASE)
_LOOK = 4  # blocks stepped over at a break: footnotes below the paragraph, figure labels above its end
# A table's caption: "Table 3: ...", "Table 2. ...", "Table 4 Results ...", "表 2-1 ...". Not "Table 1
# shows ...", which is a sentence about the table, and only a paragraph short enough to be a caption.
_NUMBERED = r"\s*\d+(?:[.\-–]\d+)*(?:\s*[:：.．、]|\s+(?=[A-Z\u4e00-\u9fff])|\s*$)"  # " 3:", " 2-1 Results"
_TABLE_CAPTION = re.compile(r"^\s*(Table|Tab\.|表)" + _NUMBERED)
_FLOAT_CAPTION = re.compile(r"^\s*(Table|Tab\.|表|Figure|Fig\.|图)" + _NUMBERED)  # a table's or a figure's
_FIGURE_CAPTION = re.compile(r"^\s*(Figure|Fig\.|图)", re.IGNORECASE)
_CAPTION_CHARS = 300
_CAPTION_REACH = 2  # pieces: a caption may stand apart from its table by a line of notes


def _size(text: str) -> int:
    """Length in Latin characters: a Chinese character is as wide as two."""
    return sum(2 if _cjk(c) else 1 for c in text)


def _is_open(text: str) -> bool:
    """The text stops without closing its sentence."""
    text = _NOTE_MARK.sub("", text.rstrip())
    while text and text[-1] in _TRAILERS:
        text = text[:-1]
    return bool(text) and text[-1] not in _CLOSES


def _continues(before: str, after: str, strict: bool) -> bool:
    """``after`` carries on the sentence ``before`` left open. ``strict`` (blocks were stepped
    over to pair them): only a lower-case start, or Chinese after unfinished Chinese."""
    before, after = before.rstrip(), after.lstrip()
    if not before or not after or not _is_open(before):
        return False
    if _LIST_ITEM.match(after):  # a list that an unfinished sentence leads into ("我们建议你" / "1. 从CTAN")
        return not strict and (before[-1].islower() or _cjk(before[-1]) or before[-1] in ",，、")
    last, first = before[-1], after[0]
    if _cjk(last) or last in "，、":
        return _cjk(first)
    if _cjk(first):  # Chinese after Latin: only where the Latin sits inside Chinese text
        return any(_cjk(c) for c in before[-30:])
    if first.islower():
        return True
    if strict or _size(after) < _SHORT:  # a short line in capitals at the top: a title
        return False
    # "... described by the" / "R Core Team": an open sentence ends in a word or a comma (a
    # number at the end is a table of contents' page, or a listing's)
    return (last.islower() or last in ",-–(") and (first.isalnum() or first in "\"'“‘(")


def _joined(before: str, after: str) -> tuple[str, int]:
    """The two texts as one, and where ``after`` starts in it."""
    before, after = before.rstrip(), after.lstrip()
    if before.endswith("-") and after[:1].islower() and before[-2:-1].isalpha():
        text = before[:-1]  # a word hyphenated over the break
    elif _cjk(before[-1]) or _cjk(after[0]):
        text = before
    else:
        text = before + " "
    return text + after, len(text)


def _same_columns(a: Piece, b: _Block, width: float) -> bool:
    """``b`` continues table ``a``: as many columns, at the same places (3 % of the page's width)."""
    ncols = len(b.rows[0]) if b.rows else 0
    if ncols != len(a.header.cells if a.header else a.rows[0].cells):
        return False
    if a.col_x and b.col_x and len(a.col_x) == len(b.col_x):
        return all(abs(x - y) <= 0.03 * width for x, y in zip(a.col_x, b.col_x))
    ends = [r.box.bbox for r in a.rows + ([a.header] if a.header else []) if r.box.bbox]
    if ends and b.bbox:
        return abs(min(e[0] for e in ends) - b.bbox[0]) <= 0.03 * width and \
            abs(max(e[2] for e in ends) - b.bbox[2]) <= 0.03 * width
    return True


def _table(block: _Block, page: int) -> Piece:
    rows = block.rows or []
    boxes: list[Box] = []
    for i in range(len(rows)):
        if block.row_y and block.col_x and len(block.row_y) == len(rows) + 1:
            boxes.append(Box(page, (block.col_x[0], block.row_y[i], block.col_x[-1], block.row_y[i + 1])))
        else:
            boxes.append(Box(page, block.bbox))
    all_rows = [Row(list(r), b) for r, b in zip(rows, boxes)]
    return Piece(PieceKind.TABLE, header=all_rows[0], rows=all_rows[1:], col_x=block.col_x)


def _spans(block: _Block, page: int, at: int, end: int) -> list[Span]:
    """The block's text placed at ``at``..``end`` of a piece: a span per line where the block
    knows its lines (an OCR'd page), else one span with the block's box."""
    if not block.lines or block.bbox is None:
        return [Span(at, end, Box(page, block.bbox))]
    spans, start = [], at
    for *bbox, line_end in block.lines:
        stop = min(end, at + int(line_end))
        if stop > start:
            spans.append(Span(start, stop, Box(page, tuple(bbox))))  # type: ignore[arg-type]
        start = stop
    if spans:
        spans[-1].end = end  # what a join added or dropped at the end stays with the last line
        return spans
    return [Span(at, end, Box(page, block.bbox))]


def _piece(block: _Block, page: int) -> Piece:
    if block.is_table:
        return _table(block, page)
    if block.is_heading:
        return Piece(PieceKind.HEADING, block.text, [Span(0, len(block.text), Box(page, block.bbox))],
                     level=block.level or 2)
    return Piece(PieceKind.TEXT, block.text, _spans(block, page, 0, len(block.text)), captioned=block.type == "caption")


def _extend(piece: Piece, block: _Block, page: int) -> None:
    text, at = _joined(piece.text, block.text)
    piece.text = text
    piece.spans.extend(_spans(block, page, at, len(text)))


def _column_break(prev: _Block, block: _Block) -> bool:
    """``block`` starts a new column: above where ``prev`` started, and to its right."""
    if not prev.bbox or not block.bbox:
        return False
    return block.bbox[1] < prev.bbox[1] - 1 and block.bbox[0] >= prev.bbox[2] - 5


def read_document(results: Sequence[PageResult]) -> Reading:
    """``results``: the document's page results, failed pages left out."""
    pages = _pages(results)
    running = _running(pages)
    pieces: list[Piece] = []
    set_aside: list[RunningLine] = []
    joins = 0
    previous: _Page | None = None
    for pi, page in enumerate(pages):
        body = []
        for bi, b in enumerate(page.blocks):
            if (pi, bi) in running:
                set_aside.append(RunningLine(page.number, b.bbox, b.text))  # type: ignore[arg-type]
            else:
                body.append(b)
        if not body:
            continue
        start = len(pieces)  # the previous page's pieces end here
        consecutive = previous is not None and page.number == previous.number + 1
        taken = _join_over_page_break(pieces, body, page) if consecutive else None
        if taken is not None:
            joins += 1
        last_block: _Block | None = None
        for k, block in enumerate(body):
            if k == taken:
                continue
            if (last_block is not None and pieces and len(pieces) > start and pieces[-1].kind == PieceKind.TEXT
                    and block.type == "text" and _column_break(last_block, block)
                    and _continues(pieces[-1].text, block.text, strict=False)):
                _extend(pieces[-1], block, page.number)
                joins += 1
            else:
                pieces.append(_piece(block, page.number))
            last_block = block
        previous = page
    _rejoin_parts(pieces)
    _caption_tables(pieces)
    _title_of_a_scan(pieces, pages)
    return Reading(pieces, set_aside, joins)


def _title_of_a_scan(pieces: list[Piece], pages: list[_Page]) -> None:
    """An OCR'd document's first piece, a heading on its first page, is its title (level 1)
    where no heading is: OCR tells headings by their height alone, and on xtableGallery's scan
    the title stands 1.5 times over the page's median line, as its section headings do. The
    title heads every section's label ("The xtable Gallery / 2 Gallery / 2.5 glm"), as the text
    layer's title does."""
    if not pieces or pieces[0].kind != PieceKind.HEADING or pieces[0].first_page != pages[0].number:
        return
    if any(p.kind == PieceKind.HEADING and p.level <= 1 for p in pieces):
        return
    opening = next((b for b in pages[0].blocks if b.text == pieces[0].text), None)
    if opening is not None and opening.lines is not None:
        pieces[0].level = 1


def _is_caption_text(text: str, figures: bool = False) -> bool:
    pattern = _FLOAT_CAPTION if figures else _TABLE_CAPTION
    return len(text) <= _CAPTION_CHARS and bool(pattern.match(text))


def _is_caption(piece: Piece) -> bool:
    """A table's caption: "Table 3: ..." and the like, or what the OCR layout model saw as a
    caption ("TABLE I", a caption without a number), unless it reads as a figure's."""
    if piece.kind != PieceKind.TEXT:
        return False
    return _is_caption_text(piece.text) or (piece.captioned and len(piece.text) <= _CAPTION_CHARS
                                            and not _FIGURE_CAPTION.match(piece.text))


def _caption_beside(pieces: list[Piece], t: int, step: int) -> int | None:
    """The nearest caption on the table's page, above (``step`` -1) or below (+1) it, with no
    heading or other table between."""
    page = pieces[t].first_page if step < 0 else pieces[t].last_page
    for k in range(t + step, t + step * (_CAPTION_REACH + 1), step):
        if not 0 <= k < len(pieces) or pieces[k].kind != PieceKind.TEXT or page not in pieces[k].pages:
            return None
        if _is_caption(pieces[k]):
            return k
    return None


def _caption_tables(pieces: list[Piece]) -> None:
    """Give each table the caption beside it. Between two tables a caption could be the one
    below the first or the one above the second: the document's own habit decides (the side
    where tables with a caption on one side only have it; above when none tells), and a
    caption goes to one table only."""
    tables = [i for i, p in enumerate(pieces) if p.kind == PieceKind.TABLE]
    near = {t: (_caption_beside(pieces, t, -1), _caption_beside(pieces, t, +1)) for t in tables}
    only_below = sum(1 for above, below in near.values() if below is not None and above is None)
    only_above = sum(1 for above, below in near.values() if above is not None and below is None)
    order = (1, 0) if only_below > only_above else (0, 1)
    taken: set[int] = set()
    for before, t in zip([None, *tables], tables):
        if before is not None and near[t][0] is None and pieces[before].caption and _goes_on(pieces, before, t):
            # a part that repeats the header (the others were joined by _rejoin_parts): the
            # caption of the table it goes on from, not the next table's
            pieces[t].caption = pieces[before].caption
            continue
        for side in order:
            k = near[t][side]
            if k is not None and k not in taken:
                pieces[t].caption = " ".join(pieces[k].text.split())
                taken.add(k)
                break


def _rejoin_parts(pieces: list[Piece]) -> None:
    """Join each table's parts below its group rows back into it, the group rows as rows of
    their own: a part's first row is a row of the table, not a header (chfls1's scan p.3,
    Table 1: "Correct calculations:" over the AIC and BIC rows, cut from the header "Start |
    Step 1 | Step 2"; a question about step 1's BIC found the part, and nothing in it said
    step 1). A part that repeats the table's header is a table of its own (the xtable gallery
    prints one data frame in many formats, with code between them)."""
    before: int | None = None
    k = 0
    while k < len(pieces):
        if pieces[k].kind != PieceKind.TABLE:
            k += 1
            continue
        if before is not None and _goes_on(pieces, before, k) and not _repeats_header(pieces[before], pieces[k]):
            table, part = pieces[before], pieces[k]
            width = len(table.header.cells if table.header else table.rows[0].cells)
            for group in pieces[before + 1:k]:
                table.rows.append(Row([" ".join(group.text.split())] + [""] * (width - 1), _union(group.boxes)))
            table.rows.extend(([part.header] if part.header else []) + part.rows)
            del pieces[before + 1:k + 1]
            k = before + 1
            continue
        before = k
        k += 1


def _repeats_header(table: Piece, part: Piece) -> bool:
    from rapidfuzz import fuzz

    if not table.header or not part.header:
        return False
    head, again = (_mask(" ".join(p.header.cells)) for p in (table, part))  # type: ignore[union-attr]
    return head == again or fuzz.ratio(head, again) >= _SAME_TEXT


def _union(boxes: list[Box]) -> Box:
    """One box around ``boxes`` (on one page): a group row's lines."""
    known = [b.bbox for b in boxes if b.bbox]
    if not known:
        return boxes[0]
    return Box(boxes[0].page, (min(b[0] for b in known), min(b[1] for b in known),
                               max(b[2] for b in known), max(b[3] for b in known)))


def _goes_on(pieces: list[Piece], before: int, t: int) -> bool:
    """Table ``t`` is the part of table ``before`` below a group row set across the table
    ("文本字体宏包", lshort-zh-cn p.76): the text finder ends a table at the rules around such a
    row. On the same page, as many columns with the same outer edges, and between them only
    short text (the group row, a line of notes)."""
    a, b = pieces[before], pieces[t]
    between = pieces[before + 1:t]
    if a.last_page != b.first_page or len(between) > _CAPTION_REACH or not a.col_x or not b.col_x:
        return False
    if any(p.kind != PieceKind.TEXT or len(p.text) > _CAPTION_CHARS or _is_caption(p) for p in between):
        return False
    if len(a.col_x) != len(b.col_x):
        return False
    width = a.col_x[-1] - a.col_x[0]
    if abs(a.col_x[0] - b.col_x[0]) <= 0.02 * width and abs(a.col_x[-1] - b.col_x[-1]) <= 0.02 * width:
        return True
    return _centres_within(a.col_x, b.col_x) and _centres_within(b.col_x, a.col_x)


def _centres_within(x: list[float], y: list[float]) -> bool:
    """Each column of boundaries ``x`` has its centre inside the same column of ``y``. An OCR
    table's edges are its cells' text, not rules: under a group row the names are indented and
    the values narrower than the header's ("Adjusted p-value" over "1.000"), so chfls1's scan
    p.8 has Table 4 in five parts whose outer edges differ by 5 % of its width, and whose
    columns still stand over one another."""
    return all(y[j] <= (x[j] + x[j + 1]) / 2 <= y[j + 1] for j in range(len(x) - 1))


def _join_over_page_break(pieces: list[Piece], body: list[_Block], page: _Page) -> int | None:
    """Join the first body block(s) of ``page`` to what the previous page left open; the
    index in ``body`` of the block that was taken, or None."""
    if not pieces:
        return None
    # A table going on: the next page's first block is a table with the same columns.
    last, first = pieces[-1], body[0]
    if last.kind == PieceKind.TABLE and first.is_table and last.last_page == page.number - 1 \
            and _same_columns(last, first, page.width):
        more = _table(first, page.number)
        rows = ([more.header] if more.header else []) + more.rows
        head = last.header.cells if last.header else []
        if rows and head and [_mask(c) for c in rows[0].cells] == [_mask(c) for c in head]:
            rows = rows[1:]  # the header, repeated on the new page
        last.rows.extend(rows)
        return 0
    # A paragraph going on: the previous page's last open paragraph, stepping back over up to
    # _LOOK pieces that are not one (a footnote, a figure's labels), none of them a heading.
    for back in range(1, min(_LOOK, len(pieces)) + 1):
        candidate = pieces[-back]
        if candidate.kind == PieceKind.HEADING or candidate.last_page != page.number - 1:
            return None
        if (candidate.kind == PieceKind.TEXT and _is_open(candidate.text) and _size(candidate.text) >= _SHORT
                and not _FOOTNOTE.match(candidate.text)):
            return _continuation(candidate, body, page.number, stepped=back > 1)
    return None


def _continuation(candidate: Piece, body: list[_Block], page: int, stepped: bool) -> int | None:
    """Extend ``candidate`` with the first text of ``body`` that continues it, stepping over a
    figure at the top of the page (its labels, short, and its caption) and up to _LOOK other
    blocks, never a heading; the index of the block taken, or None."""
    others = 0
    for k, block in enumerate(body):
        if block.is_heading:
            return None
        label = k > 0 and _size(block.text) < _SHORT  # past a figure's first label, its others ("data in log scale")
        # A float's caption at the top of the page is stepped over, never joined: "...见表" and
        # "表3.1: LATEX 表格列格式" (lshort-zh-cn p.40) read as one sentence, and the table
        # below lost its caption.
        if block.type == "text" and not label and not _is_caption_text(block.text, figures=True) \
                and _continues(candidate.text, block.text, strict=stepped or k > 0):
            _extend(candidate, block, page)
            return k
        if block.type == "text" and _size(block.text) >= _SHORT and not _CAPTION.match(block.text):
            return None  # a paragraph that does not continue it
        if _size(block.text) >= _SHORT or block.type != "text":
            others += 1
            if others > _LOOK:
                return None
    return None
