"""A memory limit on a process as a container's limit is one: a memory cgroup the kernel enforces.

The search replicas map their shard's files (the original vectors, the graph, the payload),
and every page a query reads stays mapped and counts in RSS until the kernel needs it back:
clean page cache, not memory the process holds. So at a million chunks RSS grows towards
the files' size, and RSS alone cannot say whether a replica fits in 2 GB. A cgroup can: its
pages (the process's own and the file pages it reads first) are charged to it, the kernel
drops clean pages to keep it under its limit (each time counted in ``reclaims``), and kills
the process only if its own memory will not fit (``oom_kills``).

cgroup v1 (``/sys/fs/cgroup/memory``, as on the machine the benchmarks ran on) and v2 (a
``memory`` controller in ``/sys/fs/cgroup``) are both read; where neither is writable (not
root, a read-only mount) ``MemoryLimit.create`` returns None and the bench says so.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_v1_group() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return ROOT / "memory" / path.lstrip("/")
    return ROOT / "memory"


@dataclass
class MemoryLimit:
    path: Path
    limit_bytes: int
    v2: bool

    @classmethod
    def create(cls, name: str, limit_bytes: int) -> "MemoryLimit | None":
        """A new cgroup ``name`` (under this process's own) limited to ``limit_bytes``."""
        controllers = ROOT / "cgroup.controllers"
        v2 = controllers.exists() and "memory" in controllers.read_text().split()
        parent = ROOT if v2 else _own_v1_group()
        path = parent / name
        try:
            path.mkdir(exist_ok=True)
            if v2:
                (path / "memory.max").write_text(str(limit_bytes))
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        except OSError:
            return None
        return cls(path, limit_bytes, v2)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the cgroup from its first instruction: a process moved in later
        leaves the pages it already has charged where they were (the kernel no longer moves
        charges: ``memory.move_charge_at_immigrate`` is refused on 6.x)."""
        enter = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); os.execv(sys.argv[2], sys.argv[2:])"
        return [sys.executable, "-c", enter, str(self.path / "cgroup.procs"), *argv]

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def report(self) -> dict[str, float | int]:
        """The limit, the peak charge (own pages and page cache), how often the kernel reclaimed
        pages to stay under the limit, and how many processes it killed for want of memory."""
        if self.v2:
            events = dict(line.split() for line in self._read("memory.events").splitlines())
            peak = int(self._read("memory.peak")) if (self.path / "memory.peak").exists() else -1
            reclaims, kills = int(events.get("max", 0)), int(events.get("oom_kill", 0))
        else:
            oom = dict(line.split() for line in self._read("memory.oom_control").splitlines())
            peak, reclaims = int(self._read("memory.max_usage_in_bytes")), int(self._read("memory.failcnt"))
            kills = int(oom.get("oom_kill", 0))
        return {"limit_mb": round(self.limit_bytes / 2**20), "peak_mb": round(peak / 2**20, 1),
                "reclaims": reclaims, "oom_kills": kills}

    def remove(self) -> None:
        """The cgroup removed once its processes have ended (theirs move to the parent first)."""
        try:
            for pid in self._read("cgroup.procs").split():
                (self.path.parent / "cgroup.procs").write_text(pid)
            self.path.rmdir()
        except OSError:
            pass


def evict_from_page_cache(folder: Path) -> int:
    """Drop the cached pages of every file under ``folder`` (what an earlier run read or wrote
    stays cached, charged to whoever did it first, and would be free to a limited process):
    bytes of the files advised. Each file is written back first: the kernel drops clean pages
    only, and a file just written may not be (under load, a test's file stayed cached and its
    limited reader never had to reclaim)."""
    advised = 0
    for file in folder.rglob("*"):
        if not file.is_file():
            continue
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            advised += file.stat().st_size
        finally:
            os.close(fd)
    return advised
