"""Structure-aware chunking with page provenance.

Input is each page's Markdown. Headings and page breaks start new chunks (so a hit
cites the page it came from, not a span of pages), and headings give every chunk its
section; paragraphs are packed up to a token limit measured with the embedder's own
tokenizer; a paragraph longer than the limit is split at sentence ends (Latin and
CJK punctuation), and a sentence longer than the limit at token windows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

CountTokens = Callable[[str], int]

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+")


@dataclass
class Chunk:
    index: int
    text: str
    pages: list[int]
    section: str | None
    tokens: int

    def embedding_text(self) -> str:
        """What is embedded: the section title gives short chunks their context."""
        return f"{self.section}\n{self.text}" if self.section else self.text


@dataclass
class _Unit:
    page: int
    text: str
    tokens: int
    starts_paragraph: bool = True


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


def chunk_pages(
    pages: Iterable[tuple[int, str]],
    count_tokens: CountTokens,
    *,
    max_tokens: int = 200,
    overlap_sentences: int = 1,
) -> list[Chunk]:
    """``pages`` is (1-based page number, Markdown) in reading order."""
    chunks: list[Chunk] = []
    section: str | None = None
    title: str | None = None
    current = _Open()

    def section_label() -> str | None:
        # A heading the text layer got wrong can be a whole paragraph: the label is
        # clipped so that it never takes more than a quarter of a chunk.
        label = " / ".join(x for x in (title, section) if x) or None
        return _clip(label, count_tokens, max_tokens // 4) if label else None

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
        label = section_label()
        chunks.append(
            Chunk(
                index=len(chunks),
                text=text,
                pages=sorted({u.page for u in current.units}),
                section=label,
                tokens=current.tokens + (count_tokens(label) if label else 0),
            )
        )
        tail = current.units[-overlap_sentences:] if carry_overlap and overlap_sentences else []
        # An overlap only helps if it is small next to the chunk it joins.
        tail = [u for u in tail if u.tokens <= max_tokens // 4]
        current = _Open(list(tail))

    for page_no, markdown in pages:
        close(carry_overlap=False)
        for para in (p.strip() for p in markdown.split("\n\n")):
            if not para:
                continue
            m = _HEADING.match(para)
            if m:
                close(carry_overlap=False)
                current = _Open()
                if len(m.group(1)) == 1:
                    title, section = m.group(2).strip(), None
                else:
                    section = m.group(2).strip()
                continue
            budget = max_tokens - (count_tokens(section_label() or "") if section_label() else 0)
            budget = max(budget, max_tokens // 2)
            n = count_tokens(para)
            units = [_Unit(page_no, para, n)] if n <= budget else [
                _Unit(page_no, s, count_tokens(s), starts_paragraph=(i == 0))
                for i, s in enumerate(_split_long(para, count_tokens, budget))
            ]
            for unit in units:
                if current.units and current.tokens + unit.tokens > budget:
                    close(carry_overlap=True)
                    if current.tokens + unit.tokens > budget:
                        current = _Open()
                current.units.append(unit)
    close(carry_overlap=False)
    return chunks
