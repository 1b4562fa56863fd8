"""Planning a document: classify its pages and cut them into page ranges.

A range is the unit the DAG fans out over (one mapped task each, on the GPU pool).
Until the OCR engine's token budget is wired in, ranges are cut at a page cap; the
cut keeps ranges even, so the last one is not a sliver.
"""

from __future__ import annotations

import math

import pymupdf

from ocr_engine.router import OCR, route

TEXT = "text"
SCANNED = "scanned"


def classify_pages(doc: pymupdf.Document, min_chars: int) -> list[str]:
    """Per page, ``text`` when its text layer is usable, else ``scanned``: the engine's
    own routing rule, so the plan and the extract tasks agree on which pages need OCR."""
    routes = route(doc, list(range(1, doc.page_count + 1)), min_chars)
    return [SCANNED if routes[n] == OCR else TEXT for n in sorted(routes)]


def split_ranges(page_count: int, max_pages_per_range: int) -> list[tuple[int, int]]:
    """1-based inclusive (first, last) ranges covering every page exactly once."""
    if page_count <= 0:
        return []
    n = math.ceil(page_count / max_pages_per_range)
    size = math.ceil(page_count / n)
    return [(first, min(first + size - 1, page_count)) for first in range(1, page_count + 1, size)]
