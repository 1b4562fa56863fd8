"""Moving a store without re-work: the points (vectors and payloads) are copied as they are,
so nothing is OCR'd or embedded again.

- ``migrate_local_mode``: a store of qdrant-client's local mode (``<state dir>/qdrant``, what
  this project kept before Qdrant Edge) into the embedded store, through its write log. Once:
  the old folder is renamed ``qdrant.migrated`` when every point is in the log. ``kb up`` (and
  any first opening of the store) does it; ``kb store migrate`` does it by hand.
- ``copy_to_server``: the embedded store into a Qdrant server's collection, the move a growing
  deployment makes (then set ``KB_QDRANT_URL``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from kb.settings import PipelineSettings, StoreSettings
from kb.store.local import ensure_copies, open_embedded
from kb.store.model import DENSE, SPARSE, StoredPoint
from kb.store.oplog import OpLog, upsert_op

log = logging.getLogger(__name__)
MIGRATED_SUFFIX = ".migrated"
PAGE = 256


def prepare(p: PipelineSettings, s: StoreSettings | None = None) -> None:
    """The embedded store ready to open: an older local-mode store moved in (once), and every
    configured copy given a shard (``kb.store.local.ensure_copies``)."""
    s = s or StoreSettings()
    migrate_local_mode(p, s)
    ensure_copies(p, s)


def legacy_store(p: PipelineSettings) -> Path | None:
    """The local-mode store's folder, when it holds this deployment's collection."""
    path = p.resolved_qdrant_path
    return path if (path / "collection" / p.collection).is_dir() else None


def _legacy_pages(path: Path, collection: str) -> Iterator[list[StoredPoint]]:
    from qdrant_client import QdrantClient

    from kb.sparse import SparseVector

    client = QdrantClient(path=str(path))
    try:
        offset = None
        while True:
            records, offset = client.scroll(collection, limit=PAGE, offset=offset, with_payload=True, with_vectors=True)
            page = []
            for r in records:
                vectors = r.vector if isinstance(r.vector, dict) else {}
                sv = vectors.get(SPARSE)
                page.append(StoredPoint(str(r.id), dict(r.payload or {}), list(vectors.get(DENSE) or []) or None,
                                        SparseVector(list(sv.indices), list(sv.values)) if sv is not None else None))
            yield page
            if offset is None:
                return
    finally:
        client.close()


def _columns(page: list[StoredPoint]):
    from kb.sparse import SparseVector

    ids = [pt.id for pt in page]
    dense = np.asarray([pt.dense for pt in page], dtype=np.float32)
    sparse = [pt.sparse or SparseVector([], []) for pt in page]
    return ids, dense, sparse, [pt.payload for pt in page]


def copy_points(pages: Iterable[list[StoredPoint]], write: Callable[..., None],
                progress: Callable[[int], None] = lambda _n: None) -> int:
    """Every page of points through ``write(ids, dense, sparse, payloads)``; the count."""
    copied = 0
    for page in pages:
        if page:
            write(*_columns(page))
            copied += len(page)
            progress(copied)
    return copied


def migrate_local_mode(p: PipelineSettings, s: StoreSettings | None = None,
                       progress: Callable[[int], None] = lambda _n: None) -> int:
    """Copy the local-mode store's points into the embedded store's log (once); the count."""
    path = legacy_store(p)
    if path is None:
        return 0
    oplog = OpLog(p.store_dir)
    try:
        def write(ids, dense, sparse, payloads) -> None:
            oplog.ensure_dimension(int(dense.shape[1]))
            oplog.append([upsert_op(ids, dense, sparse, payloads)])

        copied = copy_points(_legacy_pages(path, p.collection), write, progress)
    finally:
        oplog.close()
    path.rename(path.with_name(path.name + MIGRATED_SUFFIX))
    log.info("moved %d points from the local-mode store at %s into the store's log", copied, path)
    return copied


def copy_to_server(p: PipelineSettings, url: str, api_key: str | None = None, collection: str | None = None,
                   s: StoreSettings | None = None, progress: Callable[[int], None] = lambda _n: None) -> int:
    """Copy the embedded store into a Qdrant server's collection (made if missing); the count."""
    from kb.store.server import ServerStore

    target = ServerStore.connect(url, api_key, collection or p.collection)
    try:
        return copy_into(p, target, s, progress)
    finally:
        target.close()


def copy_into(p: PipelineSettings, target, s: StoreSettings | None = None,
              progress: Callable[[int], None] = lambda _n: None) -> int:
    """Copy the embedded store into ``target`` (a ``StoreWriter``)."""
    with open_embedded(p, s) as source:
        dimension = source.dimension()
        if dimension is None:
            return 0
        target.ensure_collection(dimension)
        return copy_points(source.scroll(with_vectors=True), target.upsert, progress)
