"""PDFs the tests write themselves, with known text on known pages."""

from __future__ import annotations

import pymupdf

from kb.samples import scanned_copy  # noqa: F401  (tests build scanned PDFs with it)


def make_pdf(pages: list[str], *, fontname: str = "helv") -> bytes:
    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page(width=595, height=842)
        rect = pymupdf.Rect(60, 60, 535, 780)
        assert page.insert_textbox(rect, text, fontsize=11, fontname=fontname) >= 0, "text does not fit"
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


def coded_pages(name: str, n: int) -> list[str]:
    """Page i says which document and page it is, in words a search can find."""
    return [
        f"{name} manual, page {i}. The maintenance code printed on this page is {name.upper()}-{i:03d}. "
        f"This paragraph exists so that the {name} document has enough text on page {i} to be indexed."
        for i in range(1, n + 1)
    ]


def encrypted_pdf() -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret contents")
    data = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner-pw", user_pw="user-pw")
    doc.close()
    return data


def truncated_pdf() -> bytes:
    data = make_pdf(coded_pages("truncated", 4))
    return data[: len(data) // 2]


def image_only_pdf() -> bytes:
    """A page with a picture and no text layer: what a scanner produces."""
    doc = pymupdf.open()
    page = doc.new_page()
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 64), False)
    pix.clear_with(200)
    page.insert_image(pymupdf.Rect(72, 72, 272, 272), pixmap=pix)
    data = doc.tobytes()
    doc.close()
    return data

