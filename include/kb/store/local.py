"""The embedded store on this machine: the write log and the copies of the Edge shard.

Layout under ``<state dir>/store``: ``log.db`` (``kb.store.oplog``) and one folder per copy,
``replica-0``, ``replica-1``, ... each with its shard and ``applied`` (the last log row it
has flushed into the shard). The search service keeps every copy open, one process each
(``kb.store.replica``); without it, a process that reads the store (``kb search`` with no
service, a test, a migration) opens a copy itself, catches it up with the log, and reads
(``kb.store.open_reader``, which first moves an older local-mode store in: ``kb.store.migrate``).
"""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from kb import failpoints
from kb.errors import StoreBusy, StoreWriteFailed
from kb.settings import PipelineSettings, StoreSettings
from kb.sparse import SparseVector
from kb.store.edge import EdgeStore, shard_dimension
from kb.store.oplog import OpLog, apply, upsert_op

log = logging.getLogger(__name__)
APPLIED_FILE = "applied"


class StoreLost(StoreWriteFailed):
    """No copy of the shard is left and the log no longer holds every write: re-index."""

    code = "store_lost"


def replica_names(s: StoreSettings) -> list[str]:
    return [f"replica-{i}" for i in range(s.replicas)]


def _applied(folder: Path) -> int:
    try:
        return int((folder / APPLIED_FILE).read_text())
    except FileNotFoundError:
        return 0


def record_applied(folder: Path, seq: int) -> None:
    """The copy in ``folder`` holds every log row up to ``seq`` on disk."""
    tmp = folder / f".{APPLIED_FILE}.{os.getpid()}"
    tmp.write_text(str(seq))
    os.replace(tmp, folder / APPLIED_FILE)


def ensure_copies(p: PipelineSettings, s: StoreSettings) -> None:
    """Give every configured copy a shard: a missing copy starts as a file copy of one that has
    a shard, since the log keeps only what some copy has not flushed yet. Call it while no copy
    is open (the search service does, before it starts its replicas)."""
    root = p.store_dir
    names = replica_names(s)
    with_shard = [n for n in names if shard_dimension(root / n / "shard") is not None]
    oplog = OpLog(root)
    try:
        first = oplog.first_kept()
        if not with_shard:
            known = max([_applied(root / n) for n in names] + [r.flushed for r in oplog.replicas()])
            if known and (first is None or first > known + 1):
                raise StoreLost(f"no copy of the store is left under {root} and its log no longer holds every "
                                "write; re-index everything (kb ingest --wait --force)")
            return
        source = max(with_shard, key=lambda n: _applied(root / n))
        for name in names:
            if name in with_shard:
                continue
            log.info("store copy %s made from %s", name, source)
            shutil.rmtree(root / name, ignore_errors=True)
            shutil.copytree(root / source, root / name)
        oplog.keep_replicas(names)
    finally:
        oplog.close()


class Replica:
    """One open copy: its shard, and how far into the log it is."""

    def __init__(self, name: str, folder: Path, store: EdgeStore, oplog: OpLog) -> None:
        self.name, self.folder, self.store, self.log = name, folder, store, oplog
        self.applied = self.flushed = _applied(folder)

    @classmethod
    def open(cls, p: PipelineSettings, s: StoreSettings, name: str, oplog: OpLog) -> "Replica":
        folder = p.store_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        store = EdgeStore.open(folder / "shard", s, oplog.dimension())
        return cls(name, folder, store, oplog)

    def catch_up(self, rows: int = 8) -> int:
        """Apply up to ``rows`` new log rows; how many it applied. Few at a time: a row holds a
        whole document's points (a 2,000-page document's is tens of MB)."""
        done = 0
        for seq, ops in self.log.since(self.applied, rows):
            apply(self.store, ops)
            self.applied = seq
            done += 1
        return done

    def catch_up_fully(self) -> None:
        while self.catch_up():
            pass

    def flush(self) -> None:
        """The shard on disk up to ``applied``: rows up to it may leave the log."""
        if self.flushed == self.applied:
            return
        self.store.flush()
        record_applied(self.folder, self.applied)
        self.flushed = self.applied

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.store.close()


