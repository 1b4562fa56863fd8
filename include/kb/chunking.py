"""Structure-aware chunking of a document as ``kb.reading`` reads it, with locations.

Headings start new chunks and give every chunk its section. Paragraphs are packed up to a
token limit measured with the embedder's own tokenizer; a paragraph longer than the limit
is split at sentence ends (Latin and CJK punctuation), and a sentence longer than the limit
at token windows. A page break closes a chunk (so a hit cites the page it came from) unless
a paragraph runs over it: then the chunk spans both pages. A table is chunked by rows, and
every chunk of it states the table's caption and starts with its header row.

Each chunk keeps its boxes (a page and a box on it, from the blocks its text came from):
what the search page draws on the page image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable

from kb.reading import Box, Piece, PieceKind, Reading, Row
from ocr_engine.api.tables import table_markdown

# Part of the index signature (``kb.pipeline.signature``): changing how documents are read
# or chunked re-chunks every indexed document once, from its stored page results.
# 2: table chunks state their caption and group row; 3: numbered headings starting pages kept,
# tall OCR lines that do not read as headings are text; 4: a caption is never the end of a
# sentence over a page break, a table's part below a group row keeps its caption, and a
# section is labelled with the headings above it ("2 Gallery / 2.6 prcomp"); 5: a table's
# parts below its group rows are rows of it again; 6: so are an OCR table's parts whose
# columns stand over one another, and an OCR'd document's first heading is its title
CHUNKING_VERSION = "reader-6"

CountTokens = Callable[[str], int]

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+")


class ChunkKind(StrEnum):
    TEXT = "text"
    TABLE = "table"


@dataclass
class Chunk:
    index: int
    text: str
    pages: list[int]
    section: str | None
    tokens: int
    boxes: list[Box] = field(default_factory=list)
    kind: ChunkKind = ChunkKind.TEXT

    def embedding_text(self) -> str:
        """What is embedded: the section title gives short chunks their context."""
        return f"{self.section}\n{self.text}" if self.section else self.text


@dataclass
class _Unit:
    text: str
    tokens: int
    boxes: list[Box]
    starts_paragraph: bool = True

    @property
    def pages(self) -> set[int]:
        return {b.page for b in self.boxes}


@dataclass
class _Open:
    units: list[_Unit] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(u.tokens for u in self.units)


def _clip(text: str, count: CountTokens, limit: int) -> str:
    """The longest prefix of ``text`` (plus "…") within ``limit`` tokens."""
    if count(text) <= limit:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # binary search on characters: counting is the expensive part
        mid = (lo + hi + 1) // 2
        if count(text[:mid] + "…") <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + "…"


def _char_windows(word: str, count: CountTokens, limit: int) -> list[str]:
    out = []
    while word:
        piece = _clip(word, count, limit).removesuffix("…") or word[:1]
        out.append(piece)
        word = word[len(piece):]
    return out


def _split_long(text: str, count: CountTokens, limit: int) -> list[str]:
    """Sentences first; a sentence still over the limit is cut into equal windows."""
    pieces: list[str] = []
    for sentence in (s.strip() for s in _SENTENCE_END.split(text)):
        if not sentence:
            continue
        if count(sentence) <= limit:
            pieces.append(sentence)
            continue
        words = sentence.split(" ") if " " in sentence else list(sentence)
        sep = " " if " " in sentence else ""
        # a "word" can itself be over the limit (a long path, CJK text between two spaces)
        words = [piece for w in words for piece in (_char_windows(w, count, limit) if count(w) > limit else [w])]
        window: list[str] = []
        for w in words:
            if window and count(sep.join(window + [w])) > limit:
                pieces.append(sep.join(window))
                window = []
            window.append(w)
        if window:
            pieces.append(sep.join(window))
    return pieces


def _joiner(a: str, b: str) -> str:
    cjk = lambda ch: "\u3000" <= ch <= "\u9fff"  # noqa: E731
    return "" if a and b and (cjk(a[-1]) or cjk(b[0])) else " "


def _located(piece: Piece, parts: list[str]) -> list[tuple[str, list[Box]]]:
    """Each part of ``piece.text`` (in order) with the boxes of the text it came from."""
    out, cursor = [], 0
    for part in parts:
        at = piece.text.find(part, cursor)
        at = cursor if at < 0 else at
        cursor = at + len(part)
        out.append((part, piece.boxes_between(at, cursor)))
    return out


def _dedupe(boxes: list[Box]) -> list[Box]:
    """Each box once, and consecutive line boxes of one column (an OCR'd block's lines) as
    one box: what a chunk covers in that column, not the whole block, in few boxes."""
    out: list[Box] = []
    for box in dict.fromkeys(boxes):
        prev = out[-1] if out else None
        if prev is not None and _same_run(prev, box):
            a, b = prev.bbox, box.bbox
            out[-1] = Box(box.page, (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])))
        else:
            out.append(box)
    return out


def _same_run(a: Box, b: Box) -> bool:
    """``b`` is the line after ``a`` in the same column: same page, overlapping across most of
    the narrower one, and below it by less than a line's height."""
    if a.page != b.page or a.bbox is None or b.bbox is None:
        return False
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = a.bbox, b.bbox
    overlap = min(ax1, bx1) - max(ax0, bx0)
    line = min(ay1 - ay0, by1 - by0)
    return overlap > 0.5 * min(ax1 - ax0, bx1 - bx0) and -0.5 * line <= by0 - ay1 <= line


