"""The OCR service's wire contract, in one place: the limits it publishes (``GET /v1/limits``:
``PublishedLimits``), every refusal code it answers with, its HTTP status, and what it means
for the caller (its ``scope``).

The service answers every error as ``{"error": {"code", "message", "request_id", "scope"}}``
and publishes this table at ``GET /v1/limits`` (``refusals``). Its client
(``kb.ocr_client``) decides from the answer alone, through ``refusal_of``, and keeps no list
of its own: a code added here is understood there the day it ships. It reads the published
limits through ``PublishedLimits.from_dict`` likewise, and copies none of their keys.

Scopes:
- ``document``: the document itself can never be read (corrupt, encrypted, malformed...):
  the caller quarantines it and does not retry.
- ``range``: the request was over the service's limits (pages, bytes, KV budget, time): the
  caller splits the range and tries the halves.
- ``request``: the caller's own mistake (a bad key or parameter): fixing the deployment
  helps, retrying does not; the document is not at fault.
- ``retry``: the service is busy or not ready (429, 5xx): the same request may succeed later.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from ocr_engine.api.limits import EngineLimits, from_fields


class Scope(StrEnum):
    DOCUMENT = "document"
    RANGE = "range"
    REQUEST = "request"
    RETRY = "retry"


@dataclass(frozen=True)
class Refusal:
    code: str
    status: int
    scope: Scope
    meaning: str

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "scope": self.scope.value, "meaning": self.meaning}


def _table(*rows: tuple[str, int, Scope, str]) -> dict[str, Refusal]:
    return {code: Refusal(code, status, scope, meaning) for code, status, scope, meaning in rows}


D, R, Q, T = Scope.DOCUMENT, Scope.RANGE, Scope.REQUEST, Scope.RETRY
REFUSALS: dict[str, Refusal] = _table(
    # the document's own defects (ocr_engine.api.errors.InputError): 422
    ("bad_input", 422, D, "the document cannot be read"),
    ("bad_document", 422, D, "the document cannot be read"),
    ("empty_file", 422, D, "the file is empty"),
    ("not_pdf", 422, D, "the file is not a PDF"),
    ("corrupt_pdf", 422, D, "the PDF is damaged or truncated"),
    ("malformed_pdf", 422, D, "the PDF's object tree is nested too deep or refers back to itself"),
    ("claims_exceed_file", 422, D, "the PDF claims more pages or stream bytes than the file holds"),
    ("page_too_large", 422, D, "a page is larger than the PDF format allows"),
    ("encrypted_pdf", 422, D, "the PDF needs a password"),
    ("object_not_found", 422, D, "the s3:// object does not exist"),
    # over this service's limits: 413 for size, 504 for time; the caller splits the range
    ("too_many_pages", 413, R, "more pages than one request may hold (GET /v1/limits: request.max_pages)"),
    ("file_too_large", 413, R, "more bytes than one request may hold (request.max_bytes)"),
    ("kv_budget_exceeded", 413, R, "the range's KV cache could never fit the device (kv.max_pages)"),
    ("timeout", 504, R, "the engine took longer than request.timeout_s on the range; its work was stopped"),
    # the caller's mistakes
    ("bad_request", 400, Q, "the request is malformed"),
    ("bad_page_range", 400, Q, "pages must look like 3 or 1-8, within the document"),
    ("bad_backend", 400, Q, "unknown backend"),
    ("bad_output", 400, Q, "output must be json or markdown"),
    ("bad_source", 400, Q, "send exactly one of a file upload or an s3_uri"),
    ("bad_s3_uri", 400, Q, "the s3:// reference is not valid"),
    ("no_s3", 400, Q, "this service has no object store for s3:// references"),
    ("unauthorized", 401, Q, "a valid API key is required"),
    ("s3_access_denied", 403, Q, "this service may not read the s3:// object"),
    ("forbidden", 403, Q, "not allowed"),
    ("not_found", 404, Q, "no such route"),
    ("method_not_allowed", 405, Q, "the route does not take this method"),
    ("body_too_large", 413, Q, "the request body is over the service's cap (request.max_bytes and its form)"),
    ("invalid_request", 422, Q, "a request field is missing or invalid"),
    # busy or not ready: the same request may succeed later
    ("overloaded", 429, T, "all slots are busy; retry after Retry-After"),
    ("internal_error", 500, T, "unexpected error; see the service log"),
    ("not_ready", 503, T, "warming up or draining"),
    ("storage_unavailable", 503, T, "the object store did not answer"),
    ("backend_unavailable", 503, T, "the OCR backend is not available"),
    ("model_integrity", 503, T, "the weights do not match their manifest"),
    ("engine_error", 503, T, "the engine failed"),
    ("cancelled", 503, T, "the work was stopped"),
)
del D, R, Q, T


def refusal(code: str) -> Refusal:
    """The service's own lookup: every code it answers with is in the table (a test checks)."""
    return REFUSALS[code]


