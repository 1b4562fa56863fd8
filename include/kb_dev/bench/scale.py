"""``kb bench scale``: the embedded store (Qdrant Edge, as the search service runs it) at
realistic sizes, and, up to 100,000 chunks, the local-mode store it replaced, in the same run.

The chunks are made from real text: sentences of the corpus's born-digital documents
(``include/corpus``, fetched from their Debian packages) and the samples. A chunk is 5 to 9
sentences drawn at random (about 1 KB, as the chunker makes); its sparse vector is the
pipeline's encoder over its text; its dense vector is the mean of the embedder's (ONNX
MiniLM) vectors of its sentences, so neighbours share topics as real chunks do, without
embedding a million chunks. Payloads are the pipeline's fields at their real sizes (text,
boxes, prefixes), 60 chunks a document in 100 folders.

At each size:

- the build: upserts, then HNSW (``optimize``), timed but not a target (done once; the build
  is kept under ``--dest`` for the next run unless ``--rebuild``);
- the store served as the search service serves it: its replicas started on the shard;
- one document's write (60 chunks and the removal of its older version, one log row) and the
  time until a search finds it, five documents, median and max;
- hybrid query p50 and p99 through the replicas, with and without a folder filter, after as
  many other queries, not timed, to warm the store's files up;
- each replica's RSS after the queries and writes, again after 4,000 more queries (the files'
  pages a query reads stay mapped, clean page cache the kernel may drop, so RSS grows with the
  distinct pages read), its private (anonymous) memory, and RSS after the recall measure
  (whose exact searches read every original vector from disk);
- HNSW recall@10 against exact (brute force over the original vectors) dense search, for the
  evaluation set's questions, and for sentences of the pool (harder: every chunk that holds
  the sentence scores nearly alike).

Before (local mode, sizes up to ``--before-max``): the store's opening, one document's write
(the calls the old index task made), the old search service's reload after a write (copy the
folder, open the copy, read every point with its vectors), the RSS of that, and hybrid query
p50 and p99 in local mode.
"""

from __future__ import annotations

import gc
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

QA = Path(__file__).resolve().parents[2] / "eval" / "qa.jsonl"
FOLDERS = 100
CHUNKS_PER_DOC = 60
BATCH = 1024
WRITES = 5
LONG_RUN = 4000  # queries before the second RSS reading
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")


def _echo(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- realistic chunks -----------------------------------------------------------------------


def sentence_pool(dest: Path, echo: Callable[[str], None]) -> list[str]:
    """Sentences of the corpus's born-digital documents and the samples (cached in ``dest``)."""
    cache = dest / "sentences.json"
    if cache.exists():
        return json.loads(cache.read_text())
    import pymupdf

    from kb_dev.corpus import fetch
    from kb_dev.samples import SAMPLES_DIR

    echo("reading the corpus's text (fetching it first if needed) ...")
    files = [f.path for f in fetch(dest / "corpus", echo=echo) if not f.scanned] + sorted(SAMPLES_DIR.glob("*.pdf"))
    pool: list[str] = []
    for path in files:
        with pymupdf.open(path) as doc:
            for page in doc:
                text = " ".join(page.get_text().split())
                pool.extend(s for s in _SENTENCE.split(text) if 30 <= len(s) <= 400)
    pool = sorted(set(pool))
    dest.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(pool, ensure_ascii=False))
    return pool


def sentence_vectors(dest: Path, pool: list[str], echo: Callable[[str], None]) -> np.ndarray:
    cache = dest / "sentences.npy"
    if cache.exists():
        return np.load(cache)
    from kb.embedding import make_embedder
    from kb.settings import PipelineSettings

    echo(f"embedding {len(pool)} sentences once ...")
    vectors = make_embedder(PipelineSettings()).embed_documents(pool).astype(np.float32)
    np.save(cache, vectors)
    return vectors


