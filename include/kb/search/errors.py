"""The search service's errors: the OCR service's shape and statuses, and two of its own.

Bodies are always ``{"error": {"code", "message", "request_id"}}``, plus ``field`` when a
request field is at fault.
"""

from __future__ import annotations

from ocr_engine.api.http_errors import NotReady, Overloaded, ServiceError, Unauthorized

__all__ = ["InvalidRequest", "NotFound", "NotReady", "Overloaded", "ServiceError", "Unauthorized"]


class NotFound(ServiceError):
    status, code = 404, "not_found"


class InvalidRequest(ServiceError):
    status, code = 422, "invalid_request"

    def __init__(self, message: str, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.field = field
