"""Tables as blocks: rows of cells, the grid they sit in, and their Markdown.

A table block carries its cells (``Block.rows``, the first row its header) and its grid
(``Block.col_x``, ``Block.row_y``: the column and row boundaries in PDF points), so the
document reader can tell that a table on the next page continues this one (same columns)
and locate each row on its page.

Text-layer tables are found from the page's ruled lines (a grid, or booktabs' horizontal
rules with the columns found from the words' alignment: ``rule_tables``), not by PyMuPDF's
``find_tables``: measured on the corpus and the Debian Reference (1,758 pages), its
``lines_strict`` strategy took 0.3-0.7 s on each page with rules (145 s for the 261 pages
of the Debian Reference, where reading the text takes 4 ms a page), and its default
strategy took tables of contents for tables. The grid here costs 0.5-2 ms a page and finds
170 ruled tables in the Debian Reference (``find_tables``: 180), with their cell text from
MuPDF's words, so the words keep their spaces.
"""

from __future__ import annotations

import bisect
import re
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Callable, Iterable

from ocr_engine.api.pages import Block

if TYPE_CHECKING:
    import pymupdf

Box = tuple[float, float, float, float]
_RULE = 1.0  # a rule is at most this thick (points)
_MERGE = 1.5  # rules closer than this are one boundary


