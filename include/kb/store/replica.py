"""One copy of the embedded store, in a process of its own: ``python -m kb.store.replica NAME ADDRESS``.

The search service starts one per ``KB_STORE_REPLICAS`` and asks them its queries over a
local socket (``kb.store.replicas``). Each applies the write log as it grows (a new row is
searchable a tenth of a second after it is written, whatever the store's size), flushes its
shard and lets the log drop what every copy has flushed.

Why a process per copy: Edge runs every call holding the Python interpreter's lock, and
building HNSW for new points (``optimize``) runs for seconds to minutes. A copy builds only
while another copy answers: it claims the build in the log's table, waits until the service
has seen the claim and its last query has been answered, builds, catches up and returns.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection, Listener
from typing import Any

from kb.settings import PipelineSettings, StoreSettings
from kb.store.local import Replica
from kb.store.oplog import OpLog

log = logging.getLogger("kb.store.replica")
KEY_ENV = "KB_STORE_RPC_KEY"  # the authkey of the replicas' sockets, made by the service for its own run
PARENT_ENV = "KB_STORE_PARENT_PID"  # the service that started this copy
HEARTBEAT_S = 1.0
FLUSH_S = 2.0
OPTIMIZE_CHECK_S = 5.0
DRAIN_S = 0.5  # the service reads the replicas' states every 0.1 s: it stops asking a builder within this
READS = ("search", "payload", "points", "count", "dimension")


def _die_with_parent() -> None:
    """SIGKILL when the service that started this process dies (even by SIGKILL): a copy left
    running would hold its shard, and the next service could not open it."""
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: the service stops its replicas itself
        return
    # A service that died before the line above left no one to signal this copy, and a copy
    # runs in a session of its own (no stop signal of the service's group reaches it): go.
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):
        sys.exit(f"the search service ({parent}) that started this store copy is gone")


class ReplicaProcess:
    def __init__(self, name: str, address: str, p: PipelineSettings, s: StoreSettings) -> None:
        self.name, self.address, self.settings = name, address, s
        self.log = OpLog(p.store_dir)
        self.replica = Replica.open(p, s, name, self.log)
        self.in_flight = 0
        self._count = threading.Lock()
        self.stopping = threading.Event()

    # --- queries ---------------------------------------------------------------------------

    def serve(self) -> None:
        key = bytes.fromhex(os.environ[KEY_ENV])
        with Listener(self.address, family="AF_UNIX", authkey=key) as listener:
            while not self.stopping.is_set():
                try:
                    conn = listener.accept()
                except Exception:  # noqa: BLE001 - a client that failed the handshake: refuse it, go on
                    continue
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: Connection) -> None:
        with conn:
            while True:
                try:
                    method, args, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                with self._count:
                    self.in_flight += 1
                try:
                    if method == "status":
                        result: Any = {"name": self.name, "applied": self.replica.applied, "pid": os.getpid()}
                    elif method in READS:
                        result = getattr(self.replica.store, method)(*args, **kwargs)
                    else:
                        raise ValueError(f"no such store call {method!r}")
                    reply = ("ok", result)
                except Exception as exc:  # noqa: BLE001 - the caller gets the error, the replica goes on
                    reply = ("error", type(exc).__name__, str(exc))
                finally:
                    with self._count:
                        self.in_flight -= 1
                try:
                    conn.send(reply)
                except (EOFError, OSError):
                    return

    # --- the log ---------------------------------------------------------------------------

    def run(self) -> None:
        s, r = self.settings, self.replica
        r.catch_up_fully()
        r.flush()
        self.log.report(self.name, r.applied, r.flushed, optimizing=False)
        threading.Thread(target=self.serve, name="queries", daemon=True).start()
        beat = flushed_at = checked_at = time.monotonic()
        while not self.stopping.is_set():
            applied = r.catch_up()
            now = time.monotonic()
            if applied or now - beat >= HEARTBEAT_S:
                self.log.report(self.name, r.applied)  # writers wait on this to say "searchable"
                beat = now
            if r.applied != r.flushed and now - flushed_at >= FLUSH_S:
                r.flush()
                self.log.report(self.name, r.applied, r.flushed)
                self.log.prune()
                flushed_at = now
            if now - checked_at >= OPTIMIZE_CHECK_S:
                checked_at = now
                self.maybe_optimize()
            if not applied:
                self.stopping.wait(s.poll_s)
        r.close()
        self.log.report(self.name, r.applied, r.flushed, optimizing=False)
        self.log.gone(self.name)

    def maybe_optimize(self) -> None:
        s, r = self.settings, self.replica
        waiting = r.store.unindexed_points()
        if waiting < s.optimize_min_points:
            return
        if not self.log.claim_optimize(self.name, min_peers=1 if s.replicas > 1 else 0):
            return
        try:
            deadline = time.monotonic() + 10
            time.sleep(DRAIN_S)
            while self.in_flight and time.monotonic() < deadline:
                time.sleep(0.02)
            started = time.monotonic()
            log.info("%s: building HNSW for %d points", self.name, waiting)
            r.store.optimize()
            r.flush()
            log.info("%s: built in %.1f s", self.name, time.monotonic() - started)
            r.catch_up_fully()
        finally:
            self.log.report(self.name, r.applied, r.flushed, optimizing=False)


def main(argv: list[str] | None = None) -> int:
    name, address = (argv or sys.argv[1:])[:2]
    address = "\0" + address  # an abstract socket: its name, without the leading NUL argv cannot carry
    _die_with_parent()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    process = ReplicaProcess(name, address, PipelineSettings(), StoreSettings())
    signal.signal(signal.SIGTERM, lambda *_: process.stopping.set())
    process.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
