"""The search service's errors: the HTTP kit's classes and body (``ocr_engine.api.http_errors``),
and this service's own code table, by which each code is answered.

Bodies are always ``{"error": {"code", "message", "request_id", "scope"}}``, plus ``field`` when
a request field is at fault; ``scope`` says what a client may do about it: ``request`` (change
the request), ``retry`` (the same request may succeed later).
"""

from __future__ import annotations

from ocr_engine.api.contract import Refusal, Scope
from ocr_engine.api.http_errors import InvalidRequest, NotFound, NotReady, Overloaded, ServiceError, Unauthorized

from kb.errors import StoreBusy
from kb.search.pages import PageNotFound, PageSourceTooLarge

__all__ = ["BOUNDARY", "CODES", "InvalidRequest", "NotFound", "NotReady", "Overloaded", "ServiceError",
           "Unauthorized"]

Q, T = Scope.REQUEST, Scope.RETRY
CODES: dict[str, Refusal] = {code: Refusal(code, status, scope, meaning) for code, status, scope, meaning in (
    ("invalid_request", 422, Q, "a request field is missing or invalid (field names it)"),
    ("document_too_large", 422, Q, "the document's stored PDF is over what a page image is drawn from"),
    ("unauthorized", 401, Q, "a valid API key is required"),
    ("not_found", 404, Q, "no such route"),
    ("unknown_document", 404, Q, "no such document is indexed"),
    ("not_indexed", 404, Q, "the document is known but not in the index"),
    ("unknown_version", 404, Q, "not the indexed version of the document"),
    ("unknown_page", 404, Q, "the document has no such page"),
    ("unknown_chunk", 404, Q, "no such chunk of this document at this version"),
    ("method_not_allowed", 405, Q, "the route does not take this method"),
    ("body_too_large", 413, Q, "the request body is over the service's cap"),
    ("overloaded", 429, T, "too many page images are being drawn; retry after Retry-After"),
    ("internal_error", 500, T, "unexpected error; see the service log"),
    ("not_ready", 503, T, "loading the embedder and the store"),
    ("store_busy", 503, T, "the store's shard is held by another process"),
    ("store_unavailable", 503, T, "no copy of the store answered in time"),
)}
del Q, T

# the lower layers' typed errors, converted once, where the service answers
BOUNDARY = {
    StoreBusy: lambda exc: ServiceError(exc.message, code=exc.code, headers={"Retry-After": "1"}),
    PageNotFound: lambda exc: NotFound(exc.message, code=exc.code),
    PageSourceTooLarge: lambda exc: InvalidRequest(exc.message, code=exc.code),
}
