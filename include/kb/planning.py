"""Planning a document: classify its pages and cut them into page ranges.

A range is the unit the DAG fans out over (one mapped task each, on the GPU pool). It
must fit every limit its reader has: pages and bytes per request, the engine's token
budget, and time (its expected seconds well inside the request timeout). ``RangeCaps``
gathers those limits with the pipeline's own fan-out caps; ``cut_ranges`` cuts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pymupdf

from kb.limits import RangeLimits
from kb.settings import PipelineSettings
from ocr_engine.api.pdf import text_layer_pages

TEXT = "text"
SCANNED = "scanned"


def classify_pages(doc: pymupdf.Document, min_chars: int) -> list[str]:
    """Per page, ``text`` when its text layer is usable, else ``scanned``, by the engine's own
    rule (``ocr_engine.api.pdf.text_layer_pages``). Given the ``min_chars`` the reader
    publishes (``RangeLimits.min_text_chars``), the pages marked scanned are exactly those
    the engine's ``auto`` route sends to its OCR backend (tests/ocr_engine/test_registry.py
    checks it on mixed pages)."""
    pages = list(range(1, doc.page_count + 1))
    text = text_layer_pages(doc, pages, min_chars)
    return [TEXT if n in text else SCANNED for n in pages]


@dataclass(frozen=True)
class RangeCaps:
    text_pages: int  # pages of a range whose pages all have a text layer
    ocr_pages: int  # pages of a range with at least one page to OCR
    seconds: float | None  # expected seconds of one range, at most
    text_seconds: float  # expected seconds of a text-layer page
    scanned_seconds: float  # expected seconds of a page to OCR

    @classmethod
    def of(cls, settings: PipelineSettings, limits: RangeLimits) -> "RangeCaps":
        def least(*values: int | None) -> int:
            return max(1, min(v for v in values if v is not None))

        return cls(
            text_pages=least(settings.max_textlayer_pages_per_range, limits.max_pages),
            ocr_pages=least(settings.max_pages_per_range, limits.max_pages, limits.max_pages_per_call,
                            limits.max_pages_kv),
            seconds=limits.timeout_s * settings.range_time_share if limits.timeout_s else None,
            text_seconds=limits.text_seconds_per_page,
            scanned_seconds=limits.scanned_seconds_per_page,
        )

    def page_seconds(self, kind: str) -> float:
        return self.scanned_seconds if kind == SCANNED else self.text_seconds

    def fits(self, pages: int, scanned: bool, seconds: float) -> bool:
        """Whether a range of ``pages`` (any of them ``scanned``) expected to take ``seconds`` fits."""
        return pages <= (self.ocr_pages if scanned else self.text_pages) and (
            self.seconds is None or seconds <= self.seconds)


def cut_ranges(kinds: list[str], caps: RangeCaps) -> list[tuple[int, int]]:
    """1-based inclusive (first, last) ranges covering every page exactly once, each one
    fitting ``caps`` (a single page always counts as fitting: it cannot be cut further).

    Greedy from the first page; a document of one kind of page is then cut evenly into
    as many ranges, so the last one is not a sliver and the ranges finish together.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(kinds):
        end, scanned, seconds = start + 1, kinds[start] == SCANNED, caps.page_seconds(kinds[start])
        while end < len(kinds):
            more_scanned, more_seconds = scanned or kinds[end] == SCANNED, seconds + caps.page_seconds(kinds[end])
            if not caps.fits(end - start + 1, more_scanned, more_seconds):
                break
            end, scanned, seconds = end + 1, more_scanned, more_seconds
        spans.append((start + 1, end))
        start = end
    if len(set(kinds)) == 1 and spans:
        return split_ranges(len(kinds), math.ceil(len(kinds) / len(spans)))
    return spans


def split_ranges(page_count: int, max_pages_per_range: int) -> list[tuple[int, int]]:
    """1-based inclusive (first, last) ranges of at most ``max_pages_per_range``, evenly cut."""
    if page_count <= 0:
        return []
    n = math.ceil(page_count / max_pages_per_range)
    size = math.ceil(page_count / n)
    return [(first, min(first + size - 1, page_count)) for first in range(1, page_count + 1, size)]
