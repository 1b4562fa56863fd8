"""What ``kb search`` and ``kb eval`` ask the search service with: httpx only, so a command
that searches starts in a fraction of a second (no torch, no Qdrant client)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from kb.errors import KbError
from kb.points import SearchFilter


class SearchServiceError(KbError):
    code = "search_service_error"


@dataclass
class SearchClient:
    base_url: str
    api_key: str | None
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(base_url=self.base_url.rstrip("/"), headers=headers, timeout=self.timeout_s)

    def close(self) -> None:
        self._http.close()

    def healthy(self) -> bool:
        try:
            return self._http.get("/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def search(self, query: str, top_k: int = 5, mode: str | None = None,
               where: SearchFilter | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"query": query, "top_k": top_k}
        if mode:
            body["mode"] = mode
        if where:
            body["filter"] = where.as_dict()
        try:
            resp = self._http.post("/v1/search", json=body)
        except httpx.TransportError as exc:
            raise SearchServiceError(f"the search service at {self.base_url} did not answer: {exc}") from None
        if resp.status_code != 200:
            try:
                error = resp.json()["error"]
            except (ValueError, KeyError):
                error = {"code": str(resp.status_code), "message": resp.text[:200]}
            raise SearchServiceError(f"the search service answered {resp.status_code} {error['code']}: {error['message']}")
        return resp.json()["hits"]

    def search_many(self, queries: list[str], top_k: int = 5, modes: tuple[str, ...] | None = None,
                    where: SearchFilter | None = None) -> dict[str, list[list[dict[str, Any]]]]:
        """What ``kb.evaluation.evaluate`` asks of a retriever."""
        modes = modes or ("hybrid",)
        return {m: [self.search(q, top_k, m, where) for q in queries] for m in modes}
