"""The store's write log: what index tasks write, in the order they wrote it, until every
copy of the shard has it on disk.

An Edge shard is open in one process at a time, and the processes that own it (the search
service's replicas) must never wait on a writer, nor a writer on them. So a writer does not
open the shard: it appends its points to this log, one SQLite row per write (one transaction:
a document's new points and the removal of its old ones land together or not at all), and the
owners apply new rows as they come (every ``poll_s``, a tenth of a second). A row is durable
when ``append`` returns (WAL, synchronous=FULL): a task killed after that loses nothing, and
its retry appends the same points again, which is harmless (ids are deterministic, every
operation is idempotent, and rows are applied in order). A row is deleted once every replica
has flushed it into its shard.

The cost of a write is the row, whatever the store holds: no copy, no reload.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kb.errors import IndexMismatch, StoreWriteFailed
from kb.sparse import SparseVector

# A replica that has not said anything for this long is taken for stopped: a writer does not
# wait for it to apply a row, and the search service does not route queries to it.
ALIVE_S = 5.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ops (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, body BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS replicas (name TEXT PRIMARY KEY, applied INTEGER NOT NULL DEFAULT 0,"
    " flushed INTEGER NOT NULL DEFAULT 0, seen_at REAL NOT NULL DEFAULT 0, optimizing INTEGER NOT NULL DEFAULT 0,"
    " pid INTEGER)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


@dataclass(frozen=True)
class ReplicaState:
    name: str
    applied: int
    flushed: int
    seen_at: float
    optimizing: bool
    pid: int | None

    def alive(self, now: float | None = None) -> bool:
        return (now or time.time()) - self.seen_at < ALIVE_S


# --- operations: what a row holds ---------------------------------------------------------


def upsert_op(ids: Sequence[str], vectors: np.ndarray, sparse: Sequence[SparseVector],
              payloads: Sequence[dict[str, Any]]) -> dict[str, Any]:
    dense = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    return {"op": "upsert", "ids": list(ids), "dim": int(dense.shape[1]) if dense.ndim == 2 else 0,
            "dense": base64.b64encode(dense.tobytes()).decode(),
            "sparse": [[list(map(int, s.indices)), [float(v) for v in s.values]] for s in sparse],
            "payloads": list(payloads)}


def apply(store: Any, ops: list[dict[str, Any]]) -> None:
    """Apply a row's operations to a store (``kb.store.edge.EdgeStore``), in order."""
    for op in ops:
        kind = op["op"]
        if kind == "upsert":
            dense = np.frombuffer(base64.b64decode(op["dense"]), dtype=np.float32).reshape(len(op["ids"]), op["dim"])
            sparse = [SparseVector(list(i), list(v)) for i, v in op["sparse"]]
            store.ensure_collection(op["dim"])
            store.upsert(op["ids"], dense, sparse, op["payloads"])
        elif kind == "delete_all_but":
            store.delete_all_but(op["doc_id"], op["keep"])
        elif kind == "delete_document":
            store.delete_document(op["doc_id"])
        elif kind == "delete_version":
            store.delete_version(op["doc_id"], op["sha256"])
        else:
            raise ValueError(f"unknown store log operation {kind!r}")


def _encode(ops: list[dict[str, Any]]) -> bytes:
    return zlib.compress(json.dumps(ops, ensure_ascii=False, separators=(",", ":")).encode(), 3)


def _decode(body: bytes) -> list[dict[str, Any]]:
    return json.loads(zlib.decompress(body))