def table_markdown(rows: list[list[str]]) -> str:
    """A pipe table; the first row is the header."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)

    def line(cells: list[str]) -> str:
        cells = [" ".join(c.split()).replace("|", "\\|") for c in cells] + [""] * (width - len(cells))
        return "| " + " | ".join(cells) + " |"

    return "\n".join([line(rows[0]), "| " + " | ".join(["---"] * width) + " |", *(line(r) for r in rows[1:])])


def table_block(rows: list[list[str]], bbox: Box, col_x: list[float] | None = None,
                row_y: list[float] | None = None, confidence: float | None = None) -> Block:
    return Block("table", tuple(round(v, 2) for v in bbox), table_markdown(rows), confidence,  # type: ignore[arg-type]
                 rows=rows, col_x=[round(v, 2) for v in col_x] if col_x else None,
                 row_y=[round(v, 2) for v in row_y] if row_y else None)


def _rules(page: pymupdf.Page) -> tuple[list[tuple[float, float, float]], list[tuple[float, float, float]]]:
    """Horizontal rules (y, x0, x1) and vertical ones (x, y0, y1) of the page's vector drawings.
    A filled background rectangle is not a rule (beamer slides are built of them); a stroked
    rectangle is four."""
    horizontal, vertical = [], []
    for path in page.get_cdrawings():
        stroked = "s" in (path.get("type") or "")
        for item in path["items"]:
            if item[0] == "l":
                (x0, y0), (x1, y1) = item[1], item[2]
                if abs(y0 - y1) < _RULE and abs(x1 - x0) > 8:
                    horizontal.append((y0, min(x0, x1), max(x0, x1)))
                elif abs(x0 - x1) < _RULE and abs(y1 - y0) > 4:
                    vertical.append((x0, min(y0, y1), max(y0, y1)))
            elif item[0] == "re":
                x0, y0, x1, y1 = item[1]
                w, h = x1 - x0, y1 - y0
                if h < 2 and w > 8:
                    horizontal.append(((y0 + y1) / 2, x0, x1))
                elif w < 2 and h > 4:
                    vertical.append(((x0 + x1) / 2, y0, y1))
                elif w > 8 and h > 4 and stroked:
                    horizontal += [(y0, x0, x1), (y1, x0, x1)]
                    vertical += [(x0, y0, y1), (x1, y0, y1)]
    return _joined(horizontal), _joined(vertical)


def _joined(rules: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """Rules on one line whose ends meet, as one rule. Some tables draw each row's stretch of
    a column rule as a segment of its own (xtable's ``|`` columns): the segments touch the
    horizontal rules only at the header, so the rows below would fall out of the grid."""
    out: list[list[float]] = []
    for at, a, b in sorted(rules, key=lambda r: (round(r[0]), r[1])):
        if out and abs(at - out[-1][0]) < _RULE and a <= out[-1][2] + 2:
            out[-1][2] = max(out[-1][2], b)
        else:
            out.append([at, a, b])
    return [(at, a, b) for at, a, b in out]


def _boundaries(values: list[float]) -> list[float]:
    out: list[list[float]] = []
    for v in sorted(values):
        if out and v - out[-1][-1] <= _MERGE:
            out[-1].append(v)
        else:
            out.append([v])
    return [sum(c) / len(c) for c in out]


def _grids(page: pymupdf.Page) -> list[tuple[list[float], list[float]]]:
    """(column boundaries, row boundaries) of each set of rules that touch one another."""
    horizontal, vertical = _rules(page)
    if len(horizontal) < 3 or len(vertical) < 2:
        return []
    parent = list(range(len(horizontal) + len(vertical)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (y, x0, x1) in enumerate(horizontal):
        for j, (x, y0, y1) in enumerate(vertical):
            if x0 - 2 <= x <= x1 + 2 and y0 - 2 <= y <= y1 + 2:
                parent[root(i)] = root(len(horizontal) + j)
    groups: dict[int, tuple[list, list]] = {}
    for i, h in enumerate(horizontal):
        groups.setdefault(root(i), ([], []))[0].append(h)
    for j, v in enumerate(vertical):
        groups.setdefault(root(len(horizontal) + j), ([], []))[1].append(v)
    out = []
    for hs, vs in groups.values():
        if not hs or not vs:
            continue
        # A table drawn without its outer verticals (rules above and below, separators
        # between the columns) still has its outer edges where the horizontal rules end.
        col_x = _boundaries([v[0] for v in vs] + [min(h[1] for h in hs), max(h[2] for h in hs)])
        row_y = _boundaries([h[0] for h in hs] + [min(v[1] for v in vs), max(v[2] for v in vs)])
        if len(col_x) >= 3 and len(row_y) >= 3:
            out.append((col_x, row_y))
    return out


def page_tables(page: pymupdf.Page) -> list[Block]:
    """Every table of the page, top to bottom: ruled grids, then those set between
    horizontal rules only (booktabs), in page coordinates as MuPDF reads them (unrotated)."""
    grids = _grids(page)
    tables = ruled_tables(page, grids) + rule_tables(page, grids)
    return sorted(_one_of_each(tables), key=lambda t: (t.bbox[1], t.bbox[0]))


def _one_of_each(tables: list[Block]) -> list[Block]:
    """A table found twice, once by the frame drawn round it and once by its own rules (an
    example's output boxed beside its source, lshort-zh-cn p.40), kept once: as the inner,
    tighter one, whose box is what a hit highlights."""
    def within(a: Block, b: Block) -> bool:
        return b.bbox[0] <= a.bbox[0] and b.bbox[1] <= a.bbox[1] and a.bbox[2] <= b.bbox[2] and a.bbox[3] <= b.bbox[3]

    return [t for t in tables
            if not any(o is not t and o.rows == t.rows and within(o, t) and o.bbox != t.bbox for o in tables)]


def ruled_tables(page: pymupdf.Page, grids: list[tuple[list[float], list[float]]] | None = None) -> list[Block]:
    """Tables drawn with rules, in page coordinates as MuPDF reads them (unrotated); a grid
    counts as a table when its words fill at least two columns and two rows.

    Rules need not bound every row or column: rows set between two rules without a rule
    of their own (a header rule, then ten rows, then the bottom rule) are told apart by their
    lines, and columns sharing a ruled cell by the empty strips between their words, as in a
    booktabs table (``_row_lines``, ``_sub_columns``)."""
    grids = _grids(page) if grids is None else grids
    words = page.get_text("words") if grids else []
    bottom = page.mediabox.y1  # some documents draw a long table on past the page's end
    tables = []
    for col_x, row_y in grids:
        bands: dict[int, list] = {}
        for w in words:
            cx, cy = (w[0] + w[2]) / 2, (w[1] + w[3]) / 2
            if col_x[0] <= cx <= col_x[-1] and row_y[0] <= cy <= row_y[-1]:
                bands.setdefault(bisect.bisect(row_y, cy) - 1, []).append(w)
        column = lambda w: bisect.bisect(col_x, (w[0] + w[2]) / 2) - 1  # noqa: E731
        used = sorted(bands)  # rows without words are rule pairs, not rows
        if not used or len({column(w) for ws in bands.values() for w in ws}) < 2:
            continue
        rows, tops = [], []
        for i, r in enumerate(used):
            # The first of several ruled bands is the header, whatever its number of lines.
            for n, line in enumerate([bands[r]] if i == 0 and len(used) > 1 else _row_lines(bands[r], column)):
                rows.append(line)
                tops.append(row_y[r] if n == 0 else min(w[1] for w in line) - 1)
        if len(rows) < 2:
            continue
        by_column = [[[w for w in row if column(w) == c] for c in range(len(col_x) - 1)] for row in rows]
        cols = [_sub_columns([row[c] for row in by_column[1:]]) for c in range(len(col_x) - 1)]
        cells = [[cell for ws, spans in zip(row, cols) for cell in _cells(ws, spans)] for row in by_column]
        xs = [col_x[0]]
        for c, spans in enumerate(cols):
            xs += [(a[1] + b[0]) / 2 for a, b in zip(spans, spans[1:])] + [col_x[c + 1]]
        if not _filled(cells):
            continue
        bounds = tops + [min(row_y[used[-1] + 1], bottom)]
        tables.append(table_block(cells, (col_x[0], bounds[0], col_x[-1], bounds[-1]), xs, bounds))
    return tables


def _filled(rows: list[list[str]]) -> bool:
    """Whether half the columns or more hold words in half the rows or more. Rules that
    cross in a figure (a plot's axes and curves, a diagram's boxes) make grids too, with a
    label here and there: 2 of 9 columns filled on fitdistrplus' plots, where a table of
    the corpus fills most of its columns."""
    filled = sum(1 for c in range(len(rows[0])) if sum(1 for r in rows if r[c].strip()) * 2 >= len(rows))
    return filled * 2 >= len(rows[0])


def _row_lines(words: list, column: Callable[[tuple], int]) -> list[list]:
    """The words of one ruled row as the table's rows: one per line when two lines or more
    fill two columns or more (rows no rule separates), else the whole band (a cell's text
    wrapped over lines). A line filling one column only goes on the row above it."""
    lines = _visual_lines(words)
    first = min(column(w) for w in lines[0])  # a row's label column: a wrapped cell's line leaves it empty
    filled = [len({column(w) for w in line}) >= 2 and any(column(w) == first for w in line) for line in lines]
    if sum(filled) < 2:
        return [words]
    rows: list[list] = []
    for line, full in zip(lines, filled):
        if rows and not full:
            rows[-1] += line
        else:
            rows.append(list(line))
    return rows


def _sub_columns(rows: list[list]) -> list[tuple[float, float]]:
    """The columns standing in one ruled column, from its words in the body rows: the
    merged spans of their cells when three rows or more fill it and the spans are two or
    more (xtable's ``|rr|l|``: the row names and the first column share a cell); [] for a
    ruled column that holds one."""
    filled = [_segments(ws) for ws in rows if ws]
    if len(filled) < 3 or not all(len(_visual_lines(ws)) == 1 for ws in rows if ws):
        return []
    spans = _spans(filled)
    return spans if len(spans) >= 2 else []


def _cells(words: list, spans: list[tuple[float, float]]) -> list[str]:
    if not spans:
        return [" ".join(w[4] for w in words)]
    return _assign(_segments(words), spans)


# --- tables drawn with horizontal rules only (LaTeX's booktabs, many word processors' styles) --

_CELL_GAP = 0.8  # words further apart than this many text heights are in different cells


def _segments(words: list) -> list[tuple[float, float, float, float, str]]:
    """The words of one visual line as cells: runs of words closer than ``_CELL_GAP`` heights."""
    words = sorted(words, key=lambda w: w[0])
    out: list[list] = []
    for w in words:
        height = w[3] - w[1]
        if out and w[0] - out[-1][2] <= _CELL_GAP * height:
            out[-1][2], out[-1][3] = max(out[-1][2], w[2]), max(out[-1][3], w[3])
            out[-1][4] += " " + w[4]
        else:
            out.append([w[0], w[1], w[2], w[3], w[4]])
    return [tuple(o) for o in out]  # type: ignore[misc]


def _visual_lines(words: list) -> list[list]:
    """Words grouped into lines by their vertical centres (a table's cells are often separate
    lines, even separate blocks, in MuPDF's structure), top to bottom."""
    lines: list[list] = []
    for w in sorted(words, key=lambda w: (w[1] + w[3]) / 2):
        cy, h = (w[1] + w[3]) / 2, w[3] - w[1]
        if lines and abs(cy - lines[-1][0]) <= 0.4 * h:
            lines[-1][1].append(w)
        else:
            lines.append([cy, [w]])
    return [ws for _, ws in lines]


def merged_spans(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals (x0, x1) merged where they overlap, left to right: the columns that cells
    stand in, found from the cells' x extents over all rows (text layer and OCR alike)."""
    spans: list[list[float]] = []
    for x0, x1 in sorted(intervals):
        if spans and x0 <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], x1)
        else:
            spans.append([x0, x1])
    return [(a, b) for a, b in spans]


def _spans(rows: list[list[tuple]]) -> list[tuple[float, float]]:
    return merged_spans((c[0], c[2]) for row in rows for c in row)


def _assign(row: list[tuple], spans: list[tuple[float, float]]) -> list[str]:
    cells = [""] * len(spans)
    for c in row:
        col = max(range(len(spans)), key=lambda i: min(c[2], spans[i][1]) - max(c[0], spans[i][0]))
        cells[col] = f"{cells[col]} {c[4]}".strip()
    return cells


def _rule_stacks(page: pymupdf.Page, grids: list[tuple[list[float], list[float]]]) -> list[tuple[float, float, list[float]]]:
    """(x0, x1, the rules' ys) of horizontal rules of one width, outside every ruled grid."""
    horizontal, _ = _rules(page)
    stacks: list[tuple[float, float, list[float]]] = []
    for y, x0, x1 in sorted(horizontal):
        if any(cx[0] - 2 <= x0 and x1 <= cx[-1] + 2 and ry[0] - 2 <= y <= ry[-1] + 2 for cx, ry in grids):
            continue
        for sx0, sx1, ys in stacks:
            if abs(sx0 - x0) <= 2 and abs(sx1 - x1) <= 2:
                if y - ys[-1] > _MERGE:
                    ys.append(y)
                break
        else:
            stacks.append((x0, x1, [y]))
    return [s for s in stacks if len(s[2]) >= 2]


def rule_tables(page: pymupdf.Page, grids: list[tuple[list[float], list[float]]] | None = None) -> list[Block]:
    """Tables set between horizontal rules of one width and no vertical ones (booktabs'
    top, middle and bottom rules). The words between two rules are a table's band when
    they stand in two columns or more: their cells (runs of words closer than a text
    height or so) line up in columns with empty strips between, in at least half of the
    band's lines. Consecutive such bands are one table; the first band's lines are its
    header (merged into one row when a middle rule closes them). Prose and code between
    rules (a page's header and footer rules, a framed listing) fill one column and are not
    tables."""
    stacks = _rule_stacks(page, _grids(page) if grids is None else grids)
    if not stacks:
        return []
    words = page.get_text("words")
    mono: list | None = None  # read only for a band that looks like a table (most pages have none)
    tables = []
    for x0, x1, ys in stacks:
        bands = []  # (top, bottom, rows of cells) of each band between consecutive rules
        for top, bottom in zip(ys, ys[1:]):
            inside = [w for w in words if x0 - 2 <= (w[0] + w[2]) / 2 <= x1 + 2 and top < (w[1] + w[3]) / 2 < bottom]
            bands.append((top, bottom, [] if _leaders(inside) else [_segments(ws) for ws in _visual_lines(inside)]))
        run: list = []
        for band in bands + [None]:
            if band is not None and band[2] and _tabular(band[2]):
                mono = _monospaced(page) if mono is None else mono
                if not _mostly_in(mono, (x0, band[0], x1, band[1])):  # not a listing framed by rules
                    run.append(band)
                    continue
            if run:
                table = _band_table(run, x0, x1)
                if table is not None:
                    tables.append(table)
            run = []
    return tables


_MONO = re.compile(r"mono|courier|typewriter|cmtt|consol|\btt", re.I)


def _monospaced(page: pymupdf.Page) -> list[tuple[tuple[float, float, float, float], int, bool]]:
    """(box, characters, set in a monospaced font) of each span on the page."""
    out = []
    for block in page.get_text("dict")["blocks"]:
        for line in block.get("lines", []):
            for span in line["spans"]:
                n = len(span["text"].strip())
                if n:
                    out.append((span["bbox"], n, bool(span["flags"] & 8 or _MONO.search(span["font"]))))
    return out


def _mostly_in(spans: list, box: tuple[float, float, float, float]) -> bool:
    """Whether most characters inside ``box`` are monospaced: code or a terminal's output,
    whose spaces line up like columns, framed by two rules (a listing), not a table."""
    inside = [(n, mono) for b, n, mono in spans
              if box[0] - 2 <= (b[0] + b[2]) / 2 <= box[2] + 2 and box[1] < (b[1] + b[3]) / 2 < box[3]]
    total = sum(n for n, _ in inside)
    return total > 0 and sum(n for n, mono in inside if mono) * 2 > total


def _leaders(words: list) -> bool:
    """Dot leaders (". . . ." between an entry and its page number): a table of contents."""
    return sum(1 for w in words if w[4] in (".", "..", "...")) >= 12


def _tabular(rows: list[list[tuple]]) -> bool:
    return len(_spans(rows)) >= 2 and sum(1 for r in rows if len(r) >= 2) * 2 >= len(rows)


def _band_table(run: list, x0: float, x1: float) -> Block | None:
    head_rows = run[0][2] if len(run) > 1 else run[0][2][:1]
    body_rows = [r for band in run[1:] for r in band[2]] if len(run) > 1 else run[0][2][1:]
    if not body_rows:
        return None
    spans = _spans(body_rows)  # a header cell may span columns: the body decides them
    if len(spans) < 2:
        return None
    header = [" ".join(filter(None, col)) for col in zip(*(_assign(r, spans) for r in head_rows))]
    rows, tops = [header], [run[0][0]]
    for r in body_rows:
        cells = _assign(r, spans)
        if len(rows) > 1 and not cells[0]:  # a cell's text wrapped onto a second line
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
        else:
            rows.append(cells)
            tops.append(min(c[1] for c in r) - 1)
    if len(run) > 1:
        tops[1] = run[1][0]  # the header's band ends at the middle rule
    col_x = [x0] + [(a[1] + b[0]) / 2 for a, b in zip(spans, spans[1:])] + [x1]
    bottom = run[-1][1]
    return table_block(rows, (x0, run[0][0], x1, bottom), col_x, tops + [bottom])


class _HtmlTable(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            if not self.rows:
                self.rows.append([])
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


_PIPE_ROW = re.compile(r"^\s*\|(.*)\|\s*$")
_PIPE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")


def parse_table_text(text: str) -> list[list[str]]:
    """Rows of a table an OCR model wrote as HTML (``<table><tr><td>``) or as a pipe table;
    [] when the text is neither."""
    if "<tr" in text.lower():
        parser = _HtmlTable()
        parser.feed(text)
        return [r for r in parser.rows if any(c for c in r)]
    rows = []
    for line in text.splitlines():
        m = _PIPE_ROW.match(line)
        if m and not _PIPE_RULE.match(line):
            rows.append([c.strip() for c in m.group(1).split("|")])
    return rows if len(rows) >= 2 else []