class Chunks:
    """The n-th chunk of the synthetic archive, always the same for the same n."""

    def __init__(self, pool: list[str], vectors: np.ndarray) -> None:
        from kb.sparse import SparseEncoder

        self.pool, self.vectors = pool, vectors
        self.encoder = SparseEncoder("bigram")

    def batch(self, start: int, count: int, version: str = "v1"):
        from kb.points import key_prefixes, language, point_id

        ids, dense, sparse, payloads = [], [], [], []
        for n in range(start, start + count):
            rng = random.Random(n if version == "v1" else f"{n}:{version}")
            picks = [rng.randrange(len(self.pool)) for _ in range(rng.randint(5, 9))]
            text = " ".join(self.pool[i] for i in picks)
            doc, index = divmod(n, CHUNKS_PER_DOC)
            key = f"folder-{doc % FOLDERS:03d}/doc-{doc:06d}.pdf"
            doc_id, sha = f"doc-{doc:06d}", f"sha-{doc:06d}-{version}"
            page = index // 6 + 1
            vector = self.vectors[picks].sum(axis=0)
            ids.append(point_id(doc_id, sha, index))
            dense.append(vector / max(float(np.linalg.norm(vector)), 1e-12))
            sparse.append(self.encoder.encode_document(text))
            payloads.append({
                "doc_id": doc_id, "bucket": "inbox", "key": key, "version_id": version, "etag": sha[:32],
                "sha256": sha, "pages": [page, page + 1] if index % 6 == 5 else [page], "chunk_index": index,
                "section": f"Section {page}.{index % 6}", "text": text, "tokens": len(text) // 5,
                "embedder": "all-MiniLM-L6-v2@bench", "prefixes": key_prefixes(key), "language": language(text),
                "kind": "text",
                "boxes": [{"page": page, "bbox": [72.0, 90.0 + 110 * b, 540.0, 190.0 + 110 * b]} for b in range(3)],
            })
        return ids, np.asarray(dense, dtype=np.float32), sparse, payloads

    def batches(self, total: int) -> Iterator[tuple]:
        for start in range(0, total, BATCH):
            yield self.batch(start, min(BATCH, total - start))

    def queries(self, count: int, seed: int = 7):
        """Query texts (sentences of the pool) with their dense and sparse vectors."""
        rng = random.Random(seed)
        picks = [rng.randrange(len(self.pool)) for _ in range(count)]
        return [(self.vectors[i], self.encoder.encode_query(self.pool[i])) for i in picks]


# --- measuring --------------------------------------------------------------------------------


def _percentiles(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50_ms": round(ms[len(ms) // 2], 2), "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2)}


def _timed_queries(search: Callable[..., Any], queries: list, **kwargs: Any) -> dict[str, float]:
    for dense, sparse in queries[:10]:  # warm-up, not counted, the same for every side measured
        search(dense, sparse, top_k=5, **kwargs)
    ms = []
    for dense, sparse in queries:
        started = time.perf_counter()
        search(dense, sparse, top_k=5, **kwargs)
        ms.append((time.perf_counter() - started) * 1000)
    return _percentiles(ms)


def _rss_mb(pid: int) -> float:
    import psutil

    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def _private_mb(pid: int) -> float:
    """The process's own memory (anonymous pages), without the mapped files' pages."""
    import psutil

    return round(sum(m.anonymous for m in psutil.Process(pid).memory_maps(grouped=True)) / 2**20, 1)


def _build_edge(state: Path, total: int, chunks: Chunks, echo: Callable[[str], None]) -> dict[str, Any]:
    from kb.settings import StoreSettings
    from kb.store.edge import EdgeStore
    from kb.store.local import record_applied
    from kb.store.oplog import OpLog

    marker = state / "built.json"
    if marker.exists():
        return json.loads(marker.read_text())
    shutil.rmtree(state, ignore_errors=True)
    folder = state / "store" / "replica-0"
    store = EdgeStore.open(folder / "shard", StoreSettings(), chunks.vectors.shape[1])
    started = time.perf_counter()
    for i, batch in enumerate(chunks.batches(total)):
        store.upsert(*batch)
        if i % 100 == 0:
            echo(f"  {min(total, (i + 1) * BATCH)}/{total} chunks written ...")
    upserted = time.perf_counter()
    echo(f"  building HNSW over {total} chunks ...")
    store.optimize()
    store.close()
    built = {"chunks": total, "upsert_s": round(upserted - started, 1),
             "hnsw_s": round(time.perf_counter() - upserted, 1),
             "disk_mb": round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20)}
    record_applied(folder, 0)
    oplog = OpLog(state / "store")
    oplog.ensure_dimension(int(chunks.vectors.shape[1]))
    oplog.close()
    marker.write_text(json.dumps(built))
    return built


