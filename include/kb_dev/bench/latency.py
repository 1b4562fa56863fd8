"""Landing to searchable: seconds from an upload to the first search hit, with no trigger.

``kb bench latency`` uploads small documents into the running stack one at a time (the
next only after the previous one is found), each with a word no other document has, and
polls the search service for that word. Nothing triggers a run: the inbox watcher (the
asset's trigger in Airflow's triggerer) has to notice the object, so the stack must run
with ``KB_WATCH_INBOX=true`` (``kb up`` turns it on).
"""

from __future__ import annotations

import random
import statistics
import string
import tempfile
import time
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


def bench_latency(documents: int = 10, timeout_s: float = 300.0, poll_s: float = 0.5,
                  echo: Callable[[str], None] = print) -> dict[str, Any]:
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev.settings import StackSettings
    from kb_dev.stack import search

    settings, stack = PipelineSettings(), StackSettings()
    store = ObjectStore.from_settings()
    client = search.client(stack)
    if client is None:
        raise KbError("the search service is not running; start the stack with `kb up`")
    rng = random.Random()
    prefix = f"bench-latency/{time.strftime('%Y%m%dT%H%M%S')}/"
    samples = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(documents):
                marker = _marker(rng)
                data = _document(Path(tmp), i, marker)
                key = f"{prefix}latency-{i}.pdf"
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
                echo(f"  {key}: searchable {seconds:.1f}s after it landed")
    finally:
        client.close()
    return {"documents": documents, "p50_s": round(statistics.median(samples), 2), "max_s": max(samples),
            "min_s": min(samples), "samples_s": samples}
