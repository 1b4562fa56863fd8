"""The ``textlayer`` backend: a born-digital page's own text, as Markdown with blocks.

Headings are told apart from body text by font size relative to the page's body
size; bare page numbers are dropped so they do not pollute chunks.
"""

from __future__ import annotations

import re
import statistics
import time
import unicodedata

import pymupdf

from ocr_engine.schema import EMPTY, OK, Block, PageResult, count_chars

_PAGE_NUMBER = re.compile(r"^\s*(page\s*)?\d{1,4}(\s*/\s*\d{1,4})?\s*$", re.IGNORECASE)


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


def usable_text(text: str, min_chars: int) -> bool:
    """Enough characters, and mostly real ones (not replacement or control garbage)."""
    chars = [c for c in text if not c.isspace()]
    if len(chars) < min_chars:
        return False
    good = sum(1 for c in chars if unicodedata.category(c)[0] in "LNPS" and c != "\ufffd")
    return good / len(chars) >= 0.85


def _merge_paragraph_lines(raw, body: float):
    """Rejoin lines of one paragraph that MuPDF returned as separate blocks.

    Two blocks belong together when they share a font size and left edge and the gap
    between them is smaller than a fraction of a line: paragraph breaks are wider.
    """
    merged: list[tuple[tuple[float, float, float, float], str, float]] = []
    for bbox, text, size in raw:
        if merged:
            pbox, ptext, psize = merged[-1]
            gap = bbox[1] - pbox[3]
            if body and abs(size - psize) < 0.5 and -1 <= gap < body * 0.6 and abs(bbox[0] - pbox[0]) < body * 2:
                joined = _join_lines([ptext, text])
                box = (min(pbox[0], bbox[0]), pbox[1], max(pbox[2], bbox[2]), bbox[3])
                merged[-1] = (box, joined, size)
                continue
        merged.append((bbox, text, size))
    return merged


def extract_page(page: pymupdf.Page) -> PageResult:
    started = time.perf_counter()
    data = page.get_text("dict", sort=True, flags=pymupdf.TEXTFLAGS_TEXT)
    raw: list[tuple[tuple[float, float, float, float], str, float]] = []
    sizes: list[float] = []
    for b in data["blocks"]:
        if b.get("type") != 0:
            continue
        lines, block_size = [], 0.0
        for line in b["lines"]:
            text = "".join(span["text"] for span in line["spans"])
            for span in line["spans"]:
                if span["text"].strip():
                    sizes.extend([span["size"]] * len(span["text"].strip()))
                    block_size = max(block_size, span["size"])
            lines.append(text)
        text = _join_lines(lines)
        if text and not _PAGE_NUMBER.match(text):
            raw.append((tuple(round(v, 2) for v in b["bbox"]), text, block_size))
    body = statistics.median(sizes) if sizes else 0.0
    raw = _merge_paragraph_lines(raw, body)
    blocks, parts = [], []
    for bbox, text, size in raw:
        if body and size >= body * 1.25 and len(text) <= 200:
            level = "#" if size >= body * 1.6 else "##"
            blocks.append(Block("heading", bbox, text))
            parts.append(f"{level} {text}")
        else:
            blocks.append(Block("text", bbox, text))
            parts.append(text)
    markdown = "\n\n".join(parts)
    chars = count_chars(markdown)
    return PageResult(
        page=page.number + 1,
        markdown=markdown,
        blocks=blocks,
        backend="textlayer",
        status=OK if chars else EMPTY,
        chars=chars,
        seconds=round(time.perf_counter() - started, 4),
    )


def extract_range(doc: pymupdf.Document, first: int, last: int) -> list[PageResult]:
    """Pages ``first``..``last`` (1-based, inclusive), one page loaded at a time."""
    return [extract_page(doc.load_page(n - 1)) for n in range(first, last + 1)]
