"""Landing to searchable: seconds from an upload to the first search hit, with no trigger.

``kb bench latency`` uploads small documents into the running stack one at a time (the
next only after the previous one is found), each with a word no other document has, and
polls the search service for that word. Nothing triggers a run: the inbox watcher (the
asset's trigger in Airflow's triggerer) has to notice the object, so the stack must run
with ``KB_WATCH_INBOX=true`` (``kb up`` turns it on).

Each sample is split, from the run Airflow records (its queued time and its tasks' start and
end times): until the watcher's run was queued, until its first task started, until its
index task ended, and from there until the search service found the document.
"""

from __future__ import annotations

import random
import statistics
import string
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from kb.errors import KbError


def _marker(rng: random.Random) -> str:
    # a made-up word: one token, and in no other document
    return "zq" + "".join(rng.choice(string.ascii_lowercase) for _ in range(10))


def _document(folder: Path, i: int, marker: str) -> bytes:
    from kb_dev.samples import prose_pages, write_pdf

    pages = prose_pages(2, seed=1000 + i, paragraphs=2)
    heading, paragraphs = pages[0]
    pages[0] = (heading, [f"Latency probe {i}: the identifier {marker} names this document.", *paragraphs])
    path = folder / f"latency-{i}.pdf"
    write_pdf(path, f"Latency probe {i}", pages)
    return path.read_bytes()


def _when(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def _split(airflow: Any, put_wall: float, found_wall: float) -> dict[str, float | None]:
    """Where one sample's seconds went, from the first kb_ingest run queued after the upload began."""
    runs = [r for r in airflow.dag_runs("kb_ingest", limit=5) if (_when(r.get("queued_at")) or 0) >= put_wall]
    if not runs:
        return {}
    run = min(runs, key=lambda r: _when(r["queued_at"]))
    tasks = airflow.task_instances("kb_ingest", run["dag_run_id"])
    starts = [t for t in (_when(t.get("start_date")) for t in tasks) if t]
    index_ends = [t for t in (_when(t.get("end_date")) for t in tasks if t["task_id"] == "index") if t]
    queued = _when(run["queued_at"])
    out: dict[str, float | None] = {"to_queued_s": round(queued - put_wall, 2),
                                    "to_first_task_s": round(min(starts) - queued, 2) if starts else None}
    if index_ends and starts:
        out["tasks_to_indexed_s"] = round(max(index_ends) - min(starts), 2)
        out["indexed_to_found_s"] = round(found_wall - max(index_ends), 2)
    return out


def bench_latency(documents: int = 10, timeout_s: float = 300.0, poll_s: float = 0.5,
                  echo: Callable[[str], None] = print) -> dict[str, Any]:
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev.settings import StackSettings
    from kb_dev.stack import search
    from kb_dev.stack.topology import airflow_client

    settings, stack = PipelineSettings(), StackSettings()
    airflow = airflow_client(stack)
    store = ObjectStore.from_settings()
    client = search.client(stack)
    if client is None:
        raise KbError("the search service is not running; start the stack with `kb up`")
    rng = random.Random()
    prefix = f"bench-latency/{time.strftime('%Y%m%dT%H%M%S')}/"
    samples, splits = [], []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(documents):
                marker = _marker(rng)
                data = _document(Path(tmp), i, marker)
                key = f"{prefix}latency-{i}.pdf"
                # the wall clock before the upload: the watcher can queue its run before the
                # PUT's answer reaches us, and a run queued then was missed (2 of 10 samples)
                put_wall = time.time()
                store.put_bytes(settings.inbox_bucket, key, data, content_type="application/pdf")
                landed = time.monotonic()
                deadline = landed + timeout_s
                while True:
                    hits = client.search(marker, top_k=3)
                    if any(h.get("key") == key for h in hits):
                        seconds = round(time.monotonic() - landed, 2)
                        break
                    if time.monotonic() > deadline:
                        raise KbError(f"{key} was not searchable {timeout_s:.0f}s after it landed: is the stack "
                                      "running with KB_WATCH_INBOX=true (kb up turns it on)?")
                    time.sleep(poll_s)
                samples.append(seconds)
                split = _split(airflow, put_wall, time.time())
                splits.append(split)
                echo(f"  {key}: searchable {seconds:.1f}s after it landed "
                     f"({', '.join(f'{k} {v}' for k, v in split.items())})")
    finally:
        client.close()
        airflow.close()
    return {"documents": documents, "p50_s": round(statistics.median(samples), 2), "max_s": max(samples),
            "min_s": min(samples), "samples_s": samples, "split": splits,
            "split_median_s": {k: round(statistics.median(v), 2) for k in dict.fromkeys(k for s in splits for k in s)
                               if (v := [s[k] for s in splits if s.get(k) is not None])}}
