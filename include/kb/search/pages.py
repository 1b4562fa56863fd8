"""A page image of a document's indexed version: the source behind a hit, with the hit's
boxes drawn on it when asked.

Only what search can find is shown: the version whose chunks are in the index, checked by
its content hash. A deleted document, a version that never got in (quarantined) and one a
newer version replaced are all 404, whatever the bucket still holds. Rendering reads at most
``max_bytes`` of the object, and runs one page at a time (MuPDF is not thread-safe).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Sequence

from kb.errors import KbError, ObjectMissing, ObjectTooLarge
from kb.ledger import LedgerEntry
from kb.ledger_db import Ledger
from kb.objectstore import ObjectStore

_MUPDF = threading.Lock()  # every MuPDF call of this process


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


class PageSourceTooLarge(KbError):
    """The document is over the size the page endpoint reads."""

    code = "document_too_large"


def indexed_entry(ledger: Ledger, doc_id: str) -> LedgerEntry:
    """``doc_id``'s ledger entry when a version of it is in the index; else 404: unknown, or
    deleted (or never got in). Asked before anything about the document's chunks, so that a
    hit's link to a deleted document says so, not that its chunk is unknown."""
    entry = ledger.get(doc_id)
    if entry is None:
        raise PageNotFound(f"no document {doc_id}", "unknown_document")
    if entry.indexed_sha256 is None:  # deleted, or no version of it ever got in
        raise PageNotFound(f"{entry.key} is not in the index ({entry.status})", "not_indexed")
    return entry


def render_indexed(store: ObjectStore, entry: LedgerEntry, page: int, version: str | None, dpi: int,
                   max_pixels: int, boxes: Sequence[Sequence[float]] = (), *, max_bytes: int) -> bytes:
    """Page ``page`` (1-based) of the indexed version of ``entry`` (as ``indexed_entry`` gave it)
    as PNG (``version``, when given, must be that version), at ``dpi`` unless that would exceed
    ``max_pixels``, whatever size the page claims, with ``boxes`` (x0, y0, x1, y1 in points of
    the displayed page) highlighted."""
    if version is not None and version != entry.indexed_version_id:
        raise PageNotFound(f"{entry.key} version {version} is not the indexed one", "unknown_version")
    try:
        data = store.get_bytes(entry.bucket, entry.key, entry.indexed_version_id, max_bytes=max_bytes)
    except ObjectMissing:
        raise PageNotFound(f"{entry.key}'s indexed version is gone from the bucket", "unknown_version") from None
    except ObjectTooLarge:
        raise PageSourceTooLarge(f"{entry.key} is over the {max_bytes / 2**20:g} MB the page endpoint reads") from None
    if hashlib.sha256(data).hexdigest() != entry.indexed_sha256:  # an unversioned bucket's newer bytes
        raise PageNotFound(f"{entry.key} changed since it was indexed", "unknown_version")
    with _MUPDF:
        return _render(data, entry.key, page, dpi, max_pixels, boxes)


def _render(data: bytes, key: str, page: int, dpi: int, max_pixels: int, boxes: Sequence[Sequence[float]]) -> bytes:
    import pymupdf

    from ocr_engine.api.pdf import close_pdf, open_pdf, zoom_for
    from ocr_engine.api.errors import InputError

    try:
        doc = open_pdf(data)
    except InputError:
        raise PageNotFound(f"{key}'s indexed version is not a readable PDF", "unknown_version") from None
    try:
        if not 1 <= page <= doc.page_count:
            raise PageNotFound(f"{key} has pages 1-{doc.page_count}, not {page}", "unknown_page")
        target = doc.load_page(page - 1)
        for box in boxes:  # drawn on this in-memory copy only; MuPDF draws in unrotated space
            rect = pymupdf.Rect(box) * target.derotation_matrix
            target.draw_rect(rect, color=HIGHLIGHT_FRAME, fill=HIGHLIGHT_FILL, fill_opacity=HIGHLIGHT_OPACITY,
                             width=1.2, overlay=True)
        zoom, _ = zoom_for(target, dpi, max_pixels)
        return target.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False).tobytes("png")
    finally:
        close_pdf(doc)
