"""What one page range may be, as its owners say: the OCR service or the engine.

The service publishes its request limits and the engine's token budget and pace at
``GET /v1/limits`` (``OcrClient.limits``); in local mode the engine answers in process
(``RangeLimits.from_engine``). The planner cuts ranges from one of these, never from a
copy of their numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

TEXTLAYER = "textlayer"


@dataclass(frozen=True)
class RangeLimits:
    source: str  # where these came from: the service's URL, or "engine"
    ocr_backend: str  # what reads pages without a usable text layer
    text_seconds_per_page: float
    scanned_seconds_per_page: float
    max_pages: int | None = None  # per request
    max_bytes: int | None = None  # per request
    timeout_s: float | None = None  # the engine's time on one request
    queue_timeout_s: float | None = None  # the longest a request waits for the engine
    max_pages_per_call: int | None = None  # the engine's token budget (unlimited backend)
    max_pages_kv: int | None = None  # the largest range the service's KV budget admits
    # text-layer characters below which the reader OCRs a page: the planner's "scanned"
    min_text_chars: int = 0

    @classmethod
    def from_engine_dict(cls, engine: dict[str, Any], source: str, request: dict[str, Any] | None = None) -> "RangeLimits":
        """From ``EngineLimits.as_dict()`` (and the service's ``request`` part, if any)."""
        request = request or {}
        pace = engine["seconds_per_page"]
        ocr = engine["ocr_backend"]
        return cls(
            source=source, ocr_backend=ocr,
            text_seconds_per_page=float(pace[TEXTLAYER]), scanned_seconds_per_page=float(pace[ocr]),
            max_pages=request.get("max_pages"), max_bytes=request.get("max_bytes"), timeout_s=request.get("timeout_s"),
            queue_timeout_s=request.get("queue_timeout_s"),
            max_pages_per_call=engine.get("max_pages_per_call"), min_text_chars=int(engine["min_text_chars"]),
        )

    @classmethod
    def from_service(cls, body: dict[str, Any], source: str) -> "RangeLimits":
        """From the body of the OCR service's ``GET /v1/limits``."""
        limits = cls.from_engine_dict(body["engine"], source, body["request"])
        kv = body.get("kv") or {}
        return replace(limits, max_pages_kv=kv.get("max_pages"))

    @classmethod
    def from_engine(cls, engine) -> "RangeLimits":
        """An ``OcrEngine`` in this process (local mode): no request limits, its budget and pace."""
        return cls.from_engine_dict(engine.limits().as_dict(), "engine")

    @property
    def answer_within_s(self) -> float | None:
        """How long a client waits for an answer before it gives up: the service's queue
        wait and its timeout, plus a margin for the upload and the reply."""
        if self.timeout_s is None:
            return None
        return (self.queue_timeout_s or 0.0) + self.timeout_s + 60.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RangeLimits":
        return cls(**data)
