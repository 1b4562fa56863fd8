"""Reading order for OCR'd lines: columns, paragraphs, headings, Markdown.

Scans are skewed, so lines are first placed in an upright frame: the page's skew is the
median slope of its lines (weighted by length), and each line's centre is turned back by
it. In that frame, lines wider than most of the page cut it into bands; within a band, the
gutter is the vertical strip between 30% and 70% of the width crossed by the fewest lines.
With lines on both sides of it, the band reads as two columns, one after the other,
and the few lines crossing the gutter (a title, a running header, a spanning caption) cut
the band again, as the wide lines do. On a page set in one column (wide lines hold much of
its text), lines side by side are a table, read by rows unless no line at all crosses
between them. Lines then join into paragraphs by vertical gap and left edge; a line much
taller than the page's median is a heading.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ocr_engine.api.pages import Block
from ocr_engine.api.text import is_cjk

Box = tuple[float, float, float, float]


@dataclass
class Line:
    bbox: Box  # axis-aligned, in PDF points of the page
    text: str
    confidence: float
    angle: float = 0.0  # radians: the slope of the text's baseline (y grows downwards), as detected

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


def _upright(lines: list[Line]) -> list[_Placed]:
    """Each line's box in a frame turned back by the page's skew, about the lines' centroid.

    A 1.5 degree skew moves a column's edge by 17 pt from top to bottom of a page, more than
    a 15 pt gutter, and the ends of a 500 pt line by 13 pt in y, a line's pitch: the boxes of
    neighbouring lines overlap, and rows merged them and read them out of order. In the
    upright frame gutters are empty again and rows are level: on the one-column scans of
    fitdistrplus, CER with spaces went from 0.130 to 0.080."""
    skew = page_skew(lines)
    if not skew:
        return [_Placed(ln.bbox, ln) for ln in lines]
    px = statistics.fmean((ln.bbox[0] + ln.bbox[2]) / 2 for ln in lines)
    py = statistics.fmean((ln.bbox[1] + ln.bbox[3]) / 2 for ln in lines)
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
        centre = (ln.bbox[1] + ln.bbox[3]) / 2
        if rows:
            ref = rows[-1][0]
            if abs(centre - (ref.bbox[1] + ref.bbox[3]) / 2) < 0.5 * min(ref.height, ln.height):
                rows[-1].append(ln)
                continue
        rows.append([ln])
    return [sorted(row, key=lambda ln: ln.bbox[0]) for row in rows]


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


def _gutter(lines: list[_Placed], width: float, tolerant: bool) -> tuple[float, float] | None:
    """The x of a band's column gutter and how far a column's line may reach past it (see
    ``_side``), or None when the band is one column.

    The gutter is the middle of the longest run of strips (a quarter of a percent of the
    width each: a 10 pt gutter is 6 of them), between 30% and 70%, crossed by the fewest
    lines. It splits the band when at least two lines stand on each side of it, at most one
    line in eight crosses it (none when not ``tolerant``: a one-column page), and the two
    sides are not both a table's cells. Requiring no crossing line at all, as before, read
    the two-column papers of the corpus (tb87fahmy, genetics_article) row by row: a title or
    a header over both columns, or the skew, always closed the gutter. With the same
    recognition, this rule alone took their CER with spaces from 0.70 and 0.43 to 0.18 and
    0.08."""
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
    reach = _reach(lines) if tolerant else 0.0
    sides = [_side(ln, gutter, reach) for ln in lines]
    left = [ln for ln, side in zip(lines, sides) if side < 0]
    right = [ln for ln, side in zip(lines, sides) if side > 0]
    crossing = len(lines) - len(left) - len(right)
    if len(left) < 2 or len(right) < 2 or crossing * 8 > len(lines) or (crossing and not tolerant):
        return None
    # Rows of cells on both sides are a table, read by rows: zh p. 211 of the Debian
    # Reference went from CER 0.07 to 0.73 read by columns.
    if _cells(left) and _cells(right):
        return None
    return gutter, reach


def _reach(lines: list[_Placed]) -> float:
    """How far past the gutter a column's line may reach: the band's median line height."""
    return statistics.median(ln.height for ln in lines)


def _side(ln: _Placed, gutter: float, reach: float) -> int:
    """-1 for the left column, 1 for the right, 0 for a line across both: one that reaches
    more than a line's height past the gutter on each side. A column's line can reach into
    the gutter a little (the detector pads its boxes by a few points, and a 12 pt gutter
    leaves 4 pt between the boxes) and still belongs to its column."""
    if ln.bbox[0] < gutter - reach and ln.bbox[2] > gutter + reach:
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


def _split_columns(lines: list[_Placed], width: float, tolerant: bool) -> list[list[_Placed]]:
    """One band's lines as runs in reading order: its columns, cut where a line crosses the gutter."""
    found = _gutter(lines, width, tolerant)
    if found is None:
        return [_rows(lines)]
    gutter, reach = found
    runs: list[list[_Placed]] = []
    left: list[_Placed] = []
    right: list[_Placed] = []
    for ln in _rows(lines):
        side = _side(ln, gutter, reach)
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
    # On a one-column page, lines side by side are a table or a figure: read by rows unless
    # nothing at all crosses the gap between them, as before. Tolerating a few lines across
    # read a table of the Chinese maint-guide column by column (page CER 0.04 to 0.23).
    tolerant = not _one_column(placed, page_width)
    ordered: list[list[_Placed]] = []
    band: list[_Placed] = []
    wide: list[_Placed] = []
    for ln in _rows(placed):
        if _wide(ln, page_width):
            if band:
                ordered.extend(_split_columns(band, page_width, tolerant))
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
        ordered.extend(_split_columns(band, page_width, tolerant))
    return ordered


