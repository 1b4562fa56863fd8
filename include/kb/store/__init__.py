"""The vector store: one interface (``kb.store.model``), two implementations.

- **Embedded, the default**: Qdrant Edge (``kb.store.edge``), Qdrant's engine in process,
  with a write log (``kb.store.oplog``) between the index tasks that write and the search
  service's replicas (``kb.store.replica``) that own the shard and answer queries.
- **A Qdrant server** (``KB_QDRANT_URL``, ``kb.store.server``), through qdrant-client: compose,
  and any deployment past one machine.

``open_writer`` is what index tasks write with, ``open_reader`` what a process that reads in
process (``kb search`` without the service, tests, benchmarks) reads with, ``service_reader``
what the search service keeps for its life.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from kb.settings import PipelineSettings, StoreSettings
from kb.store.model import DENSE, MODES, SPARSE, Hit, SearchMode, StoredPoint, StoreReader, StoreWriter

__all__ = ["DENSE", "MODES", "SPARSE", "Hit", "SearchMode", "StoredPoint", "StoreReader", "StoreWriter",
           "open_reader", "open_writer", "service_reader"]


def _connect(p: PipelineSettings):
    from kb.store.server import ServerStore

    key = p.qdrant_api_key.get_secret_value() if p.qdrant_api_key else None
    return ServerStore.connect(p.qdrant_url, key, p.collection)


@contextmanager
def _server(p: PipelineSettings):
    store = _connect(p)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def open_writer(p: PipelineSettings | None = None) -> Iterator[StoreWriter]:
    p = p or PipelineSettings()
    if p.qdrant_url:
        with _server(p) as store:
            yield store
        return
    from kb.store.local import open_log_writer

    with open_log_writer(p, StoreSettings()) as writer:
        yield writer


@contextmanager
def open_reader(p: PipelineSettings | None = None) -> Iterator[StoreReader]:
    p = p or PipelineSettings()
    if p.qdrant_url:
        with _server(p) as store:
            yield store
        return
    from kb.store.local import open_embedded
    from kb.store.migrate import prepare

    prepare(p)
    with open_embedded(p, StoreSettings()) as store:
        yield store


def service_reader(p: PipelineSettings):
    """The search service's store: a server's client, or the replicas of the embedded store
    (each has ``start``, ``close`` and, called, a reader)."""
    if p.qdrant_url:
        return _connect(p)
    from kb.store.replicas import ReplicaSet

    return ReplicaSet(p, StoreSettings())