class OpLog:
    """The log in ``<store dir>/log.db``. One object per process; safe across its threads."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "log.db"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a row the writer was told is written survives a crash
        for statement in _SCHEMA:
            self._db.execute(statement)

    def close(self) -> None:
        self._db.close()

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # --- writers -----------------------------------------------------------------------

    def append(self, ops: list[dict[str, Any]]) -> int:
        """Append one row (its operations apply together); its sequence number."""
        body = _encode(ops)
        try:
            with self._lock:
                cursor = self._db.execute("INSERT INTO ops (at, body) VALUES (?, ?)", (time.time(), body))
                return int(cursor.lastrowid)
        except sqlite3.Error as exc:
            raise StoreWriteFailed(f"appending to the store's log {self.path} failed: {exc}") from exc

    def dimension(self) -> int | None:
        rows = self._query("SELECT value FROM meta WHERE key = 'dimension'")
        return int(rows[0][0]) if rows else None

    def ensure_dimension(self, dimension: int) -> None:
        """The store's dense size is set by its first writer; IndexMismatch for another."""
        self._query("INSERT OR IGNORE INTO meta (key, value) VALUES ('dimension', ?)", (str(dimension),))
        found = self.dimension()
        if found != dimension:
            raise IndexMismatch(f"the store holds {found}-d vectors, the embedder makes {dimension}-d; use another "
                                "collection name (KB_COLLECTION) or re-index")

    def wait_applied(self, seq: int, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Wait until every live replica that answers queries has applied row ``seq``: then it
        is searchable, and a deleted document is gone, whichever copy the service asks. (It
        used to return when one copy had: the next query could go to the other, a tenth of a
        second behind, and read a document just deleted.) A copy building HNSW is not asked
        and not waited for; it catches up before it answers again. False at once when no
        replica runs (the row waits in the log for the next one), or after the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = [r for r in self.replicas() if r.alive()]
            answering = [r for r in live if not r.optimizing] or live
            if live and all(r.applied >= seq for r in answering):
                return True
            if not live or time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)

    # --- owners --------------------------------------------------------------------------

    def since(self, seq: int, limit: int = 64) -> list[tuple[int, list[dict[str, Any]]]]:
        rows = self._query("SELECT seq, body FROM ops WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit))
        return [(int(s), _decode(b)) for s, b in rows]

    def last_seq(self) -> int:
        rows = self._query("SELECT seq FROM sqlite_sequence WHERE name = 'ops'")
        return int(rows[0][0]) if rows else 0

    def first_kept(self) -> int | None:
        """The oldest row still in the log (None: none), to tell whether a new copy can be
        built from the log alone (only if nothing was pruned: row 1 is still there)."""
        rows = self._query("SELECT MIN(seq) FROM ops")
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def pending(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM ops")[0][0])

    def report(self, name: str, applied: int, flushed: int | None = None, optimizing: bool | None = None) -> None:
        """A replica says how far it is (and that it is alive)."""
        self._query("INSERT INTO replicas (name, applied, flushed, seen_at, optimizing, pid) VALUES (?, ?, ?, ?, 0, ?) "
                    "ON CONFLICT(name) DO UPDATE SET applied = excluded.applied, seen_at = excluded.seen_at, "
                    "pid = excluded.pid", (name, applied, flushed or 0, time.time(), os.getpid()))
        if flushed is not None:
            self._query("UPDATE replicas SET flushed = ? WHERE name = ?", (flushed, name))
        if optimizing is not None:
            self._query("UPDATE replicas SET optimizing = ? WHERE name = ?", (int(optimizing), name))

    def gone(self, name: str) -> None:
        """A replica stopped (or an in-process reader closed): it is not waited for, nor asked."""
        self._query("UPDATE replicas SET seen_at = 0, optimizing = 0 WHERE name = ?", (name,))

    def claim_optimize(self, name: str, min_peers: int) -> bool:
        """Atomically: ``name`` may build HNSW only while at least ``min_peers`` other live
        replicas answer queries and none of them is building."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                now = time.time()
                others = [ReplicaState(*r[:4], bool(r[4]), r[5]) for r in self._db.execute(
                    "SELECT name, applied, flushed, seen_at, optimizing, pid FROM replicas WHERE name != ?", (name,))]
                ready = [r for r in others if r.alive(now) and not r.optimizing]
                if any(r.optimizing and r.alive(now) for r in others) or len(ready) < min_peers:
                    self._db.execute("ROLLBACK")
                    return False
                self._db.execute("UPDATE replicas SET optimizing = 1, seen_at = ? WHERE name = ?", (now, name))
                self._db.execute("COMMIT")
                return True
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def replicas(self) -> list[ReplicaState]:
        return [ReplicaState(r[0], int(r[1]), int(r[2]), float(r[3]), bool(r[4]), r[5]) for r in self._query(
            "SELECT name, applied, flushed, seen_at, optimizing, pid FROM replicas ORDER BY name")]

    def keep_replicas(self, names: Sequence[str]) -> None:
        """Forget replicas not in ``names`` (a deployment that now keeps fewer copies)."""
        marks = ",".join("?" * len(names))
        self._query(f"DELETE FROM replicas WHERE name NOT IN ({marks})", tuple(names))

    def prune(self) -> int:
        """Delete the rows every registered replica has flushed into its shard."""
        rows = self._query("SELECT MIN(flushed) FROM replicas")
        if not rows or rows[0][0] is None:
            return 0
        with self._lock:
            return self._db.execute("DELETE FROM ops WHERE seq <= ?", (int(rows[0][0]),)).rowcount
