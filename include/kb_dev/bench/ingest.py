"""``kb bench ingest``: pages per second through kb_ingest against a direct script.

Both paths get the same born-digital corpus in the same run, so the ratio is fair
on a shared, noisy machine. The direct script is PyMuPDF text, the same chunker,
embedder and store writes (Qdrant Edge, in process), no Airflow; it runs as a fresh process (imports and the
model load included), as the DAG's tasks do. The DAG path is timed from the trigger
to the run's end as a user sees it.

Both sides are warmed alike (``warm_then_time``): each first takes one untimed pass over
the same one-document warm-up corpus (the direct script in a fresh process, the DAG in a
run of its own), so neither side's timed pass pays for a cold page cache, a first model
load from disk or the stack's first task processes while the other does not.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kb.errors import KbError
from kb_dev.samples import write_prose_documents

WARM_UP_SEED = 1_000  # the warm-up document's prose differs from every timed document's


@dataclass(frozen=True)
class Timed:
    warm_up_s: float  # the untimed warm-up pass, reported so the two sides' cold costs show too
    seconds: float
    result: Any


def warm_then_time(warm_up: Callable[[], Any], timed: Callable[[], Any]) -> Timed:
    """One warm-up pass, then the timed pass: what each side of the comparison gets, alike."""
    started = time.perf_counter()
    warm_up()
    warmed = time.perf_counter()
    result = timed()
    return Timed(warm_up_s=round(warmed - started, 2), seconds=time.perf_counter() - warmed, result=result)


def direct(folder: Path, state_dir: str) -> dict[str, Any]:
    """The no-Airflow path over every PDF in ``folder``, into an embedded store of its own in
    ``state_dir``; returns counts."""
    import numpy as np
    import pymupdf

    from kb.embedding import make_embedder
    from kb.pipeline.index import chunk_pages
    from kb.points import point_id
    from kb.settings import PipelineSettings
    from kb.sparse import SparseEncoder
    from kb.store import open_reader
    from ocr_engine.backends.textlayer import extract_range

    settings = PipelineSettings(state_dir=Path(state_dir))
    embedder = make_embedder(settings)
    encoder = SparseEncoder(settings.sparse_tokenizer)
    pages = 0
    ids, payloads, vectors, sparse = [], [], [], []
    for path in sorted(folder.glob("*.pdf")):
        doc = pymupdf.open(path)
        results = extract_range(doc, 1, doc.page_count)
        doc.close()
        pieces = chunk_pages(results, embedder, settings)
        texts = [c.embedding_text() for c in pieces]
        vectors.append(embedder.embed_documents(texts))
        sparse.extend(encoder.encode_document(t) for t in texts)
        ids.extend(point_id(path.name, "direct", c.index) for c in pieces)
        payloads.extend({"doc_id": path.name, "key": path.name, "pages": c.pages, "text": c.text} for c in pieces)
        pages += len(results)
    # One opening of an embedded store of its own, written in this process (the DAG's tasks
    # append to the store's log, which the search service applies): the direct path at its best.
    with open_reader(settings) as vs:
        vs.ensure_collection(embedder.dimension)
        vs.upsert(ids, np.concatenate(vectors), sparse, payloads)
    chunks = len(ids)
    return {"pages": pages, "chunks": chunks}


def _direct_process(folder: Path, state_dir: str) -> dict[str, Any]:
    """``direct`` over ``folder`` in a fresh process, as a task runs; its counts."""
    done = subprocess.run([sys.executable, "-m", "kb_dev.bench.ingest", "direct", str(folder), state_dir],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the direct script failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_ingest(documents: int = 10, pages: int = 20, timeout_s: float = 1800.0) -> dict[str, Any]:
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev.settings import StackSettings
    from kb_dev.stack.topology import run_ingest

    settings = PipelineSettings()
    stack_settings = StackSettings()
    store = ObjectStore.from_settings()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    prefix = f"bench/{stamp}/"
    direct_store = tempfile.TemporaryDirectory(prefix="kb-bench-direct-")
    direct_state = direct_store.name
    uploaded: list[str] = []

    def ingest(where: str, files: list[Path]):
        for f in files:
            store.put_bytes(settings.inbox_bucket, where + f.name, f.read_bytes(), content_type="application/pdf")
            uploaded.append(where + f.name)
        return run_ingest(stack_settings, {"prefix": where, "force": False}, timeout_s, echo=lambda _l: None,
                          poll_s=0.5)

    def dag_warm_up(files: list[Path]) -> None:
        warm = ingest(prefix + "warm-up/", files)
        if warm.state != "success":
            raise KbError(f"the warm-up run {warm.run_id} ended {warm.state}")

    with tempfile.TemporaryDirectory() as tmp:
        folder, warm_folder = Path(tmp) / "timed", Path(tmp) / "warm-up"
        folder.mkdir()
        warm_folder.mkdir()
        files = write_prose_documents(folder, documents=documents, pages_per_document=pages)
        warm_files = write_prose_documents(warm_folder, documents=1, pages_per_document=pages, seed=WARM_UP_SEED)
        total_pages = documents * pages

        direct = warm_then_time(lambda: _direct_process(warm_folder, direct_state),
                                lambda: _direct_process(folder, direct_state))
        dag = warm_then_time(lambda: dag_warm_up(warm_files), lambda: ingest(prefix + "timed/", files))
        result, direct_counts = dag.result, direct.result
        summary = result.summary or {}
        if result.state != "success" or summary.get("pages") != total_pages:
            raise KbError(f"the benchmark run {result.run_id} ended {result.state} with "
                          f"{summary.get('pages')} of {total_pages} pages indexed; see its task logs")

    # Leave the knowledge base as it was: the bench's documents leave the inbox, and a
    # run over their prefix retires their points (not timed). Forced: the retire guard
    # holds a run that would retire every document under its prefix, as this one does.
    for key in uploaded:
        store.remove(settings.inbox_bucket, key)
    cleanup = run_ingest(stack_settings, {"prefix": prefix, "force": True}, timeout_s, echo=lambda _l: None)
    direct_store.cleanup()

    direct_s, dag_s = direct.seconds, dag.seconds
    out = {
        "documents": documents,
        "pages": total_pages,
        "warm_up": {"documents": 1, "pages": pages, "direct_s": direct.warm_up_s, "dag_s": dag.warm_up_s},
        "direct": {"seconds": round(direct_s, 2), "pages_per_s": round(total_pages / direct_s, 2), **direct_counts},
        "dag": {"seconds": round(dag_s, 2), "pages_per_s": round(total_pages / dag_s, 2), "state": result.state,
                "pages_indexed": summary.get("pages"), "chunks": summary.get("chunks"),
                "run_seconds": summary.get("seconds")},
        "ratio_dag_over_direct": round(dag_s / direct_s, 3),
        "cleanup_state": cleanup.state,
    }
    out["table"] = (
        f"{'path':8} {'pages':>6} {'chunks':>7} {'seconds':>8} {'pages/s':>8} {'warm-up s':>10}\n"
        f"{'direct':8} {total_pages:>6} {direct_counts['chunks']:>7} {out['direct']['seconds']:>8} "
        f"{out['direct']['pages_per_s']:>8} {direct.warm_up_s:>10}\n"
        f"{'dag':8} {summary.get('pages', 0):>6} {summary.get('chunks', 0):>7} {out['dag']['seconds']:>8} "
        f"{out['dag']['pages_per_s']:>8} {dag.warm_up_s:>10}\n"
        f"each side timed after one untimed pass over the same {pages}-page warm-up document\n"
        f"DAG time / direct time = {out['ratio_dag_over_direct']} (target <= 1.5)"
    )
    return out


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "direct":
        print(json.dumps(direct(Path(sys.argv[2]), sys.argv[3])))
    else:
        print("usage: python -m kb_dev.bench.ingest direct FOLDER COLLECTION", file=sys.stderr)
        raise SystemExit(2)
