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


class Cancelled(EngineError):
    """The caller gave up (a request timeout); the work stopped at the next page or token."""

    code = "cancelled"
