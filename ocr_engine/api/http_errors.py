"""The errors the service raises; the codes, their statuses and scopes are the contract's
(``contract.py``). Bodies are always ``{"error": {"code", "message", "request_id", "scope"}}``.

The classes are shorthand for a code's family; a code of the contract answers with the
contract's status whichever class raised it. (The search service shares these classes for
its own codes, which are not the OCR contract's.)
"""

from __future__ import annotations

from ocr_engine.api import errors as engine_errors
from ocr_engine.api.contract import REFUSALS, refusal


class ServiceError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if self.code in REFUSALS:
            self.status = REFUSALS[self.code].status
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
    """Engine errors keep their own code, at the contract's status (every engine code is in
    the contract: a test walks ``EngineError``'s subclasses)."""
    return ServiceError(exc.message, code=refusal(exc.code).code)
