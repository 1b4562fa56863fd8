"""The ``auto`` route's one rule: which pages have a usable text layer (the rest go to OCR).

The engine's registry routes a request's pages by it and the pipeline's planner classifies
pages by it, with the same ``min_chars`` (the engine publishes it), so both count the same
pages as scanned.
"""

from __future__ import annotations

import pymupdf

from ocr_engine.backends.textlayer import usable_text


def text_layer_pages(doc: pymupdf.Document, pages: list[int], min_chars: int) -> set[int]:
    """The 1-based ``pages`` whose text layer is usable."""
    return {n for n in pages if usable_text(doc.load_page(n - 1).get_text("text"), min_chars)}
