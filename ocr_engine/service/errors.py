"""Every error the service answers with, and its HTTP status: one place, one shape.

Bodies are always ``{"error": {"code", "message", "request_id"}}``.
"""

from __future__ import annotations

from ocr_engine import errors as engine_errors


class ServiceError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.headers = headers or {}


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


class NotReady(ServiceError):
    status, code = 503, "not_ready"


class UpstreamUnavailable(ServiceError):
    status, code = 503, "storage_unavailable"


class TimedOut(ServiceError):
    status, code = 504, "timeout"


def from_engine(exc: engine_errors.EngineError) -> ServiceError:
    """Engine errors keep their own code; bad input is 422, anything else 503."""
    if isinstance(exc, engine_errors.DocumentTooLarge):
        return PayloadTooLarge(exc.message, code=exc.code)
    if isinstance(exc, engine_errors.InputError):
        return Unprocessable(exc.message, code=exc.code)
    return NotReady(exc.message, code=exc.code)
