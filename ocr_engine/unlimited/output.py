"""Turning Unlimited OCR's generated text into pages, blocks and quality flags.

Multi-page output starts each page with ``<PAGE>``; within a page every region is
``<|det|>type [x1, y1, x2, y2]<|/det|>text`` with boxes normalised to 0..999.
"""

from __future__ import annotations

import re

from ocr_engine.api.pages import Block
from ocr_engine.api.tables import parse_table_text, table_block

PAGE_SEPARATOR = "<PAGE>"
_DETECTION = re.compile(r"<\|det\|>(\S+) \[(\d+), (\d+), (\d+), (\d+)\]<\|/det\|>(.*?)(?=<\|det\|>|<PAGE>|\Z)", re.DOTALL)
_MARKDOWN = {"title": "## {}", "sub_title": "### {}", "formula": "$$\n{}\n$$"}
_LEVELS = {"title": 2, "sub_title": 3}
_SKIP = {"image", "figure", "seal"}


def split_pages(text: str, expected: int) -> list[str]:
    """Page texts in order; a single-page call has no separator."""
    if expected == 1 and PAGE_SEPARATOR not in text:
        return [text]
    parts = text.split(PAGE_SEPARATOR)
    if parts and not parts[0].strip():
        parts = parts[1:]
    return parts


def parse_blocks(page_text: str, page_width: float, page_height: float) -> list[Block]:
    blocks = []
    for kind, x1, y1, x2, y2, body in _DETECTION.findall(page_text):
        sx, sy = page_width / 999.0, page_height / 999.0
        bbox = (int(x1) * sx, int(y1) * sy, int(x2) * sx, int(y2) * sy)
        rows = parse_table_text(body) if kind == "table" else []
        if rows:  # the model writes tables as HTML: cells, so a table on the next page can join it
            blocks.append(table_block(rows, bbox))
        else:
            blocks.append(Block(kind, tuple(round(v, 2) for v in bbox), body.strip(), level=_LEVELS.get(kind)))
    if not blocks and page_text.strip():
        # Output without detection tags is plain text for the whole page.
        blocks.append(Block("text", (0.0, 0.0, page_width, page_height), _strip_tags(page_text)))
    return blocks


def to_markdown(blocks: list[Block]) -> str:
    parts = []
    for b in blocks:
        if b.type in _SKIP or not b.text:
            continue
        parts.append(_MARKDOWN.get(b.type, "{}").format(b.text))
    return "\n\n".join(parts)


def _strip_tags(text: str) -> str:
    return re.sub(r"<\|/?[a-z_]+\|>", "", text).strip()
