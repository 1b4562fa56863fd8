"""What one page range may be, as its owners say: the OCR service or the engine.

The service publishes its request limits and the engine's token budget and pace at
``GET /v1/limits`` (``OcrClient.limits``, read through the service's contract,
``PublishedLimits``); in local mode the engine answers in process
(``RangeLimits.from_engine``). The planner cuts ranges from one of these, never from a
copy of their numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ocr_engine.api.names import BackendName
from ocr_engine.api.limits import EngineLimits
from ocr_engine.api.contract import PublishedLimits, RequestLimits

if TYPE_CHECKING:
    from ocr_engine.engine import OcrEngine


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
    # the reader's rules now (``EngineLimits.extraction_version``): a ``reread`` run reads again
    # the stored pages that name another
    extraction_version: str | None = None
    # the OCR model ``ocr_backend`` reads with (``EngineLimits.ocr_model``): the same for OCR pages
    ocr_model: str | None = None

    @classmethod
    def of(cls, engine: EngineLimits, source: str, request: RequestLimits | None = None,
           max_pages_kv: int | None = None) -> "RangeLimits":
        """From the engine's limits (and the service's request limits and KV budget, if any)."""
        pace = engine.seconds_per_page
        return cls(
            source=source, ocr_backend=engine.ocr_backend,
            text_seconds_per_page=float(pace[BackendName.TEXTLAYER]),
            scanned_seconds_per_page=float(pace[engine.ocr_backend]),
            max_pages=request.max_pages if request else None, max_bytes=request.max_bytes if request else None,
            timeout_s=request.timeout_s if request else None,
            queue_timeout_s=request.queue_timeout_s if request else None,
            max_pages_per_call=engine.max_pages_per_call, max_pages_kv=max_pages_kv,
            min_text_chars=engine.min_text_chars, extraction_version=engine.extraction_version,
            ocr_model=engine.ocr_model,
        )

    @classmethod
    def from_service(cls, published: PublishedLimits, source: str) -> "RangeLimits":
        """From the OCR service's ``GET /v1/limits``, as its contract reads the body."""
        return cls.of(published.engine, source, published.request,
                      published.kv.max_pages if published.kv is not None else None)

    @classmethod
    def from_engine(cls, engine: "OcrEngine") -> "RangeLimits":
        """An ``OcrEngine`` in this process (local mode): no request limits, its budget and pace."""
        return cls.of(engine.limits(), "engine")

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