def _one_document_writes(p, replicas, chunks: Chunks, total: int) -> dict[str, Any]:
    """New versions of ``WRITES`` documents, each one log row: the write's seconds, and the
    seconds until a search with the document's key as filter finds the new version."""
    from kb.points import SearchFilter
    from kb.store import open_writer

    write_s, visible_s = [], []
    docs = total // CHUNKS_PER_DOC
    for w in range(WRITES):
        doc = (w * 7919) % docs
        ids, dense, sparse, payloads = chunks.batch(doc * CHUNKS_PER_DOC, CHUNKS_PER_DOC, version=f"v{2 + w}")
        key, sha = payloads[0]["key"], payloads[0]["sha256"]
        with open_writer(p) as writer:
            started = time.perf_counter()
            with writer.together():
                writer.upsert(ids, dense, sparse, payloads)
                writer.delete_all_but(payloads[0]["doc_id"], ids)
            written = time.perf_counter()
        while True:
            hits = replicas.search(dense[0], sparse[0], top_k=1, where=SearchFilter(key_prefix=key))
            if hits and hits[0].payload.get("sha256") == sha:
                break
            if time.perf_counter() - started > 60:
                raise RuntimeError(f"the new version of {key} was not searchable within 60 s")
            time.sleep(0.01)
        write_s.append(written - started)
        visible_s.append(time.perf_counter() - started)
    return {"write_s_median": round(statistics.median(write_s), 3), "write_s_max": round(max(write_s), 3),
            "visible_s_median": round(statistics.median(visible_s), 3), "visible_s_max": round(max(visible_s), 3)}


def _questions() -> list:
    """The evaluation set's questions (include/eval/qa.jsonl), embedded: real questions as queries."""
    from kb.embedding import make_embedder
    from kb.settings import PipelineSettings

    questions = [json.loads(line)["question"] for line in QA.read_text().splitlines() if line.strip()]
    return [(v, None) for v in make_embedder(PipelineSettings()).embed_queries(questions)]


def _recall(replicas, queries: list) -> float:
    found = []
    for dense, _sparse in queries:
        approx = {h.id for h in replicas.search(dense, None, top_k=10, mode="dense")}
        exact = {h.id for h in replicas.search(dense, None, top_k=10, mode="dense", exact=True)}
        found.append(len(approx & exact) / max(1, len(exact)))
    return round(float(np.mean(found)), 4)


def _replica_limits(names: list[str], limit_mb: int, echo: Callable[[str], None]) -> dict:
    """A memory cgroup of ``limit_mb`` for each replica (``memory_limit.py``), by name; none
    where cgroups cannot be made here."""
    from kb_dev.bench.memory_limit import MemoryLimit

    limits = {}
    for name in names:
        limit = MemoryLimit.create(f"kb-bench-{os.getpid()}-{name}", limit_mb * 2**20)
        if limit is None:
            echo("  no memory cgroup can be made here (not root?): the replicas run without a limit")
            for made in limits.values():
                made.remove()
            return {}
        limits[name] = limit
    echo(f"  each replica runs in a memory cgroup limited to {limit_mb} MB")
    return limits


