"""PDFs as both sides of the engine handle them: opened safely (every way a document can be
unusable becomes a typed error), sliced into ranges, pages classified by their text layer
(the ``auto`` route's one rule, which the pipeline's planner counts by too), and pages sized
for rendering within a pixel budget."""

from __future__ import annotations

import math
import unicodedata

import pymupdf

from ocr_engine.api.errors import (CorruptPdf, EmptyDocument, EncryptedPdf, InputError, NotAPdf, PageRangeError,
                               TooManyPages)
from ocr_engine.api.structure import check_structure

pymupdf.TOOLS.mupdf_display_errors(False)  # repairs are reported through our errors, not stderr


def open_pdf(data: bytes, *, max_pages: int | None = None) -> pymupdf.Document:
    """Open PDF bytes, or raise the typed reason why they cannot be indexed.

    MuPDF silently repairs many broken files; a file it had to repair whose pages
    cannot all be loaded is treated as corrupt rather than half-indexed.
    """
    if not data:
        raise EmptyDocument("the file is empty (0 bytes)")
    head = data[:1024].lstrip()
    if b"%PDF-" not in head:
        raise NotAPdf("the file does not start with a PDF header")
    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # MuPDF raises its own FileDataError/RuntimeError variants
        raise CorruptPdf(f"the PDF cannot be opened: {exc}") from exc
    # A file encrypted with an empty user password is opened (authenticated) by MuPDF
    # itself and reads like any other: only one that needs a password is refused.
    if doc.needs_pass or doc.is_encrypted:
        doc.close()
        raise EncryptedPdf("the PDF is password-protected")
    try:
        check_structure(doc, len(data))
    except InputError:
        doc.close()
        raise
    if doc.page_count == 0:
        doc.close()
        raise CorruptPdf("the PDF has no readable pages (truncated or damaged)")
    if max_pages is not None and doc.page_count > max_pages:
        n = doc.page_count
        doc.close()
        raise TooManyPages(f"the PDF has {n} pages, more than the limit of {max_pages}")
    if doc.is_repaired and b"%%EOF" not in data[-2048:]:
        # MuPDF rebuilt the cross-reference table and the end marker is gone: the
        # file was cut short, so whatever pages survived are not the document.
        doc.close()
        raise CorruptPdf("the PDF is truncated (no end-of-file marker; MuPDF had to repair it)")
    if doc.is_repaired:
        try:
            for page in doc:
                page.get_text("text")
        except Exception as exc:
            doc.close()
            raise CorruptPdf(f"the PDF is damaged beyond repair: {exc}") from exc
    return doc


def check_range(doc: pymupdf.Document, first: int, last: int) -> None:
    """Pages are 1-based and inclusive, as users write them."""
    if first < 1 or last < first or last > doc.page_count:
        raise PageRangeError(f"page range {first}-{last} is outside 1-{doc.page_count}")


def close_pdf(doc: pymupdf.Document) -> None:
    """Close, and empty MuPDF's store: it caches decoded images past the document's life
    (measured: RSS +110 MB over 50 renders of one scanned page, flat with this)."""
    doc.close()
    pymupdf.TOOLS.store_shrink(100)


def slice_pdf(data: bytes, first: int, last: int) -> bytes:
    """Pages ``first``..``last`` of a PDF as a PDF of their own (page ``first`` becomes 1).

    What a client sends for one page range: a request then carries its own pages, not the
    whole document, so its size shrinks with the range and a split really halves it.
    Text layers, images and fonts are copied as they are, so every page reads and renders
    as it does in the whole document.
    """
    src = open_pdf(data)
    try:
        check_range(src, first, last)
        out = pymupdf.open()
        try:
            out.insert_pdf(src, from_page=first - 1, to_page=last - 1, links=False, annots=True, widgets=False)
            return out.tobytes(garbage=1, deflate=True)
        finally:
            out.close()
    finally:
        close_pdf(src)


def usable_text(text: str, min_chars: int) -> bool:
    """Enough characters, and mostly real ones (not replacement or control garbage)."""
    chars = [c for c in text if not c.isspace()]
    if len(chars) < min_chars:
        return False
    good = sum(1 for c in chars if unicodedata.category(c)[0] in "LNPS" and c != "\ufffd")
    return good / len(chars) >= 0.85


def text_layer_pages(doc: pymupdf.Document, pages: list[int], min_chars: int) -> set[int]:
    """The 1-based ``pages`` whose text layer is usable."""
    return {n for n in pages if usable_text(doc.load_page(n - 1).get_text("text"), min_chars)}


def zoom_for(page: pymupdf.Page, dpi: int, max_pixels: int) -> tuple[float, bool]:
    zoom = dpi / 72.0
    rect = page.rect  # already rotated
    pixels = rect.width * zoom * rect.height * zoom
    if pixels <= max_pixels:
        return zoom, False
    return math.sqrt(max_pixels / (rect.width * rect.height)), True
