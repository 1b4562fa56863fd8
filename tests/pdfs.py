"""PDFs the tests write themselves, with known text on known pages."""

from __future__ import annotations

import pymupdf

from kb_dev.samples import scanned_copy  # noqa: F401  (tests build scanned PDFs with it)


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



# --- hostile and odd files ------------------------------------------------------------

_CONTENT = b"BT /F1 12 Tf 72 720 Td (hostile page) Tj ET"
_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def raw_pdf(objects: list[bytes]) -> bytes:
    """A PDF written byte by byte (object 1 is the catalog), so a test can make it as
    wrong as it likes; PyMuPDF would repair or refuse such structures when saving."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _stream(content: bytes, length: int | None = None) -> bytes:
    return b"<< /Length %d >>\nstream\n" % (len(content) if length is None else length) + content + b"\nendstream"


def _one_page(pages_node: bytes, page_extra: bytes = b"", length: int | None = None) -> bytes:
    return raw_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>", pages_node,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >>" + page_extra + b" >>",
        _stream(_CONTENT, length), _FONT,
    ])


def recursive_page_tree_pdf() -> bytes:
    """The page tree lists itself among its kids: a reader that follows it never ends."""
    return _one_page(b"<< /Type /Pages /Kids [3 0 R 2 0 R] /Count 2 >>")


def dangling_kid_pdf() -> bytes:
    """The page tree names, beside its page, an object the file does not hold."""
    return _one_page(b"<< /Type /Pages /Kids [3 0 R 999 0 R] /Count 2 >>")


def kidless_page_tree_pdf() -> bytes:
    """The page tree counts two pages and has no /Kids to find them by (a mangled key name, as
    a flipped byte left one: "/Kid#E0"). MuPDF counts the pages and fails to look one up."""
    return _one_page(b"<< /Type /Pages /Kid#E0 [3 0 R] /Count 2 >>")


def null_kid_pdf() -> bytes:
    """The page tree's /Kids holds a number and a null where a reference should be."""
    return _one_page(b"<< /Type /Pages /Kids [3 null 3 0 R] /Count 2 >>")


def deeply_nested_pdf(depth: int = 100_000) -> bytes:
    """A page whose dictionary holds arrays nested ``depth`` deep."""
    return _one_page(b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", b" /Junk " + b"[" * depth + b"]" * depth)


def deep_page_tree_pdf(levels: int = 5_000) -> bytes:
    """One page at the bottom of a chain of ``levels`` /Pages nodes."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(levels):
        parent = b" /Parent %d 0 R" % (level + 1) if level else b""
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1%s >>" % (level + 3, parent))
    page = levels + 2
    objects.append(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                   b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (page - 1, page + 1, page + 2))
    objects += [_stream(_CONTENT), _FONT]
    return raw_pdf(objects)


def giant_page_pdf(side_pt: float = 20_000) -> bytes:
    doc = pymupdf.open()
    doc.new_page(width=side_pt, height=side_pt).insert_text((72, 72), "a page larger than the format allows")
    data = doc.tobytes()
    doc.close()
    return data


def jpeg_named_pdf() -> bytes:
    """A photo's bytes, as a scanner app might upload under a .pdf name."""
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 48, 48), False)
    pix.clear_with(120)
    return pix.tobytes("jpg")


def claims_more_pages_pdf(claimed: int = 1_000_000) -> bytes:
    """A one-page file whose page tree claims ``claimed`` pages."""
    return _one_page(b"<< /Type /Pages /Kids [3 0 R] /Count %d >>" % claimed)


def claims_longer_stream_pdf(claimed: int = 10**12) -> bytes:
    """A one-page file whose content stream claims ``claimed`` bytes."""
    return _one_page(b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", length=claimed)


def empty_password_pdf(pages: list[str]) -> bytes:
    """Encrypted (AES-256) with an owner password and an empty user password: any
    reader opens it without asking, as viewers do."""
    doc = pymupdf.open(stream=make_pdf(pages), filetype="pdf")
    data = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner-only", user_pw="")
    doc.close()
    return data


def broken_xref_pdf(pages: list[str]) -> bytes:
    """A sound file whose cross-reference table and startxref point at the wrong bytes;
    MuPDF rebuilds the table by scanning the objects (``is_repaired``)."""
    data = make_pdf(pages)
    start = data.rfind(b"startxref")
    table = data.rfind(b"xref", 0, start)
    return data[:table] + b"xref\n0 1\n0000000000 65535 f \nthis table is damaged\n" + data[start:].replace(
        data[start:].split(b"\n")[1], b"123")


# A three-page guide with what a document reader must handle: a running header and a page
# number on every page, a paragraph that runs from page 1 onto page 2, and a ruled table
# that starts on page 2 and goes on, its header row repeated, on page 3.
GUIDE_HEADER = "Aquila Field Guide, chapter 2: pump care"
GUIDE_SPLIT = ("The coupling insert between motor and pump must be inspected by a certified",
               "technician every three years and replaced at once when it shows cracks.")
GUIDE_TABLE = [["code", "meaning"], ["E17", "motor overheating"], ["E42", "low suction pressure"],
               ["E51", "seal leak detected"], ["E63", "bearing noise above limit"], ["E70", "valve stuck open"]]


def _table(page: pymupdf.Page, rows: list[list[str]], top: float) -> float:
    x = (60, 200, 535)
    y = top
    for row in rows:
        page.draw_line((x[0], y), (x[-1], y))
        for i, cell in enumerate(row):
            page.insert_text((x[i] + 6, y + 15), cell, fontsize=11, fontname="helv")
        y += 22
    page.draw_line((x[0], y), (x[-1], y))
    for xi in x:
        page.draw_line((xi, top), (xi, y))
    return y


def guide_pdf() -> bytes:
    doc = pymupdf.open()
    filler = ("Keep the pump room dry and ventilated. Check the suction strainer every week and "
              "clean it when the pressure drop exceeds the value on the rating plate. ")
    for n in (1, 2, 3):
        page = doc.new_page(width=595, height=842)
        page.insert_text((60, 40), GUIDE_HEADER, fontsize=9, fontname="helv")
        page.insert_text((290, 815), str(n), fontsize=9, fontname="helv")
        if n == 1:
            page.insert_text((60, 90), "Pump care", fontsize=18, fontname="hebo")
            rect = pymupdf.Rect(60, 110, 535, 700)
            assert page.insert_textbox(rect, filler * 4, fontsize=11, fontname="helv") >= 0
            assert page.insert_textbox(pymupdf.Rect(60, 720, 535, 790), GUIDE_SPLIT[0], fontsize=11,
                                       fontname="helv") >= 0
        elif n == 2:
            assert page.insert_textbox(pymupdf.Rect(60, 70, 535, 140), GUIDE_SPLIT[1], fontsize=11,
                                       fontname="helv") >= 0
            page.insert_text((60, 560), "Error codes shown on the display:", fontsize=11, fontname="helv")
            _table(page, GUIDE_TABLE[:4], 600)
        else:
            bottom = _table(page, [GUIDE_TABLE[0]] + GUIDE_TABLE[4:], 70)
            assert page.insert_textbox(pymupdf.Rect(60, bottom + 30, 535, bottom + 120),
                                       "After any error, write the code into the pump log.", fontsize=11,
                                       fontname="helv") >= 0
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data
