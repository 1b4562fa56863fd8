"""``kb bench structure``: how the knowledge base reads real documents, in figures.

**Self-consistency checks, not quality figures** (issue 53). Four of the figures below take
their reference from the code under test, or are measured on the pages whose rules were
chosen on them, so they say whether the reading still agrees with itself, not how well it
reads pages nobody tuned on; ``kb bench scans`` (``include/scanbench``, ground truth from the
original PDFs, a frozen split) is the quality measure for scanned pages:

- ``column_order``: its reference is the project's own text-layer reader (the engine's
  column rule, ``ocr_engine.backends.textlayer``), and its 15 to 17 pages are those the OCR
  layout's XY-cut thresholds were chosen on;
- ``table_chunks_without_header``: its reference tables come from ``ocr_engine.api.tables``,
  the table finder the reader itself uses;
- ``sections_in_outline_share`` on the image-only copies: the reference (the PDF outline) is
  the file's own, but the OCR heading rules were derived on these same scanned pages;
- the CER split: ``fit`` holds the scans the thresholds were fitted on (``FIT_SCANS``), and
  ``other`` the remaining corpus scans, which are not out of sample either: xtableGallery's
  and chfls1's scans were reading material for the OCR layout rules (rules were found on
  xtableGallery's), and maint-guide's and exam-zh's scans were read while rules were written.
  The CER against Tesseract on the same images is a comparison, not an out-of-sample figure.

The printed report says so beside each of them (``SELF_CONSISTENCY``).

Over the real corpus (``include/corpus``: 1,246 born-digital pages and 103 pages of
image-only copies, fetched from their Debian packages) and the samples, every page is read
as the pipeline reads it (the OCR engine in this process: the text layer where it is
usable, else PP-OCR), and chunked as index chunks it (``kb.pipeline.index.chunk_pages``,
the embedder's tokenizer). Printed:

- ``mid_sentence_at_page_break``: the share of text chunks that end at a page break with
  their sentence unfinished: the chunk ends without closing punctuation, and the next
  chunk, which starts on a later page, goes on (past any running line it starts with) in
  lower case, or in Chinese after unfinished Chinese.
- ``running_lines_in_chunks``: running header and footer lines left inside chunks. Which
  lines are running is decided from the text layer's lines on simpler terms than the
  reader under test uses: the top-most or bottom-most line of a page (in the top or bottom
  12 %) whose text, digits masked, comes back as such at the same height (3 points) on three
  pages or more (two in a document of four pages or fewer), or whose text is a number that
  goes up with the page number on as many pages. A line of six letters or more is left
  inside when chunks on its page hold its text more often than the page's other lines do;
  a page number, when a chunk's box on its page covers most of it. An image-only copy is
  checked against its original's lines.
- ``table_chunks_without_header``: of the chunks that hold a whole body row of a table
  (its cells' text in order, eight characters or more; the tables found in the text layer by
  ``ocr_engine.api.tables``: ruled grids and, since 2026-12-06, booktabs tables), those that
  do not also hold its header row. An image-only copy is checked against its original's tables.
  A self-consistency check (above): the reference is the reader's own table finder.
- ``chunks_with_boxes``: the share of chunks that know where on their pages they are.
- ``highlighted_page_share_median``: for each chunk and page, the share of the page its boxes
  cover together (what a reader opening the hit sees highlighted); the median, born-digital
  and image-only copies apart.
- ``sections_in_outline_share``: of the chunks with a section, those whose section (the
  label's last part) is a title of the PDF's outline (bookmarks; the original's for a copy),
  numbers aside: a heading the document itself declares, not an author's name taken for
  one. Documents without an outline are left out. On the image-only copies, a
  self-consistency check (above): the OCR heading rules were derived on these pages.
- ``open_at_page_break``: text chunks that end without closing punctuation where the next
  starts on a later page, whatever it starts with: a check of cuts at page breaks that does
  not share the reader's join rule (``mid_sentence_at_page_break`` counts only a lower-case
  continuation). An upper bound: list items and code lines end without punctuation too.
- ``over_removed``: lines the reader set aside as running headers and footers that are not
  running lines of the text layer on that page (body lines dropped); examples per document.
- ``cer``: on the image-only copies, PP-OCR's page text (what the engine returned) and
  Tesseract's reading of the same rendered image, against the original's text layer, word
  spaces counted (``ocr_engine.api.text.normalise_spaced``), by language, and by language for
  the scans the reading thresholds were fitted on (``FIT_SCANS``, ``fit``) and the other
  corpus scans (``other``: not out of sample either, above). Both warm:
  Tesseract reads a document's pages in one process.
- ``column_order``: on the image-only copies' two-column pages, the share of OCR lines read in
  the text layer's column order. A page is two-column when its original's text layer, as the
  engine reads it (``ocr_engine.backends.textlayer``), has three blocks or more wholly in each
  half of the page, two of them of 40 characters or more on each side (the rule by which that
  backend reads a page column by column). The engine's blocks for the scanned page are cut
  into line-sized pieces (whole words, 40 characters or more); each piece is placed in the
  original's blocks, in the text layer's order, by fuzzy match (``rapidfuzz``'s partial
  ratio, 85 or more, on text without spaces); pieces under 12 characters, and those that
  match nowhere, are left out and counted. The share is the longest run of matched pieces
  whose places go up (a longest non-decreasing subsequence) over the matched pieces, pooled
  over the pages. A self-consistency check (above).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kb.errors import KbError

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
BAND = 0.12
SAME_HEIGHT_PT = 3.0
TESSERACT_LANGS = {"en": "eng", "zh": "chi_sim+eng"}
_CLOSES = set(".!?:;…。！？：；")
_TRAILERS = set("\"'”’)]}）」』》")


@dataclass(frozen=True)
class Line:
    page: int
    bbox: tuple[float, float, float, float]
    text: str


@dataclass
class Document:
    """One file's chunks, and what its text layer says a reading must get right."""

    name: str
    language: str
    scanned: bool
    pages: int
    chunks: list[dict[str, Any]]  # {"text", "pages", "boxes", "kind"}, in order
    running: list[Line] = field(default_factory=list)  # from the (original's) text layer
    bodies: dict[int, str] = field(default_factory=dict)  # page -> its text without running lines
    tables: list[tuple[int, list[str], list[list[str]]]] = field(default_factory=list)  # (page, header, body rows)
    sizes: dict[int, tuple[float, float]] = field(default_factory=dict)  # page -> (width, height) in points
    set_aside: list[Line] = field(default_factory=list)  # what the reader took for running lines
    outline: list[str] | None = None  # the (original's) PDF outline titles; None: it has none


