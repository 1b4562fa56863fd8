"""The search service's side of the embedded store: it starts the replicas
(``kb.store.replica``), follows their states in the log's table, and sends each query to a
copy that is up to date and not building HNSW. A copy that does not answer within
``replica_timeout_s`` (it began a build as the query was sent) is left for another.

Its ``__call__`` gives the reader the search service and ``Retriever`` use: ``search``,
``payload``, ``points``, ``count``, ``dimension``, as ``kb.store.edge.EdgeStore`` answers them.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from multiprocessing.connection import Client, Connection
from typing import Any, Callable, ContextManager

from kb.errors import StoreBusy
from kb.settings import PipelineSettings, StoreSettings
from kb.store.local import replica_names
from kb.store.migrate import prepare
from kb.store.oplog import OpLog, ReplicaState
from kb.store.replica import KEY_ENV, PARENT_ENV

log = logging.getLogger(__name__)
STATE_POLL_S = 0.1
START_TIMEOUT_S = 600.0
RESTART_AFTER_S = 5.0  # a copy that keeps exiting is started again at most this often  # a copy of a million points loads in seconds; one caught up from a long log, longer


class StoreUnavailable(StoreBusy):
    """No copy of the store answered."""

    code = "store_unavailable"


class _Copy:
    def __init__(self, name: str, address: str, key: bytes) -> None:
        self.name, self.address, self.key = name, address, key
        self.process: subprocess.Popen | None = None
        self.started = 0.0  # time.monotonic() of its last start
        self.idle: queue.SimpleQueue[Connection] = queue.SimpleQueue()

    def connection(self) -> Connection:
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            return Client(self.address, family="AF_UNIX", authkey=self.key)


class ReplicaSet:
    def __init__(self, p: PipelineSettings, s: StoreSettings | None = None,
                 wrap: Callable[[str, list[str]], list[str]] | None = None) -> None:
        """``wrap(name, argv)``: the command a copy runs as (a benchmark runs each copy in a
        memory cgroup of its own); by default ``argv`` itself."""
        self.pipeline, self.settings = p, s or StoreSettings()
        self._wrap = wrap or (lambda _name, argv: argv)
        self._key = secrets.token_bytes(32)
        tag = secrets.token_hex(6)
        # abstract socket names (no file, no path length limit); the key keeps strangers out
        self.copies = [_Copy(n, f"\0kb-store-{tag}-{n}", self._key) for n in replica_names(self.settings)]
        self.states: dict[str, ReplicaState] = {}
        self._log: OpLog | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.generation: str | None = None  # the newest log row a copy has applied (for /ready)
        self._turns = itertools.count()
        self.reloads = 0  # kept for the service's metrics: copies are never reloaded
        self.loaded_at: float | None = None

    def __call__(self) -> ContextManager[Any]:
        return nullcontext(self)

    # --- life --------------------------------------------------------------------------

    def start(self) -> None:
        """Start every copy and wait until each answers. Call it from the main thread: a copy
        dies with the thread that started it (it must not outlive the service); copies that
        exit are started again by the watcher thread, which lives as long as the service."""
        prepare(self.pipeline, self.settings)
        self._log = OpLog(self.pipeline.store_dir)
        for copy in self.copies:
            self._spawn(copy)
        deadline = time.monotonic() + START_TIMEOUT_S
        for copy in self.copies:
            while True:
                if copy.process.poll() is not None:
                    raise StoreUnavailable(f"store copy {copy.name} exited with {copy.process.returncode} while "
                                           "starting; see the search service's log")
                try:
                    copy.idle.put(copy.connection())
                    break
                except (FileNotFoundError, ConnectionRefusedError, OSError):
                    if time.monotonic() > deadline:
                        raise StoreUnavailable(f"store copy {copy.name} did not start within {START_TIMEOUT_S:.0f}s")
                    time.sleep(0.1)
        self._read_states()
        self.loaded_at = time.time()
        self._watcher = threading.Thread(target=self._watch, name="store-replicas", daemon=True)
        self._watcher.start()

    def _spawn(self, copy: _Copy) -> None:
        # the copies read their settings from the environment: these, not the service's own
        env = {**os.environ, KEY_ENV: self._key.hex(), PARENT_ENV: str(os.getpid()),
               "KB_STATE_DIR": str(self.pipeline.state_dir),
               **{f"KB_STORE_{k.upper()}": str(v) for k, v in self.settings.model_dump().items() if v is not None}}
        argv = [sys.executable, "-m", "kb.store.replica", copy.name, copy.address[1:]]
        # A session of its own: a stop signal to the service's process group (``kb down``) is
        # the service's to pass on. Signalled with the group, the copies exited before the
        # service began its shutdown, the watcher started them again, and the new copy kept
        # the group alive until the stop's 20 s deadline killed it. A copy still dies with
        # its parent (``kb.store.replica`` asks the kernel for that).
        copy.process = subprocess.Popen(self._wrap(copy.name, argv), env=env, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        copy.started = time.monotonic()
        copy.idle = queue.SimpleQueue()  # connections to an earlier process of this copy are dead

    def close(self) -> None:
        self._stop.set()
        for copy in self.copies:
            if copy.process is not None and copy.process.poll() is None:
                copy.process.terminate()
        for copy in self.copies:
            if copy.process is None:
                continue
            try:
                copy.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                copy.process.kill()
                copy.process.wait()
        if self._log is not None:
            self._log.close()

    def _watch(self) -> None:
        """Follow the copies' states; start a copy again that exited (the others answer meanwhile)."""
        while not self._stop.wait(STATE_POLL_S):
            try:
                self._read_states()
            except Exception:  # noqa: BLE001 - a busy log: keep the last states, read again
                log.exception("reading the store copies' states failed")
            for copy in self.copies:
                exited = copy.process is not None and copy.process.poll() is not None
                if exited and not self._stop.is_set() and time.monotonic() - copy.started > RESTART_AFTER_S:
                    log.error("store copy %s exited with %s; starting it again", copy.name, copy.process.returncode)
                    self._spawn(copy)

    def _read_states(self) -> None:
        self.states = {r.name: r for r in self._log.replicas()}
        applied = max((r.applied for r in self.states.values()), default=0)
        self.generation = str(applied)

    def lag(self) -> int:
        """Log rows written that no copy has applied yet."""
        return max(0, self._log.last_seq() - int(self.generation or 0)) if self._log else 0

    # --- asking --------------------------------------------------------------------------

    def _order(self) -> list[_Copy]:
        """Copies that answer, the most up to date first, taking turns among equals (so both
        copies share the queries and keep their pages warm); then the others, as a last resort."""
        now = time.time()

        def rank(copy: _Copy) -> tuple:
            state = self.states.get(copy.name)
            ready = state is not None and state.alive(now) and not state.optimizing
            return (not ready, -(state.applied if state else 0))

        ranked = sorted(self.copies, key=rank)
        first = [c for c in ranked if rank(c) == rank(ranked[0])]
        turn = next(self._turns) % len(first)
        return first[turn:] + first[:turn] + ranked[len(first):]

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        tried = []
        for copy in self._order():
            try:
                conn = copy.connection()
            except OSError:
                tried.append(f"{copy.name}: not running")
                continue
            try:
                conn.send((method, args, kwargs))
                if not conn.poll(self.settings.replica_timeout_s):
                    conn.close()  # its answer would come late, on this connection: never reuse it
                    tried.append(f"{copy.name}: no answer within {self.settings.replica_timeout_s:.1f}s")
                    continue
                reply = conn.recv()
            except (EOFError, OSError) as exc:
                conn.close()
                tried.append(f"{copy.name}: {type(exc).__name__}")
                continue
            copy.idle.put(conn)
            if reply[0] == "ok":
                return reply[1]
            _, kind, message = reply
            if kind == "ValueError":
                raise ValueError(message)
            raise StoreUnavailable(f"store copy {copy.name} failed {method}: {kind}: {message}")
        raise StoreUnavailable(f"no copy of the store answered {method} ({'; '.join(tried)})")

    def search(self, *args: Any, **kwargs: Any):
        return self._call("search", *args, **kwargs)

    def payload(self, point: str):
        return self._call("payload", point)

    def points(self, doc_id: str | None = None, with_vectors: bool = False):
        return self._call("points", doc_id, with_vectors)

    def count(self, doc_id: str | None = None) -> int:
        return self._call("count", doc_id)

    def dimension(self) -> int | None:
        return self._call("dimension")
