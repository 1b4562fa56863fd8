"""Failpoints: named places where a test makes the live stack fail on purpose.

A failpoint is armed by writing ``<name>.json`` into the folder ``KB_FAILPOINTS_DIR``
names; the first process that reaches the place claims the file (an atomic rename to
``<name>.fired.<pid>.json``), so it fires exactly once, in one process, and the test can
see that it did. Without ``KB_FAILPOINTS_DIR`` (production) a check is one environment
lookup. Faults that come from outside (a killed service, a stopped S3 server) need no
failpoint; these cover the ones a test cannot cause from outside at the right moment:
a vector store write that fails half-way, a task process killed between the write and its record, and an
index task held before its reads until the test has stopped S3 (index reads S3 only at its
start, so a test that stops S3 when it sees the task running can come after the last read).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

ENV = "KB_FAILPOINTS_DIR"

QDRANT_UPSERT = "qdrant.upsert"  # {"after_points": n}: write n points, then the write fails
INDEX_AFTER_UPSERT = "index.after-upsert"  # {}: SIGKILL the task process after a document's write, before its record
INDEX_HOLD = "index.hold"  # {"max_s": n}: the index task waits, before it reads anything, for release()


def claim(name: str) -> dict[str, Any] | None:
    """The failpoint's arguments if it is armed (and now claimed by this process), else None."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    armed = Path(folder) / f"{name}.json"
    fired = armed.with_name(f"{name}.fired.{os.getpid()}.json")
    try:
        armed.rename(fired)
    except FileNotFoundError:
        return None
    return json.loads(fired.read_text() or "{}")


def arm(folder: Path, name: str, **args: Any) -> Path:
    """Arm ``name`` (what tests call): the next process to reach it fires it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(args))
    tmp.replace(path)
    return path


def fired(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"{name}.fired.*.json"))


def kill_this_process() -> None:
    """What a SIGKILL from the kernel's OOM killer or an operator does: no cleanup at all."""
    os.kill(os.getpid(), signal.SIGKILL)


def hold(name: str) -> None:
    """Where ``name`` is armed, wait here until the test releases it (``release``), or
    ``max_s`` (default 300) has passed: a test that never releases delays, never wedges, a task."""
    args = claim(name)
    if args is None:
        return
    released = Path(os.environ[ENV]) / f"{name}.released"
    deadline = time.monotonic() + float(args.get("max_s", 300))
    while not released.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def release(folder: Path, name: str) -> None:
    """Let the process held at ``name`` go on (what tests call)."""
    (folder / f"{name}.released").touch()
