"""What an OCR page costs: the rules the service's /metrics and the pipeline's run summary
both apply, so their numbers cannot disagree.

- Only pages an OCR backend read count: a text-layer page costs no device time, and a
  failed page has no result to pay for.
- A page's device time is its ``device_seconds`` (its share of a batched decode) where the
  backend reports one; PP-OCR has no decoder to share, so its whole page time counts.
"""

from __future__ import annotations

from ocr_engine.api.pages import PageResult

HOUR_S = 3600.0


def read_by_ocr(page: PageResult) -> bool:
    return page.read_by_ocr


def device_time(device_seconds: float | None, seconds: float) -> float:
    return seconds if device_seconds is None else device_seconds


def pages_per_device_hour(pages: int, device_seconds: float) -> float | None:
    return pages / (device_seconds / HOUR_S) if pages and device_seconds > 0 else None


def cost_per_1000_pages(cost_per_hour: float | None, pages: int, device_seconds: float) -> float | None:
    if cost_per_hour is None or not pages or device_seconds <= 0:
        return None
    return cost_per_hour * device_seconds / HOUR_S / pages * 1000