def measure_edge(dest: Path, total: int, chunks: Chunks, queries: int, rebuild: bool,
                 echo: Callable[[str], None], memory_limit_mb: int = 2048) -> dict[str, Any]:
    from kb.points import SearchFilter
    from kb.settings import PipelineSettings, StoreSettings
    from kb.store.local import replica_names
    from kb.store.migrate import prepare
    from kb.store.replicas import ReplicaSet
    from kb_dev.bench.memory_limit import evict_from_page_cache

    state = dest / f"edge-{total}"
    if rebuild:
        shutil.rmtree(state, ignore_errors=True)
    echo(f"Edge, {total} chunks: building (kept for the next run) ...")
    built = _build_edge(state, total, chunks, echo)
    # each run starts from the built store: the writes of an earlier run are taken out again
    shutil.rmtree(state / "store" / "replica-1", ignore_errors=True)
    p = PipelineSettings(state_dir=state)
    # an exact search over a million points from disk takes seconds: no query here is given up
    s = StoreSettings(replica_timeout_s=600)
    limits = _replica_limits(replica_names(s), memory_limit_mb, echo) if memory_limit_mb else {}
    if limits:
        # the second copy made here, then every file of the store dropped from the page cache:
        # cached pages stay charged to whoever read them first (this process, an earlier run),
        # and free to a limited replica they would hide the files' pages from its limit
        prepare(p, s)
        evict_from_page_cache(state / "store")
    replicas = ReplicaSet(p, s, wrap=lambda name, argv: limits[name].command(argv) if limits else argv)
    echo(f"Edge, {total} chunks: starting {len(replicas.copies)} replicas (a copy of the shard for the second) ...")
    started = time.perf_counter()
    replicas.start()
    out: dict[str, Any] = {"engine": "edge", "chunks": total, "build": built,
                           "replicas_start_s": round(time.perf_counter() - started, 1)}
    pids = [c.process.pid for c in replicas.copies]
    try:
        asked = chunks.queries(queries)
        # The store's files start cold (dropped from the page cache for the memory limit, and
        # after any restart): other queries, not timed, read the graph and the pages most
        # queries touch first, with and without the filter, as a service that has run a while has.
        echo(f"Edge, {total} chunks: {queries} queries to warm up, not timed ...")
        for i, (dense, sparse) in enumerate(chunks.queries(queries, seed=3)):
            replicas.search(dense, sparse, top_k=5, where=SearchFilter(key_prefix="folder-042/") if i % 2 else None)
        echo(f"Edge, {total} chunks: {queries} hybrid queries, then with a folder filter ...")
        out["hybrid"] = _timed_queries(replicas.search, asked)
        out["hybrid_prefix_filter"] = _timed_queries(replicas.search, asked, where=SearchFilter(key_prefix="folder-042/"))
        echo(f"Edge, {total} chunks: one document's write until searchable, {WRITES} times ...")
        out["write"] = _one_document_writes(p, replicas, chunks, total)
        out["replica_rss_mb"] = [_rss_mb(c.process.pid) for c in replicas.copies]
        # the files' pages a query touches stay mapped (clean page cache, the kernel's to drop):
        # RSS grows with the distinct pages queries read, towards the mapped files' size
        echo(f"Edge, {total} chunks: {LONG_RUN} more queries, half of them in a folder, for RSS ...")
        for i, (dense, sparse) in enumerate(chunks.queries(LONG_RUN, seed=11)):
            replicas.search(dense, sparse, top_k=5,
                            where=SearchFilter(key_prefix=f"folder-{i % FOLDERS:03d}/") if i % 2 else None)
        out["replica_rss_mb_after_more_queries"] = [_rss_mb(c.process.pid) for c in replicas.copies]
        out["replica_private_mb"] = [_private_mb(c.process.pid) for c in replicas.copies]
        echo(f"Edge, {total} chunks: HNSW recall@10 against exact search (the eval questions, then pool sentences) ...")
        out["recall_at_10"] = _recall(replicas, _questions())
        out["recall_at_10_pool_sentences"] = _recall(replicas, asked[:100])
        # exact search read every original vector from disk: the pages it touched count in RSS
        out["replica_rss_mb_after_exact_search"] = [_rss_mb(c.process.pid) for c in replicas.copies]
        # under a limit: the peak the kernel charged each replica, its reclaims, and any
        # replica it killed (a copy started again has a new pid, outside the limit)
        out["replica_memory_limit"] = [limit.report() for limit in limits.values()]
        out["replicas_restarted"] = sum(c.process.pid != pid for c, pid in zip(replicas.copies, pids))
    finally:
        replicas.close()
        for limit in limits.values():
            limit.remove()
    # the built shard as it was: a later run measures the same store
    shutil.rmtree(state / "store" / "replica-1", ignore_errors=True)
    return out


