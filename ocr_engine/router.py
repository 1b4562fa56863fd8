"""The ``auto`` router: per page, the text layer when it is usable, else OCR."""

from __future__ import annotations

import pymupdf

from ocr_engine.backends.textlayer import usable_text

TEXTLAYER = "textlayer"
OCR = "ocr"


def route(doc: pymupdf.Document, pages: list[int], min_chars: int) -> dict[int, str]:
    """``{page: "textlayer" | "ocr"}`` for 1-based ``pages``."""
    return {
        n: TEXTLAYER if usable_text(doc.load_page(n - 1).get_text("text"), min_chars) else OCR for n in pages
    }
