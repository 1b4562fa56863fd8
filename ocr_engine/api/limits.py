"""What the engine can take in one call, and how fast it goes: for whoever plans its work.

The OCR service publishes this beside its own request limits (``GET /v1/limits``, whose
shape is ``contract.PublishedLimits``); the pipeline's planner reads it from there,
or straight from the engine when it runs the engine in process. Nobody else keeps a copy
of these numbers.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, TypeVar


R = TypeVar("R")


def from_fields(cls: type[R], data: dict[str, Any], **typed: Any) -> R:
    """A record of a flat dataclass from its published dict: every field must be there, except
    one with a default (added after the record was first published, so an older writer lacks
    it); fields a newer writer added are left out. ``typed`` gives fields already parsed."""
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    return cls(**{f.name: typed[f.name] if f.name in typed else data[f.name]  # type: ignore[arg-type]
                  for f in fields(cls) if f.name in typed or f.name in data or f.name in required})


@dataclass(frozen=True)
class TokenBudget:
    context_length: int
    visual_tokens_per_page: int
    prompt_tokens: int
    output_tokens_per_page: int

    def tokens_for(self, pages: int) -> int:
        return self.prompt_tokens + pages * (self.visual_tokens_per_page + self.output_tokens_per_page)

    def max_pages(self) -> int:
        """The largest page range that fits; at least 1 if even one page fits, else 0."""
        per_page = self.visual_tokens_per_page + self.output_tokens_per_page
        return max(0, (self.context_length - self.prompt_tokens) // per_page)


@dataclass(frozen=True)
class EngineLimits:
    # what the ``auto`` route uses for pages without a usable text layer
    ocr_backend: str
    # the pages one call of that backend takes; None where pages go one by one
    max_pages_per_call: int | None
    token_budget: TokenBudget | None
    # expected seconds per page, by backend (``textlayer`` included), from pace.PageClock
    seconds_per_page: dict[str, float]
    # the clock's full rows: estimate, prior, observed p50 and p90, samples
    pace: dict[str, dict[str, Any]]
    # a page with less text-layer text than this is read by OCR (the ``auto`` route); the
    # planner counts such pages as scanned with this same number
    min_text_chars: int
    # the reading rules' version the engine stamps on each page (``pages.EXTRACTION_VERSION``);
    # a planner compares stored results with it. None from a service older than the field.
    extraction_version: str | None = None
    # the OCR model ``ocr_backend`` reads with (``pages.ocr_model_id``): a ``reread`` run reads
    # again the stored OCR pages another model read. None from a service older than the field.
    ocr_model: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.token_budget is not None:
            out["token_budget"]["max_pages"] = self.token_budget.max_pages()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EngineLimits":
        budget = data["token_budget"]
        return from_fields(cls, data, token_budget=from_fields(TokenBudget, budget) if budget is not None else None)