def measure_local_mode(dest: Path, total: int, chunks: Chunks, queries: int,
                       echo: Callable[[str], None]) -> dict[str, Any]:
    """The path this replaced: qdrant-client's local mode, the same points."""
    import psutil
    from qdrant_client import QdrantClient

    from kb.store.server import ServerStore

    path = dest / f"local-{total}"
    marker = path / "built.json"
    if not marker.exists():
        shutil.rmtree(path, ignore_errors=True)
        echo(f"local mode, {total} chunks: building ...")
        store = ServerStore(QdrantClient(path=str(path / "qdrant")), "kb_chunks")
        store.ensure_collection(chunks.vectors.shape[1])
        for batch in chunks.batches(total):
            store.upsert(*batch)
        store.close()
        marker.write_text("{}")
    rss_before = psutil.Process().memory_info().rss
    started = time.perf_counter()
    store = ServerStore(QdrantClient(path=str(path / "qdrant")), "kb_chunks")
    out: dict[str, Any] = {"engine": "local-mode", "chunks": total, "open_s": round(time.perf_counter() - started, 1)}
    try:
        ids, dense, sparse, payloads = chunks.batch(0, CHUNKS_PER_DOC, version="v9")
        started = time.perf_counter()
        store.upsert(ids, dense, sparse, payloads)
        store.delete_all_but(payloads[0]["doc_id"], ids)
        out["write_s"] = round(time.perf_counter() - started, 2)
        echo(f"local mode, {total} chunks: queries ...")
        out["hybrid"] = _timed_queries(store.search, chunks.queries(min(queries, 50)))
    finally:
        store.close()
    # the old search service's reload after every write: a copy of the folder, opened, every
    # point read with its vectors into memory
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        started = time.perf_counter()
        shutil.copytree(path / "qdrant", Path(tmp) / "qdrant")
        copy = ServerStore(QdrantClient(path=str(Path(tmp) / "qdrant")), "kb_chunks")
        points = copy.points(with_vectors=True)
        copy.close()
        out["reload_s"] = round(time.perf_counter() - started, 1)
        out["process_rss_mb"] = round(psutil.Process().memory_info().rss / 2**20, 1)
        out["rss_growth_mb"] = round((psutil.Process().memory_info().rss - rss_before) / 2**20, 1)
        del points
    gc.collect()
    return out


def bench_scale(sizes: list[int], dest: Path, queries: int = 200, before_max: int = 100_000, rebuild: bool = False,
                memory_limit_mb: int = 2048, echo: Callable[[str], None] = _echo) -> dict[str, Any]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    dest.mkdir(parents=True, exist_ok=True)
    pool = sentence_pool(dest, echo)
    chunks = Chunks(pool, sentence_vectors(dest, pool, echo))
    rows = []
    for total in sizes:
        if total <= before_max:
            rows.append(measure_local_mode(dest, total, chunks, queries, echo))
        rows.append(measure_edge(dest, total, chunks, queries, rebuild, echo, memory_limit_mb))
    out = {"sentences": len(pool), "queries": queries, "rows": rows}
    out["table"] = table(out)
    return out


def _limited(row: dict[str, Any]) -> str:
    limits = row.get("replica_memory_limit") or []
    if not limits:
        return "no limit"
    peaks = "/".join(f"{m['peak_mb']:.0f}" for m in limits)
    return f"{limits[0]['limit_mb']}: {peaks}, {sum(m['oom_kills'] for m in limits)}"


def table(out: dict[str, Any]) -> str:
    """RSS: each replica's after the measured queries and writes, then after 4,000 more queries,
    and (own) its anonymous memory alone; recall@10 for the eval questions, then pool sentences."""
    lines = [f"{'engine':10} {'chunks':>9} {'write s':>8} {'visible s':>10} {'reload s':>9} {'hybrid p50/p99 ms':>18} "
             f"{'+prefix p50/p99 ms':>19} {'RSS MB (-> +4000 q; own)':>30} {'recall@10':>9} {'(pool)':>7} "
             f"{'limit MB: peak, OOM kills':>26}"]
    for r in out["rows"]:
        if r["engine"] == "edge":
            w = r["write"]
            rss = (f"{'/'.join(f'{m:.0f}' for m in r['replica_rss_mb'])} -> "
                   f"{'/'.join(f'{m:.0f}' for m in r['replica_rss_mb_after_more_queries'])}; "
                   f"{'/'.join(f'{m:.0f}' for m in r['replica_private_mb'])}")
            lines.append(
                f"{'edge':10} {r['chunks']:>9} {w['write_s_median']:>8.3f} {w['visible_s_median']:>10.3f} {'-':>9} "
                f"{r['hybrid']['p50_ms']:>8.2f}/{r['hybrid']['p99_ms']:<9.2f} "
                f"{r['hybrid_prefix_filter']['p50_ms']:>9.2f}/{r['hybrid_prefix_filter']['p99_ms']:<9.2f} "
                f"{rss:>30} {r['recall_at_10']:>9.4f} {r['recall_at_10_pool_sentences']:>7.4f} {_limited(r):>26}")
        else:
            lines.append(
                f"{'local mode':10} {r['chunks']:>9} {r['write_s']:>8.2f} {r['write_s'] + r['reload_s']:>10.1f} "
                f"{r['reload_s']:>9.1f} {r['hybrid']['p50_ms']:>8.2f}/{r['hybrid']['p99_ms']:<9.2f} {'-':>19} "
                f"{r['process_rss_mb']:>30.0f} {'-':>9}")
    return "\n".join(lines)