def _group_row(cells: list[str]) -> bool:
    """A row that names the rows below it ("Correct calculations:"): only its first cell filled."""
    return len(cells) >= 3 and len(re.findall(r"\w", cells[0])) >= 3 and not any(c.strip() for c in cells[1:])


def _table_parts(piece: Piece, count_tokens: CountTokens, limit: int) -> list[tuple[str, list[Box]]]:
    """A table as Markdown tables of as many rows as fit ``limit``, each stating the table's
    caption and led by its header row, and by the group row its first rows fall under (a
    slice that starts below "Correct calculations:" would otherwise not say what its rows
    are). The first part's boxes include the header's; a caption is stated, and highlighted
    where it stands, in its own text chunk."""
    header = piece.header.cells if piece.header else []
    caption = _clip(piece.caption, count_tokens, limit // 4) if piece.caption else ""
    limit = max(limit - (count_tokens(caption) if caption else 0), limit // 2)
    slices: list[tuple[Row | None, list[Row]]] = []  # (the group row repeated on top, the rows)
    lead: Row | None = None
    rows: list[Row] = []
    group: Row | None = None
    for row in piece.rows:
        names_rows = _group_row(row.cells)
        above = [header, *([lead.cells] if lead else []), *[r.cells for r in rows + [row]]]
        if rows and count_tokens(table_markdown(above)) > limit:
            if rows[-1] is group:
                rows.pop()  # a group row goes with the rows it names, not alone at a slice's foot
            if rows:
                slices.append((lead, rows))
            lead, rows = (None if names_rows else group), []
        rows.append(row)
        if names_rows:
            group = row
    if rows:
        slices.append((lead, rows))
    parts = []
    for i, (lead, rows) in enumerate(slices):
        text = _clip(table_markdown([header, *([lead.cells] if lead else []), *[r.cells for r in rows]]),
                     count_tokens, limit)
        head = [piece.header.box] if piece.header and i == 0 else []
        owed = [lead.box] if lead and (i == 0 or lead not in slices[i - 1][1]) else []
        parts.append((f"{caption}\n\n{text}" if caption else text, head + owed + [r.box for r in rows]))
    return parts


def chunk_document(
    reading: Reading,
    count_tokens: CountTokens,
    *,
    max_tokens: int = 200,
    overlap_sentences: int = 1,
) -> list[Chunk]:
    chunks: list[Chunk] = []
    sections: dict[int, str] = {}  # the headings a chunk falls under, by level: its section path
    title: str | None = None
    current = _Open()

    def section_label() -> str | None:
        # A heading the text layer got wrong can be a whole paragraph: the label is
        # clipped so that it never takes more than a quarter of a chunk.
        label = " / ".join(x for x in (title, *(sections[k] for k in sorted(sections))) if x) or None
        return _clip(label, count_tokens, max_tokens // 4) if label else None

    def budget() -> int:
        label = section_label()
        return max(max_tokens - (count_tokens(label) if label else 0), max_tokens // 2)

    def emit(text: str, tokens: int, boxes: list[Box], kind: ChunkKind) -> None:
        label = section_label()
        boxes = _dedupe(boxes)
        chunks.append(Chunk(index=len(chunks), text=text, pages=sorted({b.page for b in boxes}), section=label,
                            tokens=tokens + (count_tokens(label) if label else 0), boxes=boxes, kind=kind))

    def close(carry_overlap: bool) -> None:
        nonlocal current
        if not current.units:
            return
        text = ""
        for u in current.units:
            if not text:
                text = u.text
            else:
                text += ("\n\n" if u.starts_paragraph else _joiner(text, u.text)) + u.text
        emit(text, current.tokens, [b for u in current.units for b in u.boxes], ChunkKind.TEXT)
        tail = current.units[-overlap_sentences:] if carry_overlap and overlap_sentences else []
        # An overlap only helps if it is small next to the chunk it joins.
        tail = [u for u in tail if u.tokens <= max_tokens // 4]
        current = _Open(list(tail))

    for piece in reading.pieces:
        if piece.kind == PieceKind.HEADING:
            close(carry_overlap=False)
            current = _Open()
            if piece.level <= 1:
                title, sections = piece.text.strip(), {}
            else:  # "2 Gallery / 2.6 prcomp": a subsection under its section, which it ends
                sections = {k: v for k, v in sections.items() if k < piece.level}
                sections[piece.level] = piece.text.strip()
            continue
        last_pages = current.units[-1].pages if current.units else set()
        if last_pages and piece.first_page > max(last_pages):
            close(carry_overlap=False)  # a page break that no paragraph runs over
        if piece.kind == PieceKind.TABLE:
            close(carry_overlap=False)
            current = _Open()
            for text, boxes in _table_parts(piece, count_tokens, budget()):
                emit(text, count_tokens(text), boxes, ChunkKind.TABLE)
            continue
        room = budget()
        n = count_tokens(piece.text)
        parts = [piece.text] if n <= room else _split_long(piece.text, count_tokens, room)
        units = [_Unit(text, n if len(parts) == 1 else count_tokens(text), boxes, starts_paragraph=(i == 0))
                 for i, (text, boxes) in enumerate(_located(piece, parts))]
        for unit in units:
            if current.units and current.tokens + unit.tokens > room:
                close(carry_overlap=True)
                if current.tokens + unit.tokens > room:
                    current = _Open()
            current.units.append(unit)
    close(carry_overlap=False)
    return chunks
