"""A read-only, in-memory copy of a collection that answers queries in milliseconds.

Qdrant's local mode scores sparse vectors in a Python loop over every point (about 80 ms
a query over 3,000 chunks, growing with the collection), which is fine for a batch job and
too slow for a service. This holds the same points as numpy arrays: the dense vectors as
one matrix (cosine = dot product of unit vectors) and the sparse vectors as a CSC matrix,
with Qdrant's IDF (``ln((N - df + 0.5) / (df + 0.5) + 1)`` over every point, applied to the
query) and Qdrant's own reciprocal rank fusion (``qdrant_client.hybrid.fusion``) on the
two lists. A test checks that it ranks as Qdrant's local mode does, on the same store.

It answers ``search``, ``payload`` and ``dimension`` as ``kb.vectorstore.VectorStore`` does,
so a ``Retriever`` (and the page endpoint) takes either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from qdrant_client import models
from qdrant_client.hybrid.fusion import reciprocal_rank_fusion
from scipy import sparse as sp

from kb.points import SearchFilter
from kb.sparse import SparseVector
from kb.vectorstore import DENSE, MODES, SPARSE, Hit, VectorStore


@dataclass
class MemoryStore:
    ids: list[str]
    payloads: list[dict[str, Any]]
    dense: np.ndarray  # (n, dimension) float32, unit rows
    sparse: sp.csc_matrix  # (n, terms) float32; by column, since a query reads a few terms' columns
    columns: dict[int, int]  # sparse term id -> column
    idf: np.ndarray  # per column

    @classmethod
    def load(cls, store: VectorStore) -> "MemoryStore":
        """Every point of ``store``'s collection, with vectors and payload."""
        records = store.points(with_vectors=True)
        dimension = store.dimension() or 0
        dense = np.zeros((len(records), dimension), dtype=np.float32)
        columns: dict[int, int] = {}
        rows, cols, values = [], [], []
        for i, r in enumerate(records):
            vectors = r.vector if isinstance(r.vector, dict) else {}
            vector = np.asarray(vectors.get(DENSE, ()), dtype=np.float32)
            if vector.size:
                dense[i] = vector / max(float(np.linalg.norm(vector)), 1e-12)
            sv = vectors.get(SPARSE)
            if sv is not None:
                for index, value in zip(sv.indices, sv.values):
                    rows.append(i)
                    cols.append(columns.setdefault(int(index), len(columns)))
                    values.append(value)
        matrix = sp.csc_matrix((np.asarray(values, dtype=np.float32), (rows, cols)),
                               shape=(len(records), len(columns)), dtype=np.float32)
        df = np.bincount(np.asarray(cols, dtype=np.int64), minlength=len(columns)) if cols else np.zeros(0)
        n = len(records)
        idf = np.array([math.log((n - d + 0.5) / (d + 0.5) + 1) for d in df], dtype=np.float32)
        return cls([str(r.id) for r in records], [dict(r.payload or {}) for r in records], dense, matrix, columns, idf)

    def dimension(self) -> int | None:
        return self.dense.shape[1] if self.ids else None

    @cached_property
    def _rows(self) -> dict[str, int]:
        return {pid: i for i, pid in enumerate(self.ids)}

    def payload(self, point: str) -> dict[str, Any] | None:
        row = self._rows.get(point)
        return None if row is None else self.payloads[row]

    def __len__(self) -> int:
        return len(self.ids)

    def search(self, dense: np.ndarray | None, sparse: SparseVector | None, top_k: int = 5,
               mode: str = "hybrid", candidates: int | None = None, dense_weight: float = 1.0,
               where: SearchFilter | None = None) -> list[Hit]:
        if mode not in MODES:
            raise ValueError(f"unknown search mode {mode!r}; choose one of {MODES}")
        if not self.ids:
            return []
        mask = self._mask(where)
        if mode == "dense":
            return self._hits(self._dense(dense, mask, top_k))
        if mode == "sparse":
            return self._hits(self._sparse(sparse, mask, top_k))
        n = candidates or max(20, 4 * top_k)
        lists, weights = [self._dense(dense, mask, n)], [dense_weight]
        if sparse is not None and sparse.indices:
            lists.append(self._sparse(sparse, mask, n))
            weights.append(1.0)
        fused = reciprocal_rank_fusion(
            [[models.ScoredPoint(id=self.ids[i], version=0, score=s) for i, s in ranked] for ranked in lists],
            limit=top_k, weights=None if dense_weight == 1.0 else weights)
        index_of = {self.ids[i]: i for ranked in lists for i, _ in ranked}
        return self._hits([(index_of[str(p.id)], p.score) for p in fused])

    def _dense(self, query: np.ndarray | None, mask: np.ndarray | None, limit: int) -> list[tuple[int, float]]:
        q = np.asarray(query, dtype=np.float32)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        return _top(self.dense @ q, mask, limit)

    def _sparse(self, query: SparseVector | None, mask: np.ndarray | None, limit: int) -> list[tuple[int, float]]:
        if query is None:
            return []
        known = [(self.columns[i], v) for i, v in zip(query.indices, query.values) if i in self.columns]
        if not known:
            return []
        cols = np.array([c for c, _ in known])
        weights = np.array([v for _, v in known], dtype=np.float32) * self.idf[cols]
        block = self.sparse[:, cols]
        scores = np.asarray(block @ weights, dtype=np.float32).ravel()
        overlap = np.asarray(block.getnnz(axis=1) > 0).ravel()  # Qdrant leaves out points with no common term
        keep = overlap if mask is None else overlap & mask
        return _top(scores, keep, limit)

    def _mask(self, where: SearchFilter | None) -> np.ndarray | None:
        if not where:
            return None
        return np.array([where.keeps(payload) for payload in self.payloads], dtype=bool)

    def _hits(self, ranked: list[tuple[int, float]]) -> list[Hit]:
        return [Hit(id=self.ids[i], score=float(score), key=self.payloads[i].get("key", ""), pages=list(self.payloads[i].get("pages", [])),
                    text=self.payloads[i].get("text", ""), payload=self.payloads[i]) for i, score in ranked]


def _top(scores: np.ndarray, mask: np.ndarray | None, limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best (index, score), best first, among points ``mask`` keeps."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    limit = min(limit, int(np.isfinite(scores).sum()))
    if limit <= 0:
        return []
    best = np.argpartition(-scores, limit - 1)[:limit]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(i), float(scores[i])) for i in best]
