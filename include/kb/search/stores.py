"""The vector store a long-lived reader keeps.

Local mode lets one process open the store at a time, and index tasks must still write.
So the service never holds the store: it copies the store's folder under the store's
lock (a file copy: milliseconds, the only time a writer can wait for it), opens the copy,
reads every point into a ``MemoryStore`` (numpy: a query in milliseconds, where Qdrant's
local mode loops over every point in Python) and deletes the copy. A writer leaves a new
generation mark when it closes the store; a background thread sees it and loads a fresh
copy, while queries go on against the previous one. A query never waits for a writer,
and never fails because of one. The price: answers lag a write by about
``refresh_interval_s`` plus the load (about a second for a few thousand chunks), and the
points are held in memory, as local mode holds any store. Past some hundred thousand
chunks, run a Qdrant server (``KB_QDRANT_URL``): the service then keeps one client and
sees writes at once.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ContextManager

from kb.search.memory import MemoryStore
from kb.settings import PipelineSettings
from kb.vectorstore import VectorStore

log = logging.getLogger(__name__)


class ServerStore:
    """A Qdrant server: one client for the service's life."""

    def __init__(self, settings: PipelineSettings) -> None:
        from qdrant_client import QdrantClient

        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        self.store = VectorStore(QdrantClient(url=settings.qdrant_url, api_key=key), settings.collection)
        self.reloads = 0
        self.generation: str | None = "server"
        self.loaded_at: float | None = None

    def __call__(self) -> ContextManager[Any]:
        return nullcontext(self.store)

    def start(self) -> None:
        self.store.client.get_collections()  # reachable, or the service does not start

    def close(self) -> None:
        self.store.client.close()


class LocalCopy:
    """The local store's points in memory, reloaded when a writer marks a new generation."""

    def __init__(self, settings: PipelineSettings, interval_s: float = 0.5) -> None:
        self.settings = settings
        self.interval_s = interval_s
        self.generation: str | None = None
        self.reloads = 0
        self.loaded_at: float | None = None
        self._current: MemoryStore | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """The first load now (the service is not ready without it), then a watcher."""
        self.refresh()
        self._thread = threading.Thread(target=self._watch, name="store-refresh", daemon=True)
        self._thread.start()

    def __call__(self) -> ContextManager[Any]:
        if self._current is None:
            raise RuntimeError("the store is not loaded yet")
        return nullcontext(self._current)  # a query keeps the copy it took, whatever a reload swaps in

    def refresh(self) -> bool:
        """Load the store again if a writer changed it since the last load."""
        if self._current is not None and VectorStore.generation(self.settings) == self.generation:
            return False
        from qdrant_client import QdrantClient

        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="kb-search-store-") as tmp:
            folder = Path(tmp) / "qdrant"
            generation = VectorStore.copy_local(self.settings, folder)
            client = QdrantClient(path=str(folder))
            try:
                loaded = MemoryStore.load(VectorStore(client, self.settings.collection))
            finally:
                client.close()
        self._current, self.generation, self.loaded_at = loaded, generation, time.time()
        self.reloads += 1
        log.info("store loaded: %d points, generation %s, %.2fs", len(loaded), generation,
                 time.perf_counter() - started)
        return True

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a failed reload keeps the old copy; the next one tries again
                log.exception("reloading the store failed; queries use the previous copy")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def open_reader(settings: PipelineSettings, interval_s: float) -> ServerStore | LocalCopy:
    return ServerStore(settings) if settings.qdrant_url else LocalCopy(settings, interval_s)
