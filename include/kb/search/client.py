"""What ``kb search`` and ``kb eval`` ask the search service with: httpx only, so a command
that searches starts in a fraction of a second (no torch, no Qdrant client)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from kb.errors import KbError
from kb.points import SearchFilter


class SearchServiceError(KbError):
    code = "search_service_error"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SearchClient:
    base_url: str
    api_key: str | None = field(repr=False)  # a secret: never in a repr
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
        return self._ask("POST", "/v1/search", json=body)["hits"]

    def chunks(self, doc_id: str) -> list[dict[str, Any]]:
        """The document's indexed chunks (``{"id", "payload"}``), [] when none is indexed."""
        try:
            return self._ask("GET", f"/v1/documents/{doc_id}/chunks")["chunks"]
        except SearchServiceError as exc:
            if exc.status == 404:
                return []
            raise

    def _ask(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise SearchServiceError(f"the search service at {self.base_url} did not answer: {exc}") from None
        if resp.status_code != 200:
            try:
                error = resp.json()["error"]
            except (ValueError, KeyError):
                error = {"code": str(resp.status_code), "message": resp.text[:200]}
            raise SearchServiceError(f"the search service answered {resp.status_code} {error['code']}: "
                                     f"{error['message']}", status=resp.status_code)
        return resp.json()

    def search_many(self, queries: list[str], top_k: int = 5, modes: tuple[str, ...] | None = None,
                    where: SearchFilter | None = None) -> dict[str, list[list[dict[str, Any]]]]:
        """What ``kb_dev.evaluation.evaluate`` asks of a retriever."""
        modes = modes or ("hybrid",)
        return {m: [self.search(q, top_k, m, where) for q in queries] for m in modes}
