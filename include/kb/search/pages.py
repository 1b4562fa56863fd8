"""A page image from the exact stored version of a document: the source behind a hit, with
the hit's boxes drawn on it when asked."""

from __future__ import annotations

from typing import Sequence

from kb.errors import KbError, ObjectMissing
from kb.ledger_db import Ledger
from kb.objectstore import ObjectStore


class PageNotFound(KbError):
    """An unknown document, version or page."""

    code = "not_found"

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


# What a highlight looks like: a translucent amber fill under an orange frame.
HIGHLIGHT_FILL = (1.0, 0.85, 0.0)
HIGHLIGHT_FRAME = (0.9, 0.45, 0.0)
HIGHLIGHT_OPACITY = 0.35


def render_png(store: ObjectStore, ledger: Ledger, doc_id: str, page: int, version: str | None,
               dpi: int, max_pixels: int, boxes: Sequence[Sequence[float]] = ()) -> bytes:
    """Page ``page`` (1-based) of ``doc_id`` at ``version`` (default: the indexed one) as PNG,
    at ``dpi`` unless that would exceed ``max_pixels``, whatever size the page claims, with
    ``boxes`` (x0, y0, x1, y1 in points of the displayed page) highlighted."""
    import pymupdf

    from ocr_engine.documents import close_pdf, open_pdf
    from ocr_engine.errors import InputError
    from ocr_engine.render import zoom_for

    entry = ledger.get(doc_id)
    if entry is None:
        raise PageNotFound(f"no document {doc_id}", "unknown_document")
    version = version or entry.indexed_version_id or entry.version_id
    try:
        data = store.get_bytes(entry.bucket, entry.key, version)
    except ObjectMissing:
        raise PageNotFound(f"{entry.key} has no version {version}", "unknown_version") from None
    try:
        doc = open_pdf(data)
    except InputError:
        raise PageNotFound(f"{entry.key} version {version} is not a readable PDF", "unknown_version") from None
    try:
        if not 1 <= page <= doc.page_count:
            raise PageNotFound(f"{entry.key} has pages 1-{doc.page_count}, not {page}", "unknown_page")
        target = doc.load_page(page - 1)
        for box in boxes:  # drawn on this in-memory copy only; MuPDF draws in unrotated space
            rect = pymupdf.Rect(box) * target.derotation_matrix
            target.draw_rect(rect, color=HIGHLIGHT_FRAME, fill=HIGHLIGHT_FILL, fill_opacity=HIGHLIGHT_OPACITY,
                             width=1.2, overlay=True)
        zoom, _ = zoom_for(target, dpi, max_pixels)
        return target.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False).tobytes("png")
    finally:
        close_pdf(doc)
