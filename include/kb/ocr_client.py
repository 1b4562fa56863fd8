"""A client of the OCR service with the retry policy the pipeline needs.

The one place the service's answers become the pipeline's errors:
- 429, 503 and connection errors pass: retried with exponential backoff (honouring
  Retry-After). A read timeout is not resent here (the service may still be working on
  it); it fails the task, whose own retries come later.
- the rest as the service's contract says (``ocr_engine.api.contract``: each error
  states its scope, and the client keeps no list of codes):
  - ``range`` (413 too many pages, bytes or KV; 504 too slow): our limits, not the
    document's: ``RangeTooLarge`` / ``RangeTimedOut``, the caller splits the range;
  - ``document`` (``OcrRejected``): the document itself is bad; quarantined;
  - ``request`` (``OcrRequestRefused``): this deployment's mistake (a wrong key, a bad
    parameter); the task fails, the document is tried again later, never quarantined;
  - ``retry`` answers that are not 429 or 503 (``OcrUnavailable``).

Replicas: a client may know several base URLs (the same service, scaled out). Each call
starts at a random one; a replica that is full (429) or cannot be reached is left for the
next, and the backoff only starts once every replica has been tried.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from kb.errors import DocumentError, InfrastructureError, RangeTimedOut, RangeTooLarge
from kb.limits import RangeLimits
from ocr_engine.api.contract import PublishedLimits, Scope, refusal_of
from ocr_engine.api.names import AUTO, Requested
from ocr_engine.api.pages import PageResult

RETRY_STATUSES = {429, 503}  # resent here, with backoff; other ``retry`` answers fail the task


class OcrRejected(DocumentError):
    """The service refused the document itself (422): retrying cannot help."""

    code = "ocr_rejected"

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"the OCR service answered {status} {code}: {message}")
        self.status, self.code = status, code


class OcrUnavailable(InfrastructureError):
    code = "ocr_unavailable"


class OcrRequestRefused(InfrastructureError):
    """The service refused our request (401, 400, ...): a deployment problem, not the document's."""

    code = "ocr_request_refused"


@dataclass
class OcrClient:
    base_url: str
    api_key: str | None = field(repr=False)  # a secret: never in a repr, a log line or a traceback
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 900.0
    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    # other base URLs of the same service (replicas); base_url is one of them too
    replicas: list[str] = field(default_factory=list)

    @property
    def base_urls(self) -> list[str]:
        return [self.base_url, *(r for r in self.replicas if r != self.base_url)]

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def limits(self) -> RangeLimits:
        """The service's published limits (``GET /v1/limits``), with the same retries as parse."""
        return RangeLimits.from_service(self.published(), self.base_url)

    def published(self) -> PublishedLimits:
        """The body of ``GET /v1/limits``, read through the service's contract."""
        body = self._call("GET", "/v1/limits", timeout=httpx.Timeout(30.0, connect=self.connect_timeout_s))
        return PublishedLimits.from_dict(body)

    def parse(self, data: bytes, first: int, last: int, backend: Requested = AUTO,
              read_timeout_s: float | None = None) -> list[PageResult]:
        """``read_timeout_s``: how long to wait for the answer (``RangeLimits.answer_within_s``
        of the service's published limits; else the connection's ``read_timeout_s``)."""
        form = {"pages": f"{first}-{last}", "backend": backend, "output": "json"}
        timeout = httpx.Timeout(read_timeout_s or self.read_timeout_s, connect=self.connect_timeout_s)
        body = self._call("POST", "/v1/parse", timeout=timeout, data=form,
                          files={"file": ("document.pdf", data, "application/pdf")})
        return [PageResult.from_dict(page) for page in body["pages"]]

    def _call(self, method: str, path: str, timeout: httpx.Timeout, **kwargs: Any) -> dict[str, Any]:
        urls = self.base_urls
        start = random.randrange(len(urls))
        last_problem = ""
        tries = (self.retries + 1) * len(urls)
        for attempt in range(tries):
            url = f"{urls[(start + attempt) % len(urls)].rstrip('/')}{path}"
            try:
                resp = httpx.request(method, url, headers=self._headers, timeout=timeout, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never reached the service: safe to resend
                last_problem = f"{type(exc).__name__}: {exc}"
                delay = self._delay(attempt, None)
            except httpx.TransportError as exc:  # a read timeout, a dropped connection: the service may
                # still be working on it, so it is not resent here; the task's retries come later
                raise OcrUnavailable(f"no answer from the OCR service: {type(exc).__name__}: {exc}") from None
            else:
                if resp.status_code == 200:
                    return resp.json()
                if resp.status_code not in RETRY_STATUSES:
                    raise _error_for(resp)
                last_problem = f"{resp.status_code} {_error_of(resp).get('code', '')}"
                delay = self._delay(attempt // len(urls), resp.headers.get("retry-after"))
            # the next replica at once; a pause only after a round over all of them
            if attempt < tries - 1 and (attempt + 1) % len(urls) == 0:
                time.sleep(delay)
        raise OcrUnavailable(f"the OCR service did not answer after {tries} tries ({last_problem})")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        backoff = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        try:
            return max(backoff, float(retry_after)) if retry_after else backoff
        except ValueError:
            return backoff


def _error_for(resp: httpx.Response) -> Exception:
    """The pipeline's error for a final (not retried) answer."""
    refusal = refusal_of(resp.status_code, _error_of(resp))
    said = f"the OCR service answered {refusal.status} {refusal.code}: {refusal.meaning}"
    if refusal.scope is Scope.RANGE:
        return RangeTimedOut(said) if refusal.status == 504 else RangeTooLarge(said)
    if refusal.scope is Scope.DOCUMENT:
        return OcrRejected(refusal.status, refusal.code, refusal.meaning)
    if refusal.scope is Scope.REQUEST:
        return OcrRequestRefused(said)
    return OcrUnavailable(said)


def _error_of(resp: httpx.Response) -> dict[str, Any]:
    try:
        return resp.json().get("error", {}) or {}
    except ValueError:
        return {"message": resp.text[:200]}
