"""What the engine can take in one call, and how fast it goes: for whoever plans its work.

The OCR service publishes this beside its own request limits (``GET /v1/limits``); the
pipeline's planner reads it from there, or straight from the engine when it runs the
engine in process. Nobody else keeps a copy of these numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ocr_engine.unlimited.budget import TokenBudget


@dataclass(frozen=True)
class EngineLimits:
    # what the ``auto`` route uses for pages without a usable text layer
    ocr_backend: str
    # the pages one generate call takes (the token budget); None where pages go one by one
    max_pages_per_call: int | None
    token_budget: TokenBudget | None
    # expected seconds per page, by backend (``textlayer`` included), from pace.PageClock
    seconds_per_page: dict[str, float]
    # the clock's full rows: estimate, prior, observed p50 and p90, samples
    pace: dict[str, dict[str, Any]]
    # a page with less text-layer text than this is read by OCR (the ``auto`` route); the
    # planner counts such pages as scanned with this same number
    min_text_chars: int

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.token_budget is not None:
            out["token_budget"]["max_pages"] = self.token_budget.max_pages()
        return out
