"""The errors both HTTP services raise (the OCR service and the search service).

Every error answer has one body: ``{"error": {"code", "message", "request_id", "scope"}}``,
plus ``field`` where one request field is at fault (``http.install_error_handlers`` writes it).
A class here names a code's family and its usual status; the status and scope a code is
answered with are the answering service's own code table: the OCR service's is the refusal
contract (``contract.REFUSALS``), the search service's ``kb.search.errors.CODES``.
"""

from __future__ import annotations

from ocr_engine.api import errors as engine_errors
from ocr_engine.api.contract import refusal


class ServiceError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.headers = headers or {}
        self.field = field  # the request field at fault, where there is one


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class BadRequest(ServiceError):
    status, code = 400, "bad_request"


class Forbidden(ServiceError):
    status, code = 403, "forbidden"


class PayloadTooLarge(ServiceError):
    status, code = 413, "file_too_large"


class Unprocessable(ServiceError):
    """The input is a bad document (corrupt, encrypted, not a document, too many pages)."""

    status, code = 422, "bad_document"


class Overloaded(ServiceError):
    status, code = 429, "overloaded"


class NotFound(ServiceError):
    status, code = 404, "not_found"


class InvalidRequest(ServiceError):
    status, code = 422, "invalid_request"


class NotReady(ServiceError):
    status, code = 503, "not_ready"


class UpstreamUnavailable(ServiceError):
    status, code = 503, "storage_unavailable"


class TimedOut(ServiceError):
    status, code = 504, "timeout"


def from_engine(exc: engine_errors.EngineError) -> ServiceError:
    """Engine errors keep their own code, at the contract's status (every engine code is in
    the contract: a test walks ``EngineError``'s subclasses)."""
    return ServiceError(exc.message, code=refusal(exc.code).code)
