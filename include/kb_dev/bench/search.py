"""``kb bench search``: the search service under load, `kb search` as a fresh process, and
the two embedder runtimes side by side, all in one run on the running stack.

1. ``queries`` hybrid queries over HTTP at ``concurrency``: p50, p99, errors.
2. The same while an index task writes to the store (a kb_ingest run over generated
   documents, which are removed again afterwards): p50, p99, errors.
3. ``kb search`` as a fresh process, five times: wall seconds.
4. Recall@5 and MRR of ``include/eval/qa.jsonl`` through the service (ONNX queries).
5. With the search service stopped a moment (its copies hold the store): embedding
   throughput over the same chunks (read from the store), ONNX Runtime and torch in this
   process, chunks per second and the cosine between their vectors; recall@5 again in
   process with torch queries. The service is started again after.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from kb.errors import KbError

QA = Path(__file__).resolve().parents[1] / "eval" / "qa.jsonl"


def _load(client, queries: list[str], concurrency: int, until: threading.Event | None = None) -> dict[str, Any]:
    """Run ``queries`` (cycled until ``until`` is set, if given) and time each one."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(10**9))

    def worker() -> None:
        while True:
            i = next(counter)
            if (until is None and i >= len(queries)) or (until is not None and until.is_set() and i >= len(queries)):
                return
            started = time.perf_counter()
            try:
                client.search(queries[i % len(queries)], 5, "hybrid")
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the load
                with lock:
                    errors.append(str(exc)[:200])
                continue
            with lock:
                latencies.append(time.perf_counter() - started)

    with ThreadPoolExecutor(concurrency) as pool:
        for _ in range(concurrency):
            pool.submit(worker)
    ms = sorted(x * 1000 for x in latencies)
    return {"queries": len(ms) + len(errors), "errors": len(errors), "error_examples": errors[:3],
            "p50_ms": round(float(np.percentile(ms, 50)), 1) if ms else None,
            "p99_ms": round(float(np.percentile(ms, 99)), 1) if ms else None,
            "max_ms": round(ms[-1], 1) if ms else None}


def bench_search(queries: int = 200, concurrency: int = 4, timeout_s: float = 1800.0,
                 echo=print) -> dict[str, Any]:
    from kb_dev.evaluation import evaluate, load_questions
    from kb.objectstore import ObjectStore
    from kb_dev.samples import write_prose_documents
    from kb.settings import PipelineSettings
    from kb_dev.settings import StackSettings
    from kb_dev.stack import search
    from kb_dev.stack.topology import run_ingest

    stack = StackSettings()
    client = search.client(stack)
    if client is None:
        raise KbError("the search service is not running; start the stack with `kb up`")
    settings = PipelineSettings()
    questions = load_questions(QA)
    texts = [q.question for q in questions]
    load = (texts * (queries // len(texts) + 1))[:queries]
    out: dict[str, Any] = {"queries": queries, "concurrency": concurrency}

    echo(f"1/5 {queries} hybrid queries at concurrency {concurrency} ...")
    _load(client, texts[:8], concurrency)  # warm-up, not counted
    out["idle"] = _load(client, load, concurrency)

    echo("2/5 the same while an index task writes ...")
    store = ObjectStore.from_settings()
    prefix = f"bench-search/{time.strftime('%Y%m%dT%H%M%S')}/"
    with tempfile.TemporaryDirectory() as tmp:
        files = write_prose_documents(Path(tmp), documents=4, pages_per_document=20)
        for f in files:
            store.put_bytes(settings.inbox_bucket, prefix + f.name, f.read_bytes(), content_type="application/pdf")
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def ingest() -> None:
        try:
            result = run_ingest(stack, {"prefix": prefix, "force": False}, timeout_s, echo=lambda _l: None, poll_s=1.0)
            outcome.update(state=result.state, indexed=(result.summary or {}).get("documents_indexed"))
        finally:
            done.set()

    writer = threading.Thread(target=ingest)
    writer.start()
    out["while_indexing"] = _load(client, load, concurrency, until=done)
    writer.join()
    out["while_indexing"]["index_run"] = outcome
    for f in files:
        store.remove(settings.inbox_bucket, prefix + f.name)
    # retires them; forced, as the retire guard holds a run that retires all under its prefix
    run_ingest(stack, {"prefix": prefix, "force": True}, timeout_s, echo=lambda _l: None)

    echo("3/5 `kb search` as a fresh process ...")
    walls = []
    for q in texts[:5]:
        started = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "kb"), "search", q, "--json"], capture_output=True, check=True)
        walls.append(time.perf_counter() - started)
    out["cli"] = {"runs": len(walls), "median_s": round(statistics.median(walls), 3), "max_s": round(max(walls), 3)}

    echo("4/5 recall@5 on include/eval/qa.jsonl through the service ...")
    service = evaluate(client, questions, top_k=5, modes=("hybrid",))["modes"]["hybrid"]["groups"]
    client.close()

    # The service's store copies hold the store; for the in-process readers below it stops a
    # moment, and starts again after them.
    from kb.retrieval import Retriever
    from kb_dev.stack import search as search_part
    from kb_dev.stack.secrets import read_secrets

    search_part.stop(stack)
    try:
        echo("5/5 embedding throughput (ONNX Runtime and torch, same chunks), recall with torch queries ...")
        out["embedding"] = _embedding(settings)
        torch_settings = settings.model_copy(update={"embed_backend": "torch"})
        torch_queries = evaluate(Retriever(torch_settings), questions, top_k=5,
                                 modes=("hybrid",))["modes"]["hybrid"]["groups"]
    finally:
        search_part.start(stack, read_secrets(stack.state_dir))
    out["recall"] = {"onnx_service": service, "torch_in_process": torch_queries}
    client.close()
    out["table"] = _table(out)
    return out


