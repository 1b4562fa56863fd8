"""What every vector store speaks: the vector names, the search modes, a hit, a stored point,
and the interface both implementations (``kb.store.edge``, ``kb.store.server``) keep.

No engine here: an extract task imports the pipeline without paying for either client.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, Sequence

import numpy as np

from kb.points import SearchFilter
from kb.sparse import SparseVector

DENSE = "dense"
SPARSE = "sparse"
# Reciprocal rank fusion's k: qdrant-client's (``qdrant_client.hybrid.fusion``), which fused the
# lists before fusion moved here. The literature's 60 flattens the top of each list: with it
# the cross-page group of ``kb eval`` fell from 0.935 to 0.871 (hybrid recall@5, the same
# store; docs/benchmarks/retrieval-eval.md), the chunk holding both pages losing to
# chunks that rank lower in both lists.
RRF_K = 2
# Hits are ordered by score, then by id, whatever the engine: points with equal scores (the
# same boilerplate in two documents, two versions of a chunk) come out in the same order on
# Edge and on a server. Each engine is asked for this many more than wanted, so a tie at the
# cut is seen whole.
TIE_MARGIN = 8
# Payload fields with an index: what deletes (doc_id, sha256) and filters (the rest) match on.
KEYWORD_FIELDS = ("doc_id", "key", "sha256", "prefixes", "language")
INTEGER_FIELDS = ("pages",)


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    DENSE = "dense"
    SPARSE = "sparse"


MODES = tuple(m.value for m in SearchMode)


@dataclass
class Hit:
    id: str
    score: float
    key: str
    pages: list[int]
    text: str
    payload: dict[str, Any]

    @classmethod
    def of(cls, point_id: Any, score: float, payload: dict[str, Any] | None) -> "Hit":
        payload = dict(payload or {})
        return cls(id=str(point_id), score=float(score), key=payload.get("key", ""),
                   pages=list(payload.get("pages", [])), text=payload.get("text", ""), payload=payload)


def ranked(hits: list[Hit], top_k: int) -> list[Hit]:
    """The engine's hits in the one order both implementations answer in: score, then id."""
    return sorted(hits, key=lambda h: (-h.score, h.id))[:top_k]


def fuse(lists: list[list[tuple[str, float]]], weights: list[float], top_k: int,
         k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal rank fusion of ranked ``(id, score)`` lists, as Qdrant weighs it: a point at
    0-based position ``i`` of a list of weight ``w`` gets ``1 / ((i + 1) / w + k - 1)``.

    Done here rather than by the engine: an engine ranks the points a list ties on in an order
    of its own, and Edge and qdrant-client did, so the same points fused differently. Here each
    list is in the one order (score, then id) before its ranks count."""
    scores: dict[str, float] = {}
    for hits, weight in zip(lists, weights):
        if weight <= 0:
            continue
        for i, (point, _score) in enumerate(sorted(hits, key=lambda h: (-h[1], h[0]))):
            scores[point] = scores.get(point, 0.0) + 1.0 / ((i + 1) / weight + k - 1)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]


@dataclass
class StoredPoint:
    """A point as it is stored: what a migration copies and a payload read returns."""

    id: str
    payload: dict[str, Any]
    dense: list[float] | None = None
    sparse: SparseVector | None = None


def candidates_for(top_k: int, candidates: int | None) -> int:
    """How many each list of a hybrid query prefetches (default 4 x top_k, at least 20)."""
    return candidates or max(20, 4 * top_k)


class StoreWriter(Protocol):
    """What index tasks do to the store."""

    def dimension(self) -> int | None: ...
    def ensure_collection(self, dimension: int) -> None: ...
    def upsert(self, ids: Sequence[str], vectors: np.ndarray, sparse: Sequence[SparseVector],
               payloads: Sequence[dict[str, Any]]) -> None: ...
    def delete_all_but(self, doc_id: str, keep_ids: Sequence[str]) -> None: ...
    def delete_document(self, doc_id: str) -> None: ...
    def delete_version(self, doc_id: str, sha256: str) -> None: ...


class StoreReader(Protocol):
    """What searches and payload reads ask of the store."""

    def dimension(self) -> int | None: ...
    def count(self, doc_id: str | None = None) -> int: ...
    def payload(self, point: str) -> dict[str, Any] | None: ...
    def points(self, doc_id: str | None = None, with_vectors: bool = False) -> list[StoredPoint]: ...
    def search(self, dense: np.ndarray | None, sparse: SparseVector | None, top_k: int = 5,
               mode: str = "hybrid", candidates: int | None = None, dense_weight: float = 1.0,
               where: SearchFilter | None = None) -> list[Hit]: ...


def check_mode(mode: str) -> SearchMode:
    try:
        return SearchMode(mode)
    except ValueError:
        raise ValueError(f"unknown search mode {mode!r}; choose one of {MODES}") from None