@contextmanager
def open_embedded(p: PipelineSettings | None = None, s: StoreSettings | None = None) -> Iterator[EdgeStore]:
    """A copy of the store in this process, caught up with the log, for the ``with`` block.
    StoreBusy when every copy is held (the search service runs: ask it instead)."""
    p, s = p or PipelineSettings(), s or StoreSettings()
    ensure_copies(p, s)
    oplog = OpLog(p.store_dir)
    try:
        replica = None
        for name in replica_names(s):
            try:
                replica = Replica.open(p, s, name, oplog)
                break
            except StoreBusy:
                continue
        if replica is None:
            raise StoreBusy(f"every copy of the store under {p.store_dir} is open in another process (the search "
                            "service's); search through it (kb search), or stop it first (kb down)")
        try:
            replica.catch_up_fully()
            yield replica.store
        finally:
            replica.close()
            oplog.report(replica.name, replica.applied, replica.flushed)
            oplog.gone(replica.name)
            oplog.prune()
    finally:
        oplog.close()


class LogWriter:
    """What index tasks write with: rows of the log (``StoreWriter``). ``together`` makes the
    writes inside it one row; each row is waited for until every live replica that answers
    queries has applied it (at most ``visible_timeout_s``), so a task that records a document
    indexed, or deleted, has it so in every answer."""

    def __init__(self, oplog: OpLog, s: StoreSettings) -> None:
        self.log, self.settings = oplog, s
        self._group: list[dict[str, Any]] | None = None

    def dimension(self) -> int | None:
        return self.log.dimension()

    def ensure_collection(self, dimension: int) -> None:
        self.log.ensure_dimension(dimension)

    @contextmanager
    def together(self) -> Iterator[None]:
        outer, self._group = self._group, []
        try:
            yield
            group = self._group
        finally:
            self._group = outer
        if group:
            self._write(group)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, sparse: Sequence[SparseVector],
               payloads: Sequence[dict[str, Any]]) -> None:
        fault = failpoints.claim(failpoints.QDRANT_UPSERT)
        if fault is not None:  # a test's fault: the first n points go in, then the write fails
            n = int(fault.get("after_points", 0))
            self._write([upsert_op(ids[:n], vectors[:n], sparse[:n], payloads[:n])], alone=True)
            raise StoreWriteFailed(f"failpoint {failpoints.QDRANT_UPSERT}: the write failed after {n} points")
        self._write([upsert_op(ids, vectors, sparse, payloads)])

    def delete_all_but(self, doc_id: str, keep_ids: Sequence[str]) -> None:
        self._write([{"op": "delete_all_but", "doc_id": doc_id, "keep": list(keep_ids)}])

    def delete_document(self, doc_id: str) -> None:
        self._write([{"op": "delete_document", "doc_id": doc_id}])

    def delete_version(self, doc_id: str, sha256: str) -> None:
        self._write([{"op": "delete_version", "doc_id": doc_id, "sha256": sha256}])

    def _write(self, ops: list[dict[str, Any]], alone: bool = False) -> None:
        if self._group is not None and not alone:
            self._group.extend(ops)
            return
        seq = self.log.append(ops)
        if not self.log.wait_applied(seq, self.settings.visible_timeout_s):
            log.info("store log row %d is written; no replica applied it within %.0f s (it will be applied when "
                     "the search service runs)", seq, self.settings.visible_timeout_s)


@contextmanager
def open_log_writer(p: PipelineSettings, s: StoreSettings | None = None) -> Iterator[LogWriter]:
    oplog = OpLog(p.store_dir)
    try:
        yield LogWriter(oplog, s or StoreSettings())
    finally:
        oplog.close()