def _embedding(settings, limit: int = 2000) -> dict[str, Any]:
    from kb.embedding import make_embedder
    from kb.store import open_reader

    with open_reader(settings) as vs:
        texts = [p.payload["text"] for p in vs.points()[:limit]]
    onnx = make_embedder(settings.model_copy(update={"embed_backend": "onnx"}))
    torch_ = make_embedder(settings.model_copy(update={"embed_backend": "torch"}))
    rows = {}
    vectors = {}
    for name, embedder in (("onnx", onnx), ("torch", torch_)):
        embedder.embed_documents(texts[:16])  # load and warm up, not counted
        started = time.perf_counter()
        vectors[name] = embedder.embed_documents(texts)
        seconds = time.perf_counter() - started
        rows[name] = {"chunks": len(texts), "seconds": round(seconds, 2), "chunks_per_s": round(len(texts) / seconds, 1)}
    cosine = (vectors["onnx"] * vectors["torch"]).sum(axis=1)
    return {**rows, "speedup_onnx_over_torch": round(rows["onnx"]["chunks_per_s"] / rows["torch"]["chunks_per_s"], 2),
            "cosine_min": round(float(cosine.min()), 6), "cosine_mean": round(float(cosine.mean()), 6)}


def _table(out: dict[str, Any]) -> str:
    idle, busy, cli, emb = out["idle"], out["while_indexing"], out["cli"], out["embedding"]
    lines = [
        f"{out['queries']} hybrid queries over HTTP at concurrency {out['concurrency']}:",
        f"  idle:           p50 {idle['p50_ms']} ms, p99 {idle['p99_ms']} ms, max {idle['max_ms']} ms, "
        f"{idle['errors']} errors of {idle['queries']}",
        f"  while indexing: p50 {busy['p50_ms']} ms, p99 {busy['p99_ms']} ms, max {busy['max_ms']} ms, "
        f"{busy['errors']} errors of {busy['queries']} (index run: {busy['index_run']})",
        f"kb search, fresh process: median {cli['median_s']} s, max {cli['max_s']} s over {cli['runs']} runs",
        f"embedding {emb['onnx']['chunks']} chunks: ONNX {emb['onnx']['chunks_per_s']}/s, torch {emb['torch']['chunks_per_s']}/s "
        f"({emb['speedup_onnx_over_torch']}x); cosine onnx vs torch min {emb['cosine_min']}, mean {emb['cosine_mean']}",
    ]
    for name, groups in out["recall"].items():
        cells = ", ".join(f"{g} {v['recall@5']:.3f}/{v['mrr']:.3f}" for g, v in groups.items())
        lines.append(f"recall@5/MRR hybrid, {name}: {cells}")
    return "\n".join(lines)
