import pytest

from ocr_engine import errors
from ocr_engine.documents import open_pdf
from tests.pdfs import coded_pages, encrypted_pdf, make_pdf, truncated_pdf


def test_a_good_pdf_opens_with_all_pages():
    doc = open_pdf(make_pdf(coded_pages("good", 3)))
    assert doc.page_count == 3


@pytest.mark.parametrize(
    "data, error, code",
    [
        (b"", errors.EmptyDocument, "empty_file"),
        (b"just some text, not a document", errors.NotAPdf, "not_pdf"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, errors.NotAPdf, "not_pdf"),
        (truncated_pdf(), errors.CorruptPdf, "corrupt_pdf"),
        (encrypted_pdf(), errors.EncryptedPdf, "encrypted_pdf"),
        (b"%PDF-1.7\n garbage garbage", errors.CorruptPdf, "corrupt_pdf"),
    ],
    ids=["empty", "text", "png", "truncated", "encrypted", "header-only"],
)
def test_each_bad_input_has_its_typed_error(data, error, code):
    with pytest.raises(error) as info:
        open_pdf(data)
    assert info.value.code == code
    assert isinstance(info.value, errors.InputError)
    assert info.value.message


def test_page_limit_is_enforced():
    with pytest.raises(errors.TooManyPages):
        open_pdf(make_pdf(coded_pages("long", 4)), max_pages=3)
