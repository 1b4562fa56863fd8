"""What OCR cost: tokens, seconds and KV cache of the pages a document or a run had OCR'd.

Computed from the stored page results (the local engine's or the OCR service's, read back
as ``PageResult``), so it works the same for both. Which pages count
and what their device time is are ``ocr_engine.api.cost``'s rules, which the service's
/metrics apply too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable

from ocr_engine.api import cost
from ocr_engine.api.pages import PageResult


def is_ocr_page(page: PageResult) -> bool:
    """A page an OCR backend read and returned: not from its text layer, not failed."""
    return cost.read_by_ocr(page)


@dataclass(frozen=True)
class OcrUsage:
    """Sums over OCR pages. The KV mean is kept as a sum and a count, so that usages add up
    to a page-weighted mean (a mean of documents' means would weigh a 1-page document like
    a 500-page one)."""

    pages: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    service_seconds: float = 0.0  # what callers waited for the pages (rendering, queueing included)
    # The pages' share of decoder device time; a page whose backend does not report one
    # (ppocr: the whole call is on the device) counts its ``seconds``.
    device_seconds: float = 0.0
    kv_peak_bytes_per_sequence: int | None = None
    kv_mean_bytes_sum: float = 0.0  # over the pages that report a KV mean
    kv_mean_pages: int = 0

    @classmethod
    def of_pages(cls, pages: Iterable[PageResult]) -> "OcrUsage":
        return sum((cls._of_page(p) for p in pages if is_ocr_page(p)), cls())

    @classmethod
    def _of_page(cls, p: PageResult) -> "OcrUsage":
        seconds = float(p.seconds or 0.0)
        device = p.device_seconds
        mean = p.kv_mean_bytes
        return cls(
            pages=1, tokens_in=int(p.tokens_in or 0), tokens_out=int(p.tokens_out or 0),
            service_seconds=seconds, device_seconds=cost.device_time(None if device is None else float(device), seconds),
            kv_peak_bytes_per_sequence=p.kv_peak_bytes,
            kv_mean_bytes_sum=0.0 if mean is None else float(mean), kv_mean_pages=0 if mean is None else 1,
        )

    def __add__(self, other: "OcrUsage") -> "OcrUsage":
        peaks = [v for v in (self.kv_peak_bytes_per_sequence, other.kv_peak_bytes_per_sequence) if v is not None]
        return OcrUsage(
            pages=self.pages + other.pages, tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out,
            service_seconds=self.service_seconds + other.service_seconds,
            device_seconds=self.device_seconds + other.device_seconds,
            kv_peak_bytes_per_sequence=max(peaks) if peaks else None,
            kv_mean_bytes_sum=self.kv_mean_bytes_sum + other.kv_mean_bytes_sum,
            kv_mean_pages=self.kv_mean_pages + other.kv_mean_pages,
        )

    @property
    def kv_mean_bytes_per_sequence(self) -> float | None:
        return self.kv_mean_bytes_sum / self.kv_mean_pages if self.kv_mean_pages else None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for XCom (``DocumentResult.ocr_usage``); ``from_dict`` reads it back exactly."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OcrUsage":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def merge(usages: Iterable[OcrUsage]) -> OcrUsage:
    """The usage of several documents together (a run's total)."""
    return sum(usages, OcrUsage())


def usage_summary(usage: OcrUsage, gpu_cost_per_hour: float | None = None) -> dict[str, Any]:
    """What the run summary shows: the sums, throughput per GPU-hour, and cost per 1,000 pages
    when a price per GPU-hour is set (None otherwise, and None without device time)."""
    per_gpu_hour = cost.pages_per_device_hour(usage.pages, usage.device_seconds)
    price = cost.cost_per_1000_pages(gpu_cost_per_hour, usage.pages, usage.device_seconds)
    mean = usage.kv_mean_bytes_per_sequence
    return {
        "pages": usage.pages,
        "tokens_in": usage.tokens_in,
        "tokens_out": usage.tokens_out,
        "service_seconds": round(usage.service_seconds, 4),
        "device_seconds": round(usage.device_seconds, 4),
        "kv_peak_bytes_per_sequence": usage.kv_peak_bytes_per_sequence,
        "kv_mean_bytes_per_sequence": None if mean is None else round(mean),
        "pages_per_gpu_hour": None if per_gpu_hour is None else round(per_gpu_hour, 1),
        "gpu_cost_per_hour": gpu_cost_per_hour,
        "cost_per_1000_pages": None if price is None else round(price, 6),
    }
