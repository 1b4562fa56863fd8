"""What each task process used: its peak resident memory, recorded when the task ends.

Tasks run in processes that are gone by the time anyone asks, so each one writes its own
peak (the kernel's high-water mark, ``VmHWM``) next to the run's summary. The size tests
and the run summary read them back.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

from kb.artifacts import ArtifactKeys
from kb.pipeline.context import Context

MB = 1024 * 1024


def peak_rss_bytes(pid: int | str = "self") -> int:
    """The process's peak resident set size (VmHWM) in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    if pid != "self":
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def record_task_usage(ctx: Context, run_id: str, task_id: str, map_index: int | None) -> dict[str, Any]:
    usage = {"run_id": run_id, "task_id": task_id, "map_index": map_index,
             "peak_rss_mb": round(peak_rss_bytes() / MB, 1), "at": time.time()}
    ctx.store.put_json(ctx.artifacts, ArtifactKeys.task_usage(run_id, task_id, map_index), usage)
    return usage


def run_usage(ctx: Context, run_id: str) -> list[dict[str, Any]]:
    """Every usage record the run's tasks wrote so far."""
    prefix = ArtifactKeys.task_usage_prefix(run_id)
    return [u for obj in ctx.store.list_latest(ctx.artifacts, prefix)
            if (u := ctx.store.get_json(ctx.artifacts, obj.key)) is not None]


def peak_by_task(usage: list[dict[str, Any]]) -> dict[str, float]:
    """The highest peak of each task (over its mapped instances), in MB."""
    peaks: dict[str, float] = {}
    for u in usage:
        peaks[u["task_id"]] = max(peaks.get(u["task_id"], 0.0), u["peak_rss_mb"])
    return dict(sorted(peaks.items()))
