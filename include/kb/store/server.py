"""A Qdrant server (``KB_QDRANT_URL``), through ``qdrant-client``: what compose runs, and the
way past one machine. The same interface and the same answers as the embedded store
(``kb.store.edge``): the tests hold both to one contract suite, the server's side against
qdrant-client's in-process mode, which speaks the same client API (no server binary
installs here).

A server takes writes from many processes and optimizes in its own threads, so index tasks
write to it directly and the search service keeps one client.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager, nullcontext
from typing import Any, ContextManager, Iterator, Sequence

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from kb.errors import IndexMismatch, StoreWriteFailed
from kb.points import LANGUAGE, PAGES, PREFIXES, SearchFilter
from kb.sparse import SparseVector
from kb.store.model import (
    DENSE, INTEGER_FIELDS, KEYWORD_FIELDS, SPARSE, TIE_MARGIN, Hit, SearchMode, StoredPoint, candidates_for,
    check_mode, fuse, ranked,
)

BATCH = 256


@contextmanager
def _write_errors(what: str) -> Iterator[None]:
    """Qdrant's failures on a write (a server's answer, the connection; the in-process
    mode's SQLite file) as one retryable ``StoreWriteFailed``."""
    try:
        yield
    except (UnexpectedResponse, ResponseHandlingException, sqlite3.Error, OSError) as exc:
        raise StoreWriteFailed(f"{what} failed: {type(exc).__name__}: {exc}") from exc


def _filter(where: SearchFilter | None) -> models.Filter | None:
    if not where:
        return None
    must: list[models.Condition] = []
    if where.key_prefix:
        must.append(models.FieldCondition(key=PREFIXES, match=models.MatchValue(value=where.key_prefix)))
    if where.language:
        must.append(models.FieldCondition(key=LANGUAGE, match=models.MatchValue(value=where.language)))
    if where.pages:
        first, last = where.pages
        must.append(models.FieldCondition(key=PAGES, range=models.Range(gte=first, lte=last)))
    return models.Filter(must=must)


def _doc(doc_id: str) -> models.FieldCondition:
    return models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))


