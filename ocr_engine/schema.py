"""The engine's output: one ``PageResult`` per page, whatever the backend.

Statuses: ``ok``; ``empty`` (nothing recognised); ``truncated`` (the output stopped
before the page ended: max tokens, no end token, or fewer page separators than
pages); ``repeated`` (a repetition loop: distinct-n below the threshold); ``failed``
(with ``reason``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OK, EMPTY, TRUNCATED, REPEATED, FAILED = "ok", "empty", "truncated", "repeated", "failed"


@dataclass
class Block:
    type: str  # heading | text | table | image | formula | ... (backend vocabulary)
    bbox: tuple[float, float, float, float]  # x0, y0, x1, y1 in PDF points of the page
    text: str
    confidence: float | None = None


@dataclass
class PageResult:
    """One page's result; ``page`` is 1-based."""

    page: int
    markdown: str
    blocks: list[Block] = field(default_factory=list)
    backend: str = ""
    status: str = OK
    reason: str | None = None
    chars: int = 0
    confidence: float | None = None  # mean over blocks, where the backend gives one
    model_version: str | None = None
    weights_digest: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    seconds: float = 0.0  # what a caller waited for this page (rendering and queueing included)
    # Cost accounting (the unlimited backend): the page's share of the decoder's device time
    # (its generate call's time over the rows decoded with it, over the call's pages), and
    # the KV cache of the sequence it was decoded in, per sequence (peak and mean over steps).
    device_seconds: float | None = None
    kv_peak_bytes: int | None = None
    kv_mean_bytes: int | None = None
    batch_size: int | None = None  # sequences decoded together with this page's

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def count_chars(text: str) -> int:
    return sum(1 for c in text if not c.isspace())
