"""The Qdrant side: one collection of chunks, each with a named dense vector and a named
sparse lexical vector (BM25-style weights, IDF applied by Qdrant).

Search modes: ``dense``, ``sparse`` and ``hybrid`` (both as prefetches, fused by Qdrant's
reciprocal rank fusion in one query_points call).

Local mode keeps the whole store in one folder that only one process may open at a
time, so every access goes through an exclusive file lock held only as long as the
operation: Airflow task processes and ``kb search`` take turns instead of failing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from kb import failpoints
from kb.errors import IndexMismatch, StoreBusy, StoreWriteFailed
from kb.points import LANGUAGE, PAGES, PREFIXES, SearchFilter
from kb.settings import PipelineSettings
from kb.sparse import SparseVector

DENSE = "dense"
SPARSE = "sparse"
MODES = ("hybrid", "dense", "sparse")


@dataclass
class Hit:
    id: str
    score: float
    key: str
    pages: list[int]
    text: str
    payload: dict[str, Any]


def _lock_path(store: Path) -> Path:
    return store.with_name(store.name + ".lock")


def _generation_path(store: Path) -> Path:
    return store.with_name(store.name + ".generation")


def _mark_generation(store: Path) -> None:
    marker = _generation_path(store)
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}")
    tmp.write_text(uuid.uuid4().hex)
    tmp.replace(marker)


@contextmanager
def _write_errors(what: str) -> Iterator[None]:
    """Qdrant's failures on a write, server or local (its SQLite file, the disk), as one
    retryable ``StoreWriteFailed``."""
    try:
        yield
    except (UnexpectedResponse, ResponseHandlingException, sqlite3.Error, OSError) as exc:
        raise StoreWriteFailed(f"{what} failed: {type(exc).__name__}: {exc}") from exc


@contextmanager
def _exclusive(lock_path: Path, timeout_s: float) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreBusy(f"the Qdrant store at {lock_path.parent} stayed locked for {timeout_s:.0f}s")
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class VectorStore:
    def __init__(self, client: QdrantClient, collection: str) -> None:
        self.client = client
        self.collection = collection
        self.wrote = False  # set by every write: a local store then marks its new generation

    @classmethod
    @contextmanager
    def open(cls, settings: PipelineSettings | None = None) -> Iterator["VectorStore"]:
        """A store for the duration of the ``with`` block (holding the lock in local mode)."""
        s = settings or PipelineSettings()
        if s.qdrant_url:
            key = s.qdrant_api_key.get_secret_value() if s.qdrant_api_key else None
            client = QdrantClient(url=s.qdrant_url, api_key=key)
            try:
                yield cls(client, s.collection)
            finally:
                client.close()
            return
        path = s.resolved_qdrant_path
        with _exclusive(_lock_path(path), s.qdrant_lock_timeout_s):
            path.mkdir(parents=True, exist_ok=True)
            client = QdrantClient(path=str(path))
            store = cls(client, s.collection)
            try:
                yield store
            finally:
                client.close()
                if store.wrote:
                    _mark_generation(path)

    @staticmethod
    def generation(settings: PipelineSettings) -> str | None:
        """Local mode: a token that changes whenever a writer has closed the store after
        writing (None before the first such write). Readers that keep a copy compare it."""
        try:
            return _generation_path(settings.resolved_qdrant_path).read_text()
        except FileNotFoundError:
            return None

    @staticmethod
    def copy_local(settings: PipelineSettings, dest: Path) -> str | None:
        """Copy the local store's folder to ``dest`` under its lock (no writer mid-way), and
        return the generation copied. Milliseconds for thousands of chunks: a reader that
        opens the copy leaves the store free for index tasks."""
        path = settings.resolved_qdrant_path
        with _exclusive(_lock_path(path), settings.qdrant_lock_timeout_s):
            generation = VectorStore.generation(settings)
            if path.exists():
                shutil.copytree(path, dest, ignore=shutil.ignore_patterns(".lock"))
            else:
                dest.mkdir(parents=True)
        return generation

    def dimension(self) -> int | None:
        """The dense vectors' size in the collection; None when there is no collection yet."""
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
                    "use another collection name (KB_COLLECTION) or re-index"
                )
            sparse = self.client.get_collection(self.collection).config.params.sparse_vectors or {}
            if SPARSE not in sparse:
                raise IndexMismatch(
                    f"collection {self.collection!r} has no {SPARSE!r} vector (made before hybrid search); "
                    "use another collection name (KB_COLLECTION) or delete it and re-index with force"
                )
            return
        self.wrote = True
        self.client.create_collection(
            self.collection,
            vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
            # Qdrant keeps the document frequencies and applies IDF at query time
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        for field in ("doc_id", "key", "sha256"):
            self.client.create_payload_index(self.collection, field, models.PayloadSchemaType.KEYWORD)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, sparse: Sequence[SparseVector],
               payloads: Sequence[dict[str, Any]], batch: int = 256) -> None:
        """Write the points in batches; a failure part-way leaves the batches before it
        written (``index_batch`` withdraws them)."""
        self.wrote = True
        fault = failpoints.claim(failpoints.QDRANT_UPSERT)
        with _write_errors(f"writing {len(ids)} points to {self.collection!r}"):
            if fault is not None:  # a test's fault: the first n points go in, then the write fails
                n = int(fault.get("after_points", 0))
                self._upsert(ids[:n], vectors[:n], sparse[:n], payloads[:n], batch)
                raise OSError(f"failpoint {failpoints.QDRANT_UPSERT}: the write failed after {n} points")
            self._upsert(ids, vectors, sparse, payloads, batch)

    def _upsert(self, ids: Sequence[str], vectors: np.ndarray, sparse: Sequence[SparseVector],
                payloads: Sequence[dict[str, Any]], batch: int) -> None:
        for start in range(0, len(ids), batch):
            points = [
                models.PointStruct(id=pid, payload=payload, vector={
                    DENSE: dense.tolist(),
                    SPARSE: models.SparseVector(indices=list(sv.indices), values=list(sv.values)),
                })
                for pid, dense, sv, payload in zip(ids[start:start + batch], vectors[start:start + batch],
                                                   sparse[start:start + batch], payloads[start:start + batch])
            ]
            self.client.upsert(self.collection, points=points, wait=True)

    def delete_all_but(self, doc_id: str, keep_ids: Sequence[str]) -> None:
        """Remove every point of the document but ``keep_ids``: other versions' points, and
        the chunks of this version that a new chunking no longer makes (same content, fewer
        chunks: their ids would otherwise stay searchable)."""
        self._delete(doc_id, [], [models.HasIdCondition(has_id=list(keep_ids))])

    def delete_document(self, doc_id: str) -> None:
        """Remove every point of the document (it left the inbox)."""
        self._delete(doc_id, [], [])

    def delete_version(self, doc_id: str, sha256: str) -> None:
        """Remove the points of one content version of the document (a write that failed part-way)."""
        self._delete(doc_id, [models.FieldCondition(key="sha256", match=models.MatchValue(value=sha256))], [])

    def _delete(self, doc_id: str, must: list, must_not: list) -> None:
        self.wrote = True
        must = [models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id)), *must]
        with _write_errors(f"deleting points of {doc_id}"):
            self.client.delete(
                self.collection,
                points_selector=models.FilterSelector(filter=models.Filter(must=must, must_not=must_not)),
                wait=True,
            )

    def count(self, doc_id: str | None = None) -> int:
        if not self.client.collection_exists(self.collection):
            return 0
        flt = None
        if doc_id:
            flt = models.Filter(must=[models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))])
        return self.client.count(self.collection, count_filter=flt, exact=True).count

    def payload(self, point: str) -> dict[str, Any] | None:
        """One chunk's payload by its point id; None when there is no such point."""
        if not self.client.collection_exists(self.collection):
            return None
        found = self.client.retrieve(self.collection, [point], with_payload=True, with_vectors=False)
        return dict(found[0].payload or {}) if found else None

    def points(self, doc_id: str | None = None, with_vectors: bool = False) -> list[models.Record]:
        """Every point (payload; vectors if asked) of one document or of the collection."""
        if not self.client.collection_exists(self.collection):
            return []
        flt = None
        if doc_id:
            flt = models.Filter(must=[models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))])
        out, offset = [], None
        while True:
            records, offset = self.client.scroll(self.collection, scroll_filter=flt, limit=256, offset=offset,
                                                 with_vectors=with_vectors)
            out.extend(records)
            if offset is None:
                return out

    def search(self, dense: np.ndarray | None, sparse: SparseVector | None, top_k: int = 5,
               mode: str = "hybrid", candidates: int | None = None, dense_weight: float = 1.0,
               where: SearchFilter | None = None) -> list[Hit]:
        """Top ``top_k`` chunks. ``hybrid`` prefetches ``candidates`` (default 4 x top_k, at
        least 20) by each vector and lets Qdrant fuse the two lists by reciprocal rank,
        the dense list's ranks weighted by ``dense_weight`` (the sparse list's by 1).
        ``where`` restricts every list (Qdrant filters before it ranks)."""
        if mode not in MODES:
            raise ValueError(f"unknown search mode {mode!r}; choose one of {MODES}")
        if not self.client.collection_exists(self.collection):
            return []
        flt = _filter(where)
        sparse_query = models.SparseVector(indices=list(sparse.indices), values=list(sparse.values)) if sparse else None
        if mode == "dense":
            result = self.client.query_points(self.collection, query=dense.tolist(), using=DENSE, limit=top_k,
                                              query_filter=flt, with_payload=True)
        elif mode == "sparse":
            if not sparse_query or not sparse_query.indices:
                return []
            result = self.client.query_points(self.collection, query=sparse_query, using=SPARSE, limit=top_k,
                                              query_filter=flt, with_payload=True)
        else:
            n = candidates or max(20, 4 * top_k)
            prefetch = [models.Prefetch(query=dense.tolist(), using=DENSE, limit=n, filter=flt)]
            weights = [dense_weight]
            if sparse_query and sparse_query.indices:
                prefetch.append(models.Prefetch(query=sparse_query, using=SPARSE, limit=n, filter=flt))
                weights.append(1.0)
            fusion = (models.FusionQuery(fusion=models.Fusion.RRF) if dense_weight == 1.0 else
                      models.RrfQuery(rrf=models.Rrf(weights=weights)))
            result = self.client.query_points(self.collection, prefetch=prefetch, query=fusion, limit=top_k,
                                              with_payload=True)
        return [
            Hit(
                id=str(p.id),
                score=float(p.score),
                key=p.payload.get("key", ""),
                pages=list(p.payload.get("pages", [])),
                text=p.payload.get("text", ""),
                payload=dict(p.payload),
            )
            for p in result.points
        ]


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
