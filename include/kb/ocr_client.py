"""A client of the OCR service with the retry policy the pipeline needs.

Retried, with exponential backoff (honouring Retry-After): 429, 503 and connection
errors, which pass. A read timeout is not resent here (the service may still be working
on it); it fails the task, whose own retries come later. Not retried: other 4xx, which mean the document itself is bad
(``OcrRejected``, quarantined by the pipeline), and 5xx other than 503.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from kb.errors import DocumentError, InfrastructureError

RETRY_STATUSES = {429, 503}


class OcrRejected(DocumentError):
    """The service refused the document (4xx): retrying cannot help."""

    code = "ocr_rejected"

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"the OCR service answered {status} {code}: {message}")
        self.status, self.code = status, code


class OcrUnavailable(InfrastructureError):
    code = "ocr_unavailable"


@dataclass
class OcrClient:
    base_url: str
    api_key: str | None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 900.0
    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def parse(self, data: bytes, first: int, last: int, backend: str = "auto") -> list[dict[str, Any]]:
        timeout = httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        form = {"pages": f"{first}-{last}", "backend": backend, "output": "json"}
        last_problem = ""
        for attempt in range(self.retries + 1):
            try:
                resp = httpx.post(f"{self.base_url.rstrip('/')}/v1/parse", headers=headers, data=form, timeout=timeout,
                                  files={"file": ("document.pdf", data, "application/pdf")})
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never reached the service: safe to resend
                last_problem = f"{type(exc).__name__}: {exc}"
                delay = self._delay(attempt, None)
            else:
                if resp.status_code == 200:
                    return resp.json()["pages"]
                error = _error_of(resp)
                if resp.status_code not in RETRY_STATUSES:
                    if 400 <= resp.status_code < 500:
                        raise OcrRejected(resp.status_code, error.get("code", "unknown"), error.get("message", ""))
                    raise OcrUnavailable(f"the OCR service answered {resp.status_code}: {error.get('message', '')}")
                last_problem = f"{resp.status_code} {error.get('code', '')}"
                delay = self._delay(attempt, resp.headers.get("retry-after"))
            if attempt < self.retries:
                time.sleep(delay)
        raise OcrUnavailable(f"the OCR service did not answer after {self.retries + 1} tries ({last_problem})")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        backoff = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        try:
            return max(backoff, float(retry_after)) if retry_after else backoff
        except ValueError:
            return backoff


def _error_of(resp: httpx.Response) -> dict[str, Any]:
    try:
        return resp.json().get("error", {}) or {}
    except ValueError:
        return {"message": resp.text[:200]}
