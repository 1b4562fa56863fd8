"""The engine's typed errors. ``code`` is stable: services and pipelines key on it."""

from __future__ import annotations


class EngineError(Exception):
    code = "engine_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InputError(EngineError):
    """The input document itself is unusable; running it again cannot succeed."""

    code = "bad_input"


class EmptyDocument(InputError):
    code = "empty_file"


class NotAPdf(InputError):
    code = "not_pdf"


class CorruptPdf(InputError):
    code = "corrupt_pdf"


class MalformedPdf(InputError):
    """The object tree is nested past the structure limits or refers back to itself:
    readers hang or overflow their stacks on such files, so they are refused whole."""

    code = "malformed_pdf"


class ClaimsExceedFile(InputError):
    """The file claims more than its bytes can hold (pages, stream lengths)."""

    code = "claims_exceed_file"


class PageTooLarge(InputError):
    """A page larger than the PDF format allows (14,400 points a side)."""

    code = "page_too_large"


class EncryptedPdf(InputError):
    code = "encrypted_pdf"


class TooManyPages(InputError):
    code = "too_many_pages"


class DocumentTooLarge(InputError):
    code = "file_too_large"


class PageRangeError(InputError):
    code = "bad_page_range"


class ModelIntegrityError(EngineError):
    """The weights folder does not match its sha256 manifest; nothing was loaded."""

    code = "model_integrity"


class BackendUnavailable(EngineError):
    code = "backend_unavailable"


class Busy(EngineError):
    """The engine stayed busy with other work past the caller's wait (try again later)."""

    code = "overloaded"


class Cancelled(EngineError):
    """The caller gave up (a request timeout); the work stopped at the next page or token."""

    code = "cancelled"