def scope_of_status(status: int) -> Scope:
    """What a status alone says: 429 and 5xx retry, 413 and 504 split, any other 4xx is the request's."""
    if status == 429 or status >= 500:
        return Scope.RETRY
    if status in (413, 504):
        return Scope.RANGE
    return Scope.REQUEST


def refusal_of(status: int, error: dict[str, Any]) -> Refusal:
    """The client's reading of an error answer: the scope the body states; else the table's,
    for a known code at its status; else what the status alone says (429 and 5xx retry, 413
    and 504 split, any other 4xx is the request's). Never ``document`` from a guess: only the
    service says a document is bad."""
    code = str(error.get("code") or "unknown")
    try:
        scope = Scope(error.get("scope"))
    except ValueError:
        known = REFUSALS.get(code)
        scope = known.scope if known is not None and known.status == status else scope_of_status(status)
    return Refusal(code, status, scope, str(error.get("message") or ""))


def published(table: dict[str, Refusal] = REFUSALS) -> dict[str, dict[str, Any]]:
    """The table as ``GET /v1/limits`` publishes it."""
    return {code: r.as_dict() for code, r in table.items()}


@dataclass(frozen=True)
class RequestLimits:
    """What one request may be (the service's own settings)."""

    max_pages: int
    max_bytes: int
    timeout_s: float  # the engine's time on one request
    queue_timeout_s: float  # the longest a request waits for the engine
    max_concurrency: int  # engine slots
    max_queue: int  # requests waiting for a slot before 429


@dataclass(frozen=True)
class KvLimits:
    """The KV budget of a backend that holds a KV cache, and what it holds now, as a number of
    sequences of a typical range (the largest range one request and one call take: the
    planner cuts scanned ranges to it)."""

    budget_bytes: int
    reserved_bytes: int
    admitted_sequences: int
    waiting: int
    bytes_per_token: int
    window: int
    prompt_tokens: int
    visual_tokens_per_page: int
    typical_range_pages: int
    bytes_per_typical_range: int
    capacity_sequences: int
    max_pages: int  # the largest range that could ever be admitted; more pages are 413
    max_batch: int


@dataclass(frozen=True)
class PublishedLimits:
    """The body of ``GET /v1/limits``: the one source clients plan from."""

    request: RequestLimits
    engine: EngineLimits
    kv: KvLimits | None  # None: the OCR backend holds no KV cache (no KV admission)
    refusals: dict[str, Refusal] = field(default_factory=lambda: dict(REFUSALS))

    def as_dict(self) -> dict[str, Any]:
        return {"request": asdict(self.request), "engine": self.engine.as_dict(),
                "kv": asdict(self.kv) if self.kv is not None else None,
                "refusals": published(self.refusals)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PublishedLimits":
        kv = data.get("kv")
        return cls(request=from_fields(RequestLimits, data["request"]), engine=EngineLimits.from_dict(data["engine"]),
                   kv=from_fields(KvLimits, kv) if kv is not None else None,
                   refusals={code: Refusal(code, int(r["status"]), Scope(r["scope"]), str(r["meaning"]))
                             for code, r in data["refusals"].items()})
