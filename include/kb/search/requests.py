"""The search service's request bodies: a search and its filter, bounded by the settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kb.points import SearchFilter
from kb.settings import PipelineSettings, SearchSettings


class FilterIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key_prefix: str | None = Field(None, min_length=1, max_length=1024,
                                   description="a folder (ending in /) or a whole key")
    language: Literal["en", "zh"] | None = None
    pages: tuple[int, int] | None = Field(None, description="[first, last]: chunks touching these pages")

    @field_validator("pages")
    @classmethod
    def _range(cls, value):
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError("pages must be [first, last] with 1 <= first <= last")
        return value

    def where(self) -> SearchFilter:
        return SearchFilter(self.key_prefix, self.language, self.pages)


def search_request(settings: SearchSettings, pipeline: PipelineSettings) -> type[BaseModel]:
    """The body of ``POST /v1/search``, its bounds the service's settings."""

    class SearchIn(BaseModel):
        model_config = ConfigDict(extra="forbid")

        query: str = Field(max_length=settings.max_query_chars)
        top_k: int = Field(5, ge=1, le=settings.max_top_k)
        mode: Literal["hybrid", "dense", "sparse"] = pipeline.search_mode  # type: ignore[assignment]
        filter: FilterIn | None = None

        @field_validator("query")
        @classmethod
        def _not_blank(cls, value: str) -> str:
            if not value.strip():
                raise ValueError("the query is empty")
            return value

    return SearchIn