class ServerStore:
    """A ``StoreWriter`` and ``StoreReader`` on one collection of a Qdrant server."""

    def __init__(self, client: QdrantClient, collection: str) -> None:
        self.client = client
        self.collection = collection

    @classmethod
    def connect(cls, url: str, api_key: str | None, collection: str) -> "ServerStore":
        return cls(QdrantClient(url=url, api_key=api_key), collection)

    def close(self) -> None:
        self.client.close()

    @contextmanager
    def together(self) -> Iterator[None]:
        yield  # each call is its own request; the server makes every write durable on return

    # the search service's reader protocol (kb.store.service_reader)
    generation: str | None = "server"
    reloads = 0
    loaded_at: float | None = None

    def __call__(self) -> ContextManager[Any]:
        return nullcontext(self)

    def start(self) -> None:
        self.client.get_collections()  # reachable, or the service does not start

    def lag(self) -> int:
        return 0

    # --- writes ---------------------------------------------------------------------------

    def dimension(self) -> int | None:
        if not self.client.collection_exists(self.collection):
            return None
        vectors = self.client.get_collection(self.collection).config.params.vectors
        return vectors[DENSE].size if isinstance(vectors, dict) and DENSE in vectors else None

    def ensure_collection(self, dimension: int) -> None:
        if self.client.collection_exists(self.collection):
            size = self.dimension()
            if size != dimension:
                raise IndexMismatch(
                    f"collection {self.collection!r} holds {size}-d vectors, the embedder makes {dimension}-d; "
                    "use another collection name (KB_COLLECTION) or re-index")
            sparse = self.client.get_collection(self.collection).config.params.sparse_vectors or {}
            if SPARSE not in sparse:
                raise IndexMismatch(
                    f"collection {self.collection!r} has no {SPARSE!r} vector (made before hybrid search); "
                    "use another collection name (KB_COLLECTION) or delete it and re-index with force")
            return
        with _write_errors(f"creating collection {self.collection!r}"):
            self.client.create_collection(
                self.collection,
                vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
                # Qdrant keeps the document frequencies and applies IDF at query time
                sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            )
            for field in KEYWORD_FIELDS:
                self.client.create_payload_index(self.collection, field, models.PayloadSchemaType.KEYWORD)
            for field in INTEGER_FIELDS:
                self.client.create_payload_index(self.collection, field, models.PayloadSchemaType.INTEGER)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, sparse: Sequence[SparseVector],
               payloads: Sequence[dict[str, Any]]) -> None:
        with _write_errors(f"writing {len(ids)} points to {self.collection!r}"):
            for start in range(0, len(ids), BATCH):
                points = [
                    models.PointStruct(id=pid, payload=payload, vector={
                        DENSE: np.asarray(dense, dtype=np.float32).tolist(),
                        SPARSE: models.SparseVector(indices=list(sv.indices), values=list(sv.values)),
                    })
                    for pid, dense, sv, payload in zip(ids[start:start + BATCH], vectors[start:start + BATCH],
                                                       sparse[start:start + BATCH], payloads[start:start + BATCH])
                ]
                self.client.upsert(self.collection, points=points, wait=True)

    def delete_all_but(self, doc_id: str, keep_ids: Sequence[str]) -> None:
        keep = [models.HasIdCondition(has_id=list(keep_ids))] if keep_ids else []
        self._delete(models.Filter(must=[_doc(doc_id)], must_not=keep))

    def delete_document(self, doc_id: str) -> None:
        self._delete(models.Filter(must=[_doc(doc_id)]))

    def delete_version(self, doc_id: str, sha256: str) -> None:
        self._delete(models.Filter(must=[
            _doc(doc_id), models.FieldCondition(key="sha256", match=models.MatchValue(value=sha256))]))

    def _delete(self, flt: models.Filter) -> None:
        if not self.client.collection_exists(self.collection):
            return
        with _write_errors(f"deleting points of {self.collection!r}"):
            self.client.delete(self.collection, points_selector=models.FilterSelector(filter=flt), wait=True)

    # --- reads ----------------------------------------------------------------------------

    def count(self, doc_id: str | None = None) -> int:
        if not self.client.collection_exists(self.collection):
            return 0
        flt = models.Filter(must=[_doc(doc_id)]) if doc_id else None
        return self.client.count(self.collection, count_filter=flt, exact=True).count

    def payload(self, point: str) -> dict[str, Any] | None:
        if not self.client.collection_exists(self.collection):
            return None
        found = self.client.retrieve(self.collection, [point], with_payload=True, with_vectors=False)
        return dict(found[0].payload or {}) if found else None

    def points(self, doc_id: str | None = None, with_vectors: bool = False) -> list[StoredPoint]:
        if not self.client.collection_exists(self.collection):
            return []
        flt = models.Filter(must=[_doc(doc_id)]) if doc_id else None
        out, offset = [], None
        while True:
            records, offset = self.client.scroll(self.collection, scroll_filter=flt, limit=256, offset=offset,
                                                 with_vectors=with_vectors)
            for r in records:
                point = StoredPoint(str(r.id), dict(r.payload or {}))
                if with_vectors and isinstance(r.vector, dict):
                    dense, sv = r.vector.get(DENSE), r.vector.get(SPARSE)
                    point.dense = list(dense) if dense is not None else None
                    point.sparse = SparseVector(list(sv.indices), list(sv.values)) if sv is not None else None
                out.append(point)
            if offset is None:
                return out

    def search(self, dense: np.ndarray | None, sparse: SparseVector | None, top_k: int = 5,
               mode: str = "hybrid", candidates: int | None = None, dense_weight: float = 1.0,
               where: SearchFilter | None = None) -> list[Hit]:
        """Top ``top_k`` chunks; ``hybrid`` takes ``candidates`` by each vector and fuses the two
        lists by reciprocal rank, the dense list weighted by ``dense_weight``."""
        mode = check_mode(mode)
        if not self.client.collection_exists(self.collection):
            return []
        flt, limit = _filter(where), top_k + TIE_MARGIN
        sparse_query = (models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
                        if sparse and len(sparse) else None)
        if mode is SearchMode.DENSE:
            result = self.client.query_points(self.collection, query=np.asarray(dense, dtype=np.float32).tolist(),
                                              using=DENSE, limit=limit, query_filter=flt, with_payload=True)
        elif mode is SearchMode.SPARSE:
            if sparse_query is None:
                return []
            result = self.client.query_points(self.collection, query=sparse_query, using=SPARSE, limit=limit,
                                              query_filter=flt, with_payload=True)
        else:
            return self._hybrid(dense, sparse_query, top_k, candidates_for(top_k, candidates), dense_weight, flt)
        return ranked([Hit.of(p.id, p.score, p.payload) for p in result.points], top_k)

    def _hybrid(self, dense, sparse_query, top_k: int, n: int, dense_weight: float, flt) -> list[Hit]:
        """Both lists in one batch (ids and scores only), fused as on Edge (``kb.store.model.fuse``),
        then the payloads of the few kept."""
        requests = [models.QueryRequest(query=np.asarray(dense, dtype=np.float32).tolist(), using=DENSE,
                                        limit=n + TIE_MARGIN, filter=flt, with_payload=False)]
        if sparse_query is not None:
            requests.append(models.QueryRequest(query=sparse_query, using=SPARSE, limit=n + TIE_MARGIN, filter=flt,
                                                with_payload=False))
        lists = [sorted(((str(p.id), p.score) for p in found.points), key=lambda h: (-h[1], h[0]))[:n]
                 for found in self.client.query_batch_points(self.collection, requests)]
        fused = fuse(lists, [dense_weight, 1.0][:len(lists)], top_k)
        payloads = {str(r.id): r.payload for r in self.client.retrieve(self.collection, [i for i, _ in fused],
                                                                      with_payload=True, with_vectors=False)}
        return [Hit.of(i, score, payloads.get(i)) for i, score in fused]
