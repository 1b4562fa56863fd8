"""The embedded store: one Qdrant Edge shard (``qdrant-edge-py``), Qdrant's own engine in this
process: segments, HNSW, payload indexes, sparse vectors with the IDF modifier, RRF fusion.

One process at a time may open a shard (a second is refused at once: "failed to open WAL ...
WouldBlock"), and every call holds the Python interpreter's lock for its whole length: a
query for milliseconds, ``optimize`` (building HNSW) for as long as it runs, minutes at a
million points. So the processes that serve searches do not optimize while they are asked
(``kb.store.replica``), and writers never open a shard: they append to the log
(``kb.store.oplog``), which the shard's owner applies.

Memory, for a million chunks in 2 GB: the original dense vectors and the payload stay on disk
(mmap, read for the few points a query rescores or returns); in RAM are the int8 copies of the
dense vectors the HNSW search runs on, the graph, the sparse index and the payload indexes.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import qdrant_edge as qe

from kb.errors import IndexMismatch, StoreBusy, StoreWriteFailed
from kb.points import LANGUAGE, PAGES, PREFIXES, SearchFilter
from kb.settings import StoreSettings
from kb.sparse import SparseVector
from kb.store.model import (
    DENSE, INTEGER_FIELDS, KEYWORD_FIELDS, SPARSE, TIE_MARGIN, Hit, SearchMode, StoredPoint, candidates_for,
    check_mode, fuse, ranked,
)

log = logging.getLogger(__name__)
CONFIG_FILE = "edge_config.json"  # Edge's own record of a shard's configuration
BATCH = 256


def shard_config(dimension: int, s: StoreSettings) -> qe.EdgeConfig:
    quantization = None
    if s.quantize:
        # int8 copies, in RAM, are what HNSW walks; the originals (on disk) rescore the best
        quantization = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, memory=qe.Memory.Pinned)
    dense = qe.EdgeVectorParams(
        size=dimension, distance=qe.Distance.Cosine, memory=qe.Memory.Cold if s.quantize else None,
        quantization_config=quantization,
        hnsw_config=qe.HnswIndexConfig(m=s.hnsw_m, ef_construct=s.hnsw_ef_construct,
                                       full_scan_threshold=s.full_scan_threshold_kb),
    )
    return qe.EdgeConfig(
        vectors={DENSE: dense},
        # Qdrant keeps the document frequencies and applies IDF at query time
        # the sparse index stays on disk (mmap): a query reads the few postings of its terms
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=qe.Memory.Cold)},
        payload_memory=qe.Memory.Cold,
        id_tracker_memory=qe.Memory.Cold,
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=s.indexing_threshold_kb,
                                           default_segment_number=s.segments, max_segment_size=s.max_segment_kb),
        max_search_threads=s.search_threads,
    )


def shard_dimension(path: Path) -> int | None:
    """The dense size a shard was made with (from Edge's own config file); None: no shard."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except FileNotFoundError:
        return None
    return int(config["vectors"][DENSE]["size"])


@contextmanager
def _engine_errors(what: str, write: bool) -> Iterator[None]:
    """Edge raises plain exceptions; they become the store's own errors here."""
    try:
        yield
    except (RuntimeError, OSError, ValueError) as exc:
        if write:
            raise StoreWriteFailed(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        raise


def open_shard(path: Path, dimension: int | None, s: StoreSettings) -> qe.EdgeShard | None:
    """Load the shard at ``path``, or create it for ``dimension`` (None: none yet, and none made).
    StoreBusy when another process holds it."""
    try:
        if shard_dimension(path) is not None:
            return qe.EdgeShard.load(str(path))
        if dimension is None:
            return None
        path.mkdir(parents=True, exist_ok=True)
        shard = qe.EdgeShard.create(str(path), shard_config(dimension, s))
    except Exception as exc:  # noqa: BLE001 - Edge's one exception type for a held lock and all else
        if "WouldBlock" in str(exc) or "lock" in str(exc).lower():
            raise StoreBusy(f"the store's shard at {path} is open in another process") from None
        raise
    for field in KEYWORD_FIELDS:  # on disk too: a filter reads its value's postings
        shard.update(qe.UpdateOperation.create_field_index(field, qe.KeywordIndexParams(memory=qe.Memory.Cold)))
    for field in INTEGER_FIELDS:
        shard.update(qe.UpdateOperation.create_field_index(
            field, qe.IntegerIndexParams(lookup=True, range=True, memory=qe.Memory.Cold)))
    return shard


def _edge_filter(where: SearchFilter | None) -> qe.Filter | None:
    if not where:
        return None
    must: list[Any] = []
    if where.key_prefix:
        must.append(qe.FieldCondition(key=PREFIXES, match=qe.MatchValue(where.key_prefix)))
    if where.language:
        must.append(qe.FieldCondition(key=LANGUAGE, match=qe.MatchValue(where.language)))
    if where.pages:
        first, last = where.pages
        must.append(qe.FieldCondition(key=PAGES, range=qe.RangeFloat(gte=first, lte=last)))
    return qe.Filter(must=must)


def _doc(doc_id: str, *more: Any) -> list[Any]:
    return [qe.FieldCondition(key="doc_id", match=qe.MatchValue(doc_id)), *more]


def _stored(record: Any, with_vectors: bool) -> StoredPoint:
    point = StoredPoint(str(record.id), dict(record.payload or {}))
    if with_vectors and record.vector:
        dense, sparse = record.vector.get(DENSE), record.vector.get(SPARSE)
        point.dense = list(dense) if dense is not None else None
        point.sparse = SparseVector(list(sparse.indices), list(sparse.values)) if sparse is not None else None
    return point


class EdgeStore:
    """A store on one open Edge shard (a ``StoreWriter`` and a ``StoreReader``). The shard may be
    absent until the first ``ensure_collection`` (an empty store answers nothing)."""

    def __init__(self, path: Path, shard: qe.EdgeShard | None, settings: StoreSettings) -> None:
        self.path = path
        self.shard = shard
        self.settings = settings

    @classmethod
    def open(cls, path: Path, settings: StoreSettings, dimension: int | None = None) -> "EdgeStore":
        return cls(path, open_shard(path, dimension, settings), settings)

    def close(self) -> None:
        if self.shard is not None:
            self.shard.flush()
            self.shard.close()
            self.shard = None

    # --- writes ---------------------------------------------------------------------------

    def dimension(self) -> int | None:
        return shard_dimension(self.path)

    def ensure_collection(self, dimension: int) -> None:
        found = self.dimension()
        if found is not None and found != dimension:
            raise IndexMismatch(f"the store at {self.path} holds {found}-d vectors, the embedder makes {dimension}-d; "
                                "use another collection name (KB_COLLECTION) or re-index")
        if self.shard is None:
            self.shard = open_shard(self.path, dimension, self.settings)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, sparse: Sequence[SparseVector],
               payloads: Sequence[dict[str, Any]]) -> None:
        if self.shard is None:
            raise StoreWriteFailed(f"no shard at {self.path}: ensure_collection first")
        with _engine_errors(f"writing {len(ids)} points", write=True):
            for start in range(0, len(ids), BATCH):
                points = [
                    qe.Point(pid, {DENSE: np.asarray(dense, dtype=np.float32).tolist(),
                                   SPARSE: qe.SparseVector(list(sv.indices), list(sv.values))}, payload)
                    for pid, dense, sv, payload in zip(ids[start:start + BATCH], vectors[start:start + BATCH],
                                                       sparse[start:start + BATCH], payloads[start:start + BATCH])
                ]
                self.shard.update(qe.UpdateOperation.upsert_points(points))

    def delete_all_but(self, doc_id: str, keep_ids: Sequence[str]) -> None:
        """Every point of the document but ``keep_ids``: other versions', and chunks a new
        chunking of the same content no longer makes."""
        keep = [qe.HasIdCondition(set(keep_ids))] if keep_ids else None
        self._delete(qe.Filter(must=_doc(doc_id), must_not=keep))

    def delete_document(self, doc_id: str) -> None:
        self._delete(qe.Filter(must=_doc(doc_id)))

    def delete_version(self, doc_id: str, sha256: str) -> None:
        self._delete(qe.Filter(must=_doc(doc_id, qe.FieldCondition(key="sha256", match=qe.MatchValue(sha256)))))

    def _delete(self, flt: qe.Filter) -> None:
        if self.shard is None:
            return
        with _engine_errors("deleting points", write=True):
            self.shard.update(qe.UpdateOperation.delete_points_by_filter(flt))

    # --- reads ----------------------------------------------------------------------------

    def count(self, doc_id: str | None = None) -> int:
        if self.shard is None:
            return 0
        return self.shard.count(qe.CountRequest(exact=True, filter=qe.Filter(must=_doc(doc_id)) if doc_id else None))

    def payload(self, point: str) -> dict[str, Any] | None:
        if self.shard is None:
            return None
        found = self.shard.retrieve([point], with_payload=True, with_vector=False)
        return dict(found[0].payload or {}) if found else None

    def points(self, doc_id: str | None = None, with_vectors: bool = False) -> list[StoredPoint]:
        out: list[StoredPoint] = []
        for page in self.scroll(doc_id, with_vectors):
            out.extend(page)
        return out

    def scroll(self, doc_id: str | None = None, with_vectors: bool = False, page: int = 512) -> Iterator[list[StoredPoint]]:
        """The points, a page at a time (what a migration reads without holding all of them)."""
        if self.shard is None:
            return
        flt = qe.Filter(must=_doc(doc_id)) if doc_id else None
        offset = None
        while True:
            records, offset = self.shard.scroll(qe.ScrollRequest(offset=offset, limit=page, filter=flt,
                                                                 with_payload=True, with_vector=with_vectors))
            yield [_stored(r, with_vectors) for r in records]
            if offset is None:
                return

    def search(self, dense: np.ndarray | None, sparse: SparseVector | None, top_k: int = 5,
               mode: str = "hybrid", candidates: int | None = None, dense_weight: float = 1.0,
               where: SearchFilter | None = None, exact: bool = False) -> list[Hit]:
        """Top ``top_k`` chunks (see ``kb.store.model``: the same answer as a server's).
        ``exact``: dense by brute force, for measuring HNSW's recall."""
        mode = check_mode(mode)
        if self.shard is None:
            return []
        flt, limit = _edge_filter(where), top_k + TIE_MARGIN
        params = self._params(exact, brute=flt is not None and self._few(flt))
        sparse_query = qe.SparseVector(list(sparse.indices), list(sparse.values)) if sparse and len(sparse) else None
        if mode is SearchMode.DENSE:
            request = qe.QueryRequest(limit=limit, query=qe.Query.Nearest(_floats(dense), using=DENSE), filter=flt,
                                      params=params, with_payload=True)
        elif mode is SearchMode.SPARSE:
            if sparse_query is None:
                return []
            request = qe.QueryRequest(limit=limit, query=qe.Query.Nearest(sparse_query, using=SPARSE), filter=flt,
                                      with_payload=True)
        else:
            return self._hybrid(dense, sparse_query, top_k, candidates_for(top_k, candidates), dense_weight, flt,
                                params)
        found = self.shard.query(request)
        return ranked([Hit.of(p.id, p.score, p.payload) for p in found], top_k)

    def _hybrid(self, dense, sparse_query, top_k: int, n: int, dense_weight: float, flt, params) -> list[Hit]:
        """Both lists in one batch (ids and scores only), fused here (``kb.store.model.fuse``),
        then the payloads of the few kept."""
        requests = [qe.QueryRequest(limit=n + TIE_MARGIN, query=qe.Query.Nearest(_floats(dense), using=DENSE),
                                    filter=flt, params=params, with_payload=False)]
        if sparse_query is not None:
            requests.append(qe.QueryRequest(limit=n + TIE_MARGIN, query=qe.Query.Nearest(sparse_query, using=SPARSE),
                                            filter=flt, with_payload=False))
        lists = [sorted(((str(p.id), p.score) for p in found), key=lambda h: (-h[1], h[0]))[:n]
                 for found in self.shard.query_batch(qe.QueryBatchRequest(requests))]
        fused = fuse(lists, [dense_weight, 1.0][:len(lists)], top_k)
        payloads = {str(r.id): r.payload for r in self.shard.retrieve([i for i, _ in fused], with_payload=True,
                                                                     with_vector=False)}
        return [Hit.of(i, score, payloads.get(i)) for i, score in fused]

    def _params(self, exact: bool, brute: bool = False) -> qe.SearchParams:
        """``exact``: brute force over the original vectors (the reference HNSW's recall is
        measured against); ``brute``: brute force over the int8 copies, the best rescored with
        the originals (a selective filter: faster than HNSW, and exact)."""
        quantization = None
        if exact:
            quantization = qe.QuantizationSearchParams(ignore=True)
        elif self.settings.quantize:
            quantization = qe.QuantizationSearchParams(rescore=True, oversampling=self.settings.oversampling)
        return qe.SearchParams(hnsw_ef=self.settings.hnsw_ef, exact=exact or brute, quantization=quantization)

    def _few(self, flt: qe.Filter) -> bool:
        """Whether ``flt`` leaves few points (the payload indexes' estimate: 0.2 ms at 1,000,000)."""
        return self.shard.count(qe.CountRequest(exact=False, filter=flt)) <= self.settings.exact_search_below

    # --- upkeep ---------------------------------------------------------------------------

    def unindexed_points(self) -> int:
        """Points whose dense vector no HNSW graph holds yet (plain segments: a query scans them)."""
        if self.shard is None:
            return 0
        info = self.shard.info()
        # indexed_vectors_count counts dense and sparse vectors; every point has one sparse vector
        return max(0, 2 * info.points_count - info.indexed_vectors_count)

    def optimize(self) -> bool:
        return bool(self.shard.optimize()) if self.shard is not None else False

    def flush(self) -> None:
        if self.shard is not None:
            self.shard.flush()


def _floats(dense: np.ndarray | None) -> list[float]:
    if dense is None:
        raise ValueError("a dense or hybrid search needs the query's dense vector")
    return np.asarray(dense, dtype=np.float32).tolist()