def normalise(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).lower()


def _mask(text: str) -> str:
    return re.sub(r"\d+", "#", normalise(text))


def _cjk(ch: str) -> bool:
    return "\u3400" <= ch <= "\u9fff"


# --- what the text layer says ------------------------------------------------------------

def running_lines(path: Path) -> tuple[list[Line], dict[int, str]]:
    """The running lines of a born-digital PDF, and each page's text without them."""
    import pymupdf

    lines_by_page: dict[int, list[Line]] = {}
    outermost: list[Line] = []
    with pymupdf.open(path) as doc:
        for page in doc:
            number, height = page.number + 1, page.rect.height
            found = []
            for block in page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)["blocks"]:
                for line in block.get("lines", []):
                    text = "".join(s["text"] for s in line["spans"]).strip()
                    if text:
                        found.append(Line(number, tuple(line["bbox"]), text))
            lines_by_page[number] = found
            if found:
                top = min(ln.bbox[1] for ln in found)
                bottom = max(ln.bbox[3] for ln in found)
                outermost += [ln for ln in found if (abs(ln.bbox[1] - top) <= 2 and ln.bbox[3] < BAND * height)
                              or (abs(ln.bbox[3] - bottom) <= 2 and ln.bbox[1] > (1 - BAND) * height)]
    least = 2 if len(lines_by_page) <= 4 else 3
    groups: dict[tuple, list[Line]] = {}
    for line in outermost:
        key = _mask(line.text)
        if key == "#":  # a bare number: a page number goes up with the page
            key = ("number", line.page - int(re.sub(r"\D", "", line.text)))
        elif sum(ch.isalpha() for ch in key) < 3:  # "}" or "4.6.2" at the top of a listing or a contents page
            continue
        groups.setdefault(key, []).append(line)
    running: list[Line] = []
    for key, members in groups.items():
        # words that come back on a few pages only ("Example:" at the foot of three of gnuplot's
        # 311) may be the body's: a running title comes back on one page in twenty at least
        if not isinstance(key, tuple) and len({m.page for m in members}) < max(least, len(lines_by_page) // 20):
            continue
        # at the same height: the most common height, give or take SAME_HEIGHT_PT
        common = Counter(round(m.bbox[1] / SAME_HEIGHT_PT) for m in members).most_common(1)[0][0]
        same = [m for m in members if abs(m.bbox[1] / SAME_HEIGHT_PT - common) <= 1]
        if len({m.page for m in same}) >= least:
            running.extend(same)
    aside = {(r.page, r.bbox) for r in running}
    bodies = {n: "\n".join(ln.text for ln in lines if (n, ln.bbox) not in aside) for n, lines in lines_by_page.items()}
    return running, bodies


def outline_titles(path: Path) -> list[str] | None:
    """The titles of the PDF's outline (its bookmarks), None when it has none: the document's
    own headings, independent of how the reader finds them."""
    import pymupdf

    with pymupdf.open(path) as doc:
        return [title for _, title, _ in doc.get_toc(simple=True)] or None


def ruled_table_rows(path: Path) -> list[tuple[int, list[str], list[list[str]]]]:
    """(page, header, body rows) of every table of the text layer: ruled grids and booktabs."""
    import pymupdf

    from ocr_engine.api.tables import page_tables

    out = []
    with pymupdf.open(path) as doc:
        for page in doc:
            for table in page_tables(page):
                rows = [[c for c in r] for r in table.rows or []]
                if len(rows) >= 2:
                    out.append((page.number + 1, rows[0], rows[1:]))
    return out


# --- the figures ---------------------------------------------------------------------------

def _open(text: str) -> bool:
    text = text.rstrip()
    while text and text[-1] in _TRAILERS:
        text = text[:-1]
    return bool(text) and text[-1] not in _CLOSES


def _without_running_start(text: str, running: list[str]) -> str:
    """``text`` without the running lines it starts with (a chunk cut at every page break
    starts with the page's header): what follows is where the page's text goes on."""
    text = text.lstrip()
    stripped = True
    while stripped:
        stripped = False
        for line in running:
            if line and text.startswith(line):
                text, stripped = text[len(line):].lstrip(), True
    return text


def mid_sentence_cuts(chunks: list[dict[str, Any]], running: list[Line] = ()) -> tuple[int, int]:
    """(text chunks cut mid-sentence at a page break, text chunks)."""
    by_page: dict[int, list[str]] = {}
    for line in running:
        by_page.setdefault(line.page, []).append(" ".join(line.text.split()))
    text_chunks = [c for c in chunks if c.get("kind", "text") == "text" and c["pages"]]
    cut = 0
    for a, b in zip(text_chunks, text_chunks[1:]):
        if min(b["pages"]) <= max(a["pages"]) or not _open(a["text"]):
            continue
        last = a["text"].rstrip()[-1]
        first = _without_running_start(" ".join(b["text"].split()), by_page.get(min(b["pages"]), []))[:1]
        if first and (first.islower() or (_cjk(first) and (_cjk(last) or last in "，、"))):
            cut += 1
    return cut, len(text_chunks)


def open_at_page_break(chunks: list[dict[str, Any]]) -> int:
    """Text chunks that end without closing punctuation where the next text chunk starts on a
    later page, whatever that chunk starts with: the check of a sentence cut at a page break
    that does not share the reader's join rule (a lower-case continuation). It also counts
    what ends without punctuation on purpose (a list item, a code line, a caption), so it is
    an upper bound."""
    text_chunks = [c for c in chunks if c.get("kind", "text") == "text" and c["pages"]]
    return sum(1 for a, b in zip(text_chunks, text_chunks[1:])
               if min(b["pages"]) > max(a["pages"]) and _open(a["text"]))


def over_removed(doc: Document) -> list[Line]:
    """Lines the reader set aside as running headers or footers that the text layer's own
    running lines (``running_lines``) do not hold on that page: body lines dropped, or
    running lines this bench misses; the sample printed is checked by hand."""
    from rapidfuzz import fuzz

    reference: dict[int, list[str]] = {}
    for line in doc.running:
        reference.setdefault(line.page, []).append(_mask(line.text))
    # OCR reads a line a little differently from the text layer: a close match is the same line
    return [ln for ln in doc.set_aside
            if not any(fuzz.ratio(_mask(ln.text), ref) >= 85 for ref in reference.get(ln.page, []))]


def _covers(box: list[float] | None, line: Line) -> bool:
    if not box:
        return False
    x0, y0 = max(box[0], line.bbox[0]), max(box[1], line.bbox[1])
    x1, y1 = min(box[2], line.bbox[2]), min(box[3], line.bbox[3])
    area = (line.bbox[2] - line.bbox[0]) * (line.bbox[3] - line.bbox[1])
    return x1 > x0 and y1 > y0 and area > 0 and (x1 - x0) * (y1 - y0) >= 0.5 * area


def running_left_inside(doc: Document) -> list[Line]:
    """The running lines some chunk still holds."""
    from rapidfuzz import fuzz

    left = []
    for line in doc.running:
        on_page = [c for c in doc.chunks if line.page in c["pages"]]
        letters = sum(ch.isalpha() for ch in line.text)
        if letters >= 6:
            needle = normalise(line.text)
            # the body of every page these chunks span may hold the same words legitimately
            body = normalise("\n".join(doc.bodies.get(n, "") for n in sorted({n for c in on_page for n in c["pages"]})))
            if doc.scanned:  # OCR reads the line a little differently: a close match counts
                inside = any(fuzz.partial_ratio(needle, normalise(c["text"])) >= 90 for c in on_page if c["text"])
                inside = inside and fuzz.partial_ratio(needle, body) < 90
            else:
                inside = sum(normalise(c["text"]).count(needle) for c in on_page) > body.count(needle)
        else:
            inside = any(_covers(b.get("bbox"), line) for c in on_page for b in c.get("boxes") or []
                         if b.get("page") == line.page)
        if inside:
            left.append(line)
    return left


def _flat(text: str) -> str:
    """Text as a table row is compared: no whitespace, no pipe-table syntax (a cell's escaped \\| included)."""
    return re.sub(r"[|\\\-:]", "", normalise(text))


def headless_table_chunks(doc: Document) -> tuple[int, int]:
    """(chunks holding a table row without its header row, chunks holding a table row). Only
    chunks on the table's page count, and a row is matched within one line of a chunk (a
    table chunk's row, a text chunk's paragraph): flattened whole, the end of one row and the
    start of the next read as a third ("... 79 |" + "| 6 M NO WHITE 88" holds "9 6 M NO WHITE
    88"). A row that two tables of the page share (the xtable gallery prints one data frame
    in a dozen formats) is held with its header when either table's header is there. The
    text layer's finder ends a table at the rules around a group row (lshort-zh-cn's Table
    5.4, ctex's Table 3), so the first row of a part below one is no header: a row is held
    with its header, too, when the chunk holds the header of a table above it on the page
    with as many columns (the part's table, which the reader joins back)."""
    texts = ["\n".join(_flat(line) for line in c["text"].splitlines()) for c in doc.chunks]
    on_page: dict[int, list[int]] = {}
    for i, c in enumerate(doc.chunks):
        for p in c["pages"]:
            on_page.setdefault(p, []).append(i)
    heads: dict[tuple[int, str], set[str]] = {}  # (page, row) -> the headers it stands under
    above: dict[tuple[int, int], set[str]] = {}  # (page, columns) -> headers of the tables so far
    for page, header, rows in doc.tables:
        head = "".join(_flat(c) for c in header)
        under = {head} | above.get((page, len(header)), set())
        above.setdefault((page, len(header)), set()).add(head)
        for row in rows:
            needle = "".join(_flat(c) for c in row)
            if len(needle) >= 8 and sum(1 for c in row if c.strip()) >= 2:
                heads.setdefault((page, needle), set()).update(under)
    holding, headless = set(), set()
    for (page, needle), under in heads.items():
        for i in on_page.get(page, ()):
            if needle in texts[i]:
                holding.add(i)
                if all(head and head not in texts[i] for head in under):
                    headless.add(i)
    return len(headless), len(holding)


def _union_area(boxes: list[tuple[float, float, float, float]]) -> float:
    """The area that ``boxes`` cover together (overlaps counted once)."""
    xs = sorted({v for b in boxes for v in (b[0], b[2])})
    area = 0.0
    for x0, x1 in zip(xs, xs[1:]):
        spans = sorted((b[1], b[3]) for b in boxes if b[0] <= x0 and b[2] >= x1)
        covered, end = 0.0, float("-inf")
        for y0, y1 in spans:
            if y1 > end:
                covered += y1 - max(y0, end)
                end = y1
        area += covered * (x1 - x0)
    return area


def highlighted_shares(doc: Document) -> list[float]:
    """For each chunk and each page it has boxes on: the share of the page its boxes cover,
    what a reader opening the hit sees highlighted."""
    out = []
    for c in doc.chunks:
        by_page: dict[int, list] = {}
        for b in c.get("boxes") or []:
            if b.get("bbox"):
                by_page.setdefault(b["page"], []).append(tuple(b["bbox"]))
        for page, boxes in by_page.items():
            w, h = doc.sizes.get(page, (0.0, 0.0))
            if w and h:
                out.append(min(1.0, _union_area(boxes) / (w * h)))
    return out


def _heading_key(text: str) -> str:
    return re.sub(r"^[\d.\s]+", "", normalise(text).rstrip("…"))  # section numbers aside


def real_sections(doc: Document) -> tuple[int, int]:
    """(chunks whose section is a heading of the document's outline, chunks with a section),
    over a document with an outline: the section is the label's last part."""
    if not doc.outline:
        return 0, 0
    titles = {_heading_key(t) for t in doc.outline}
    titles.discard("")
    labelled = [_heading_key(c["section"].split(" / ")[-1]) for c in doc.chunks if c.get("section")]
    # A part of a title, or a title inside a longer label, counts when both have 6 characters or
    # more: an axis label "0.04" (its key empty once numbers are set aside) or a stray "s" is a
    # part of every title, and so counted as real until 2026-12-06.
    real = sum(1 for key in labelled if key in titles or len(key) >= 6 and any(
        len(k) >= 6 and (k in key or key in k) for k in titles))
    return real, len(labelled)


def measure(documents: list[Document]) -> dict[str, Any]:
    rows, totals = [], Counter()
    shares: dict[str, list[float]] = {}
    for doc in documents:
        cut, text_chunks = mid_sentence_cuts(doc.chunks, doc.running)
        left = running_left_inside(doc)
        dropped = over_removed(doc) if doc.running or doc.set_aside else []
        headless, holding = headless_table_chunks(doc)
        located = sum(1 for c in doc.chunks if any(b.get("bbox") for b in c.get("boxes") or []))
        row = {"document": doc.name, "language": doc.language, "scanned": doc.scanned, "pages": doc.pages,
               "chunks": len(doc.chunks), "text_chunks": text_chunks, "mid_sentence_at_page_break": cut,
               "running_lines": len(doc.running), "running_lines_in_chunks": len(left),
               "table_chunks": holding, "table_chunks_without_header": headless, "chunks_with_boxes": located,
               "open_at_page_break": open_at_page_break(doc.chunks),
               "set_aside": len(doc.set_aside), "over_removed": len(dropped),
               "examples_left_inside": [f"p.{ln.page}: {ln.text[:60]}" for ln in left[:3]],
               "examples_over_removed": [f"p.{ln.page}: {ln.text[:60]}" for ln in dropped[:5]]}
        rows.append(row)
        for k in ("pages", "chunks", "text_chunks", "mid_sentence_at_page_break", "running_lines",
                  "running_lines_in_chunks", "table_chunks", "table_chunks_without_header", "chunks_with_boxes",
                  "open_at_page_break", "set_aside", "over_removed"):
            totals[k] += row[k]
        kind = "scanned" if doc.scanned else "born_digital"  # an image-only copy against its original's tables
        for k in ("table_chunks", "table_chunks_without_header"):
            totals[f"{k}_{kind}"] += row[k]
        shares.setdefault(kind, []).extend(highlighted_shares(doc))
        real, labelled = real_sections(doc)
        totals[f"sections_in_outline_{kind}"] += real
        totals[f"sections_checked_{kind}"] += labelled
    share = lambda a, b: round(a / b, 4) if b else None  # noqa: E731
    summary = {
        **dict(totals),
        "mid_sentence_at_page_break_share": share(totals["mid_sentence_at_page_break"], totals["text_chunks"]),
        "open_at_page_break_share": share(totals["open_at_page_break"], totals["text_chunks"]),
        "table_chunks_without_header_share": share(totals["table_chunks_without_header"], totals["table_chunks"]),
        "chunks_with_boxes_share": share(totals["chunks_with_boxes"], totals["chunks"]),
    }
    for kind in ("born_digital", "scanned"):
        values = sorted(shares.get(kind, []))
        summary[f"highlighted_page_share_median_{kind}"] = round(statistics.median(values), 4) if values else None
        summary[f"sections_in_outline_share_{kind}"] = share(totals[f"sections_in_outline_{kind}"],
                                                             totals[f"sections_checked_{kind}"])
    return {"documents": rows, "totals": summary}


# --- OCR against Tesseract -------------------------------------------------------------------

def ensure_tesseract() -> None:
    """Debian's tesseract-ocr with Chinese, installed when missing (as ``make test`` installs
    Chromium); a clear error where it cannot be."""
    langs = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True).stdout \
        if shutil.which("tesseract") else ""
    if "chi_sim" in langs and "eng" in langs:
        return
    if os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        done = subprocess.run(["apt-get", "install", "-y", "-qq", "tesseract-ocr", "tesseract-ocr-chi-sim"],
                              capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode == 0:
            return
    raise KbError("the structure bench compares PP-OCR with Tesseract: apt-get install tesseract-ocr "
                  "tesseract-ocr-chi-sim (as root)")


def _tesseract(png: Path, language: str) -> str:
    done = subprocess.run(["tesseract", str(png), "stdout", "-l", TESSERACT_LANGS[language], "--dpi", "150"],
                          capture_output=True, text=True, env={**os.environ, "OMP_THREAD_LIMIT": "2"})
    if done.returncode != 0:
        raise KbError(f"tesseract failed: {done.stderr.strip()[-300:]}")
    return done.stdout


def _block_text(block: dict[str, Any]) -> str:
    if block.get("rows"):  # a table: its cells, row by row, not the Markdown pipes around them
        return "\n".join(" ".join(c for c in row if c) for row in block["rows"])
    return block.get("text", "")


def page_text(result: dict[str, Any]) -> str:
    """An OCR'd page's text: its blocks in reading order, one per line (a table's cells by row)."""
    return "\n".join(_block_text(b) for b in result.get("blocks") or []) or result.get("markdown", "")


def ocr_against_tesseract(scan: Path, original: Path, results: list[dict[str, Any]], language: str,
                          settings, tmp: Path) -> dict[str, Any]:
    """Edits and reference characters of PP-OCR (``results``, the engine's) and of Tesseract on the
    same rendered images, against ``original``'s text layer, word spaces counted.

    Tesseract reads the document's pages in one process (a list of images), as the engine's
    PP-OCR reads them with its models loaded: both warm. Its time is that process's, over the
    pages; PP-OCR's, the engine's page times (rendering included)."""
    import pymupdf
    from rapidfuzz.distance import Levenshtein

    from ocr_engine.api.text import normalise_spaced
    from ocr_engine.render import render_page

    out = Counter()
    pngs, references = [], []
    with pymupdf.open(scan) as scanned, pymupdf.open(original) as born:
        for result in results:
            n = result["page"]
            references.append(normalise_spaced(born[n - 1].get_text()))
            rendered = render_page(scanned[n - 1], settings.dpi, settings.max_pixels_per_page)
            png = tmp / f"{scan.stem}-{n}.png"
            pymupdf.Pixmap(pymupdf.csRGB, rendered.image.shape[1], rendered.image.shape[0], rendered.image.tobytes(),
                           False).save(png)
            pngs.append(png)
    listing = tmp / f"{scan.stem}.pages.txt"
    listing.write_text("\n".join(str(p) for p in pngs) + "\n")
    started = time.perf_counter()
    read = _tesseract(listing, language).split("\f")
    out["tesseract_seconds"] += time.perf_counter() - started
    for result, reference, text in zip(results, references, read + [""] * (len(results) - len(read))):
        out["ppocr_seconds"] += result.get("seconds") or 0.0
        out["pages"] += 1
        out["reference_chars"] += len(reference)
        out["ppocr_edits"] += Levenshtein.distance(normalise_spaced(page_text(result)), reference)
        out["tesseract_edits"] += Levenshtein.distance(normalise_spaced(text), reference)
    for png in pngs:
        png.unlink()
    listing.unlink()
    return dict(out)


# The scans the reading thresholds were fitted on (word spacing, layout, the cross-page rules
# were checked on their pages): their CER is reported apart from the other scans'. The others
# are no out-of-sample set either (module docstring): every corpus scan was read while OCR
# rules were written, and rules were found on xtableGallery's.
FIT_SCANS = {"fitdistrplus-paper2JSS.scan.pdf", "genetics_article.scan.pdf", "tb87fahmy.scan.pdf"}
# What the printed report says beside the figures that are self-consistency checks (issue 53)
SELF_CONSISTENCY = ("self-consistency check, not quality: reference from the code under test or rules "
                    "chosen on these pages; quality on unseen scans: kb bench scans")


def _cer_row(c: Counter) -> dict[str, Any]:
    ref = c["reference_chars"] or 1
    return {
        "pages": c["pages"], "reference_chars": c["reference_chars"],
        "ppocr_cer": round(c["ppocr_edits"] / ref, 4), "tesseract_cer": round(c["tesseract_edits"] / ref, 4),
        "ppocr_pages_per_s": round(c["pages"] / c["ppocr_seconds"], 3) if c["ppocr_seconds"] else None,
        "tesseract_pages_per_s": round(c["pages"] / c["tesseract_seconds"], 3) if c["tesseract_seconds"] else None,
    }


def _cer_table(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """CER by language; and by language and split: ``fit`` (the scans thresholds were fitted on,
    ``FIT_SCANS``) and ``other`` (the other corpus scans: also read while rules were written,
    so not out of sample)."""
    groups: dict[str, Counter] = {}
    for part in parts:
        numbers = {k: v for k, v in part.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        split = "fit" if part.get("document") in FIT_SCANS else "other"
        for key in (part["language"], f"{part['language']} {split}"):
            groups.setdefault(key, Counter()).update(numbers)
    return {key: _cer_row(c) for key, c in sorted(groups.items())}


# --- column order on two-column scans ------------------------------------------------------

PIECE_CHARS = 40  # about a line of a two-column paper's column (45-60 characters)
MIN_PIECE_CHARS = 12
MATCH_SCORE = 85.0


def in_order(places: list) -> int:
    """The length of the longest non-decreasing subsequence of ``places``: how many of them
    are read in order, the others being read out of place."""
    import bisect

    tails: list = []
    for place in places:
        i = bisect.bisect_right(tails, place)
        if i == len(tails):
            tails.append(place)
        else:
            tails[i] = place
    return len(tails)


def two_column(blocks: list[tuple[tuple[float, float, float, float], str]], width: float) -> bool:
    """Whether a text-layer page is set in two columns, by the rule the text-layer backend
    reads it column by column with (``textlayer.column_halves``)."""
    from ocr_engine.backends.textlayer import column_halves

    return column_halves(blocks, width) is not None


def two_column_pages(original: Path) -> dict[int, list[str]]:
    """The two-column pages of a born-digital PDF: page -> its blocks' text in the text layer's
    reading order."""
    import pymupdf

    from ocr_engine.backends.textlayer import extract_page

    out = {}
    with pymupdf.open(original) as doc:
        for page in doc:
            result = extract_page(page)
            blocks = [(b.bbox, b.text) for b in result.blocks]
            if two_column(blocks, page.rect.width):
                out[result.page] = [t for _, t in blocks]
    return out


def pieces(texts: list[str], size: int = PIECE_CHARS) -> list[str]:
    """OCR text cut into line-sized pieces: whole words, in order, ``size`` characters or more
    (a block's last piece may be shorter; CJK text, which has no spaces, is cut every ``size``)."""
    out = []
    for text in texts:
        current = ""
        for word in text.split():
            while len(word) > 2 * size:  # a run without spaces
                if current:
                    out.append(current)
                    current = ""
                out.append(word[:size])
                word = word[size:]
            current = f"{current} {word}" if current else word
            if len(normalise(current)) >= size:
                out.append(current)
                current = ""
        if current:
            out.append(current)
    return out


def column_order(ocr: list[str], reference: list[str]) -> dict[str, int]:
    """How many of the OCR pieces ``ocr`` (in the order read) are read in ``reference``'s order
    (the original's blocks, in the text layer's reading order): ``pieces``, ``matched`` (12
    characters or more, found in a block), ``in_order`` (the longest run whose places go up)."""
    from rapidfuzz import fuzz

    blocks = [normalise(t) for t in reference]
    places = []
    for piece in ocr:
        needle = normalise(piece)
        if len(needle) < MIN_PIECE_CHARS:
            continue
        best = None
        for i, block in enumerate(blocks):
            if not block:
                continue
            if len(block) >= len(needle):
                found = fuzz.partial_ratio_alignment(needle, block, score_cutoff=MATCH_SCORE)
                score, start = (found.score, found.dest_start) if found is not None else (0.0, 0)
            else:  # a short block (a heading) is matched whole, not found inside a longer piece
                score, start = fuzz.ratio(needle, block), 0
            if score >= MATCH_SCORE and (best is None or score > best[0]):
                best = (score, (i, start))
        if best is not None:
            places.append(best[1])
    return {"pieces": len(ocr), "matched": len(places), "in_order": in_order(places)}


def scan_column_order(original: Path, results: list[dict[str, Any]]) -> dict[str, int]:
    """``column_order`` over the two-column pages of a scanned copy, pooled: the engine's
    ``results`` against ``original``'s text layer."""
    reference = two_column_pages(original)
    out = Counter()
    for result in results:
        if result["page"] in reference:
            read = [b.get("text", "") for b in result.get("blocks") or []]
            out.update(column_order(pieces(read), reference[result["page"]]))
            out["pages"] += 1
    return dict(out)


# --- the run ---------------------------------------------------------------------------------

def bench_structure(dest: Path, echo: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
                    ) -> dict[str, Any]:
    from kb_dev.corpus import fetch
    from kb.embedding import make_embedder
    from kb.pipeline.index import chunk_pages
    from kb.reading import read_document
    from kb.settings import PipelineSettings
    from ocr_engine.engine import OcrEngine

    ensure_tesseract()
    files = fetch(dest, echo=echo)
    settings = PipelineSettings()
    embedder = make_embedder(settings)
    engine = OcrEngine()
    from kb.retrieval import language as language_of
    from kb_dev.samples import SAMPLES as BORN_DIGITAL
    from kb_dev.samples import SCANNED_SAMPLES

    documents, cer_parts, order_parts = [], [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(f.path, f.document.language, f.scanned, dest / "born-digital" / f.document.file) for f in files]
        jobs += [(SAMPLES / name, language_of(title), False, SAMPLES / name) for name, (title, _) in BORN_DIGITAL.items()]
        jobs += [(SAMPLES / name, language_of(title), True, None) for name, (title, _) in SCANNED_SAMPLES.items()]
        for path, language, scanned, original in jobs:
            t0 = time.perf_counter()
            read = engine.parse_pdf(path.read_bytes())
            results = [r.as_dict() for r in read]
            chunks = [{"text": c.text, "pages": c.pages, "kind": c.kind.value, "section": c.section,
                       "boxes": [b.as_dict() for b in c.boxes]} for c in chunk_pages(read, embedder, settings)]
            set_aside = [Line(r.page, r.bbox, r.text) for r in read_document([p for p in read if not p.is_failed]).running]
            doc = Document(path.name, language, scanned, len(results), chunks,
                           sizes={r["page"]: (r.get("width") or 0.0, r.get("height") or 0.0) for r in results},
                           set_aside=set_aside)
            if original is not None:
                doc.outline = outline_titles(original)
                doc.running, doc.bodies = running_lines(original)
                doc.tables = ruled_table_rows(original)
            documents.append(doc)
            if scanned and original is not None:
                order = scan_column_order(original, results)
                if order.get("pages"):
                    order_parts.append({"document": path.name, **order})
                cer_parts.append({"language": language, "document": path.name,
                                  **ocr_against_tesseract(path, original, results, language, engine.settings, Path(tmp))})
            echo(f"{path.name}: {len(results)} pages, {len(chunks)} chunks ({time.perf_counter() - t0:.1f} s)")
    report = measure(documents)
    report["cer"] = _cer_table(cer_parts)
    report["column_order"] = column_order_table(order_parts)
    report["seconds"] = round(time.perf_counter() - started, 1)
    # the figures that are self-consistency checks, not quality (module docstring)
    report["self_consistency"] = ["column_order", "totals.table_chunks_without_header",
                                  "totals.sections_in_outline_share_scanned", "cer (the fit / other split)"]
    report["table"] = format_table(report)
    return report


def column_order_table(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """``column_order`` pooled over the scanned copies' two-column pages, and by document."""
    share = lambda c: round(c["in_order"] / c["matched"], 4) if c.get("matched") else None  # noqa: E731
    total = Counter()
    for part in parts:
        total.update({k: v for k, v in part.items() if isinstance(v, int)})
    return {**{k: total[k] for k in ("pages", "pieces", "matched", "in_order")}, "share": share(total),
            "documents": [{**part, "share": share(part)} for part in parts]}


def bench_column_order(dest: Path, echo: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
                       ) -> dict[str, Any]:
    """``column_order`` alone, as ``bench_structure`` measures it, reading only the scanned
    copies' two-column pages (about a minute, where the whole bench takes many): for trying
    a change to the reading order."""
    from kb_dev.corpus import fetch
    from ocr_engine.engine import OcrEngine

    engine = OcrEngine()
    parts = []
    for f in fetch(dest, echo=echo):
        if not f.scanned:
            continue
        original = dest / "born-digital" / f.document.file
        results = [engine.parse_pdf(f.path, n, n)[0].as_dict() for n in sorted(two_column_pages(original))]
        out = scan_column_order(original, results)
        if out.get("pages"):
            parts.append({"document": f.path.name, **out})
            echo(f"{f.path.name}: {out['pages']} two-column pages, {out['in_order']} of {out['matched']} in order")
    return column_order_table(parts)


def format_table(report: dict[str, Any]) -> str:
    t = report["totals"]
    lines = [
        f"documents {len(report['documents'])}, pages {t['pages']}, chunks {t['chunks']} ({t['text_chunks']} text)",
        f"chunks ending mid-sentence at a page break  {t['mid_sentence_at_page_break']:>6} "
        f"({100 * (t['mid_sentence_at_page_break_share'] or 0):.2f} % of text chunks)",
        f"chunks ending open at a page break          {t.get('open_at_page_break', 0):>6} "
        f"({100 * (t.get('open_at_page_break_share') or 0):.2f} %; no closing punctuation, whatever follows)",
        f"running header/footer lines left in chunks  {t['running_lines_in_chunks']:>6} "
        f"(of {t['running_lines']} running lines)",
        f"lines set aside as running, not running     {t.get('over_removed', 0):>6} "
        f"(of {t.get('set_aside', 0)} set aside; examples per document in --json)",
        f"table chunks without their header row       {t['table_chunks_without_header']:>6} "
        f"(of {t['table_chunks']} chunks holding table rows; born-digital "
        f"{t.get('table_chunks_without_header_born_digital', 0)} of {t.get('table_chunks_born_digital', 0)}, "
        f"image-only copies {t.get('table_chunks_without_header_scanned', 0)} of {t.get('table_chunks_scanned', 0)}; "
        f"tables as ocr_engine.api.tables finds them: {SELF_CONSISTENCY})",
        f"chunks with boxes                           {t['chunks_with_boxes']:>6} "
        f"({100 * (t['chunks_with_boxes_share'] or 0):.1f} %)",
    ]
    for kind, label in (("born_digital", "born-digital"), ("scanned", "image-only copies")):
        if t.get(f"highlighted_page_share_median_{kind}") is not None:
            lines.append(f"a hit's highlight, median share of its page, {label}: "
                         f"{t[f'highlighted_page_share_median_{kind}']:.4f}; sections that are headings of the "
                         f"outline: {t[f'sections_in_outline_{kind}']} of {t[f'sections_checked_{kind}']} "
                         f"({100 * (t[f'sections_in_outline_share_{kind}'] or 0):.1f} %"
                         + (f"; heading rules derived on these pages: {SELF_CONSISTENCY})" if kind == "scanned"
                            else ")"))
    for language, c in report.get("cer", {}).items():  # "en", then "en fit" and "en other"
        lines.append(f"CER with spaces, {language} scans ({c['pages']} pages): PP-OCR {c['ppocr_cer']:.4f} "
                     f"({c['ppocr_pages_per_s']} pages/s), Tesseract {c['tesseract_cer']:.4f} "
                     f"({c['tesseract_pages_per_s']} pages/s)")
    if report.get("cer"):
        lines.append("  (CER 'fit': the scans the thresholds were fitted on; 'other': the other corpus scans, "
                     "read while OCR rules were written too, so neither is out of sample: kb bench scans)")
    order = report.get("column_order")
    if order and order["matched"]:
        lines.append(f"column_order, two-column scans ({order['pages']} pages): {order['share']:.4f} of "
                     f"{order['matched']} matched OCR lines in the text layer's order ({order['pieces']} read; "
                     f"the pages XY-cut was tuned on, against the project's text-layer reader: {SELF_CONSISTENCY})")
    return "\n".join(lines)
