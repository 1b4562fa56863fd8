"""Free loopback ports, for stacks that must not collide with another one (tests, benchmarks).

A port is chosen outside the kernel's ephemeral range. One from inside it (what ``bind(0)``
hands out) can become the source port of any outgoing connection between the choice and the
server's own bind: weed's S3 gateway binds seconds after its process starts (once its filer
answers), and in CI it once died on exactly that ("s3 exited while starting", the first pass's
distributed stack). Outside the range only another chooser can take a port, so each choice is
also recorded for this process's life in a small file that other processes (the other test
workers) respect while this process lives.
"""

from __future__ import annotations

import atexit
import os
import random
import socket
import tempfile
import time
from pathlib import Path

_LOWEST = 10000  # below: well-known and registered ports (8080, 5432, 6379 ...)
WEED_GRPC_OFFSET = 10000  # weed serves gRPC on each of its ports + 10000
_RESERVED_FOR_S = 6 * 3600  # a record older than this is stale even if its pid lives (pid reuse)
_mine: set[int] = set()
_OWNER = os.getpid()  # a forked child inherits _mine but must not release its parent's ports


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that nothing listens on now, outside the ephemeral range,
    reserved for this process."""
    return _choose(n, offsets=(0,))


def weed_port_set() -> dict[str, int]:
    """Four base ports for weed whose +10000 gRPC twins are free too (StackSettings names)."""
    ports = _choose(4, offsets=(0, WEED_GRPC_OFFSET))
    return dict(zip(("s3_port", "weed_master_port", "weed_volume_port", "weed_filer_port"), ports))


def _choose(n: int, offsets: tuple[int, ...]) -> list[int]:
    """``n`` base ports ``p`` whose ``p + offset`` for each offset lie outside the ephemeral
    range, are free now and are reserved for this process, all of them."""
    lo, hi = _ephemeral_range()
    pool = [p for p in range(_LOWEST, 65536)
            if all(p + o < 65536 and not lo <= p + o <= hi for o in offsets)]
    chosen: list[int] = []
    for tries in range(1, 1001):
        if len(chosen) == n:
            break
        port = random.choice(pool)
        wanted = [port + o for o in offsets]
        if all(_free(p) for p in wanted) and _reserve(wanted):
            chosen.append(port)
    if len(chosen) < n:
        raise RuntimeError(f"no {n} free loopback ports outside the ephemeral range {lo}-{hi} in {tries} tries")
    return chosen


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 65535  # Linux's default start; the top of every platform's range


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _records() -> Path:
    folder = Path(tempfile.gettempdir()) / f"kb-ports-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _reserve(ports: list[int]) -> bool:
    """Record ``ports`` as this process's, all or none; False if a live process holds one."""
    taken: list[int] = []
    for port in ports:
        if port in _mine or not _claim(_records() / str(port)):
            for p in taken:
                _release(p)
            return False
        taken.append(port)
        _mine.add(port)
    return True


def _claim(record: Path) -> bool:
    for _ in range(2):
        try:
            fd = os.open(record, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            if _held(record):
                return False
            record.unlink(missing_ok=True)  # its process is gone: the port is free to choose
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _held(record: Path) -> bool:
    try:
        text = record.read_text()
        if not text:
            return True  # being written by its process
        if time.time() - record.stat().st_mtime > _RESERVED_FOR_S:
            return False
        os.kill(int(text), 0)
        return True
    except ProcessLookupError:
        return False
    except (OSError, ValueError):
        return True  # not ours to judge (another user's process, a file we cannot read): leave it


def _release(port: int) -> None:
    _mine.discard(port)
    (_records() / str(port)).unlink(missing_ok=True)


@atexit.register
def _release_all() -> None:
    if os.getpid() != _OWNER:
        return
    for port in list(_mine):
        _release(port)
