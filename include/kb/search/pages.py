"""A page image from the exact stored version of a document: the source behind a hit."""

from __future__ import annotations

from kb.errors import KbError, ObjectMissing
from kb.ledger_db import Ledger
from kb.objectstore import ObjectStore


class PageNotFound(KbError):
    """An unknown document, version or page."""

    code = "not_found"

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def render_png(store: ObjectStore, ledger: Ledger, doc_id: str, page: int, version: str | None,
               dpi: int, max_pixels: int) -> bytes:
    """Page ``page`` (1-based) of ``doc_id`` at ``version`` (default: the indexed one) as PNG,
    at ``dpi`` unless that would exceed ``max_pixels``, whatever size the page claims."""
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
        zoom, _ = zoom_for(target, dpi, max_pixels)
        return target.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False).tobytes("png")
    finally:
        close_pdf(doc)