def reading_order(lines: list[Line], page_width: float) -> list[list[Line]]:
    """Runs of lines (a column, or consecutive full-width lines) in the order a person reads them."""
    return [[p.line for p in run] for run in _order(_upright(lines), page_width)]


def to_blocks(lines: list[Line], page_width: float) -> tuple[list[Block], str]:
    """Blocks in reading order, and the page as Markdown. Block boxes are the union of their
    lines' boxes, on the page as it is (not in the upright frame)."""
    if not lines:
        return [], ""
    placed = _upright(lines)
    median_h = statistics.median(p.height for p in placed)
    blocks: list[Block] = []
    confidences: list[list[float]] = []
    prev: _Placed | None = None
    for column in _order(placed, page_width):
        for p in column:
            ln = p.line
            heading = p.height >= 1.3 * median_h and len(ln.text) <= 120
            # The gap's lower bound keeps the top of a new column from joining the
            # bottom of the previous one (their gap is large and negative).
            gap = p.bbox[1] - prev.bbox[3] if prev is not None else None
            same_para = (
                gap is not None and blocks and blocks[-1].type == "text" and not heading
                and -0.3 * median_h <= gap < 0.8 * median_h and abs(p.bbox[0] - prev.bbox[0]) < 2 * median_h
            )
            if same_para:
                b = blocks[-1]
                b.text = _join(b.text, ln.text)
                b.bbox = (min(b.bbox[0], ln.bbox[0]), min(b.bbox[1], ln.bbox[1]),
                          max(b.bbox[2], ln.bbox[2]), max(b.bbox[3], ln.bbox[3]))
                confidences[-1].append(ln.confidence)
            else:
                blocks.append(Block("heading" if heading else "text", ln.bbox, ln.text))
                confidences.append([ln.confidence])
            prev = p
    for b, confs in zip(blocks, confidences):
        b.confidence = round(sum(confs) / len(confs), 4)
    markdown = "\n\n".join(f"## {b.text}" if b.type == "heading" else b.text for b in blocks)
    return blocks, markdown
