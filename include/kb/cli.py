"""``kb``: run the local stack, ingest documents, search the knowledge base."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from kb.decisions import Decision
from kb.errors import KbError


def _stack_settings():
    from kb.settings import StackSettings

    return StackSettings()


def _client_env():
    from kb.stack import load_client_env

    s = _stack_settings()
    load_client_env(s)
    return s


# --- stack -----------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    from kb import stack

    settings = _stack_settings()
    if args.no_observe:
        settings = settings.model_copy(update={"observe": False})
    st = stack.up(settings, airflow=not args.no_airflow, distributed=args.distributed, workers=args.workers)
    print(f"up: S3 {st['s3']['endpoint']}, Airflow {st['airflow']['url'] if st['airflow']['running'] else '(not started)'}, "
          f"Qdrant {st['qdrant']['location']}")
    if st.get("prometheus", {}).get("running"):
        print(f"    Prometheus {st['prometheus']['url']}, alerts: `kb alerts`")
    return 0


def cmd_alerts(args: argparse.Namespace) -> int:
    from kb_dev.alerts_cli import show_alerts

    return show_alerts(_stack_settings(), as_json=args.json, last=args.last)


def cmd_down(args: argparse.Namespace) -> int:
    from kb import stack

    stack.down(_stack_settings())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from kb import stack

    st = stack.status(_stack_settings())
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        for part in ("s3", "ocr", "search", "airflow"):
            p = st[part]
            state = "healthy" if p["healthy"] else ("running, not healthy" if p["running"] else "stopped")
            where = p.get("endpoint") or p.get("url")
            print(f"{part:8} {state:22} {where}  pid={p['pid']}" + (f"  ({p['error']})" if p.get("error") else ""))
        q = st["qdrant"]
        print(f"{'qdrant':8} {('prepared' if q['prepared'] else 'not prepared'):22} {q['mode']} {q['location']}")
    running = st["s3"]["healthy"] and all(st[p]["healthy"] or not st[p]["running"] for p in ("airflow", "ocr", "search"))
    return 0 if running else 1


def cmd_pools_sync(args: argparse.Namespace) -> int:
    from kb import pools, stack

    s = _stack_settings()
    urls = args.ocr_url or stack.ocr_replica_urls(s)
    replicas = pools.replica_capacities(urls, os.environ.get("KB_OCR_API_KEY") or stack.ocr_api_key(s))
    for r in replicas:
        print(f"{r.url}: {r.sequences} ({'KV budget, sequences of a typical range' if r.source == 'kv' else 'engine slots'})")
    if args.dry_run:
        print(f"would set pool {pools.POOL} to {max(1, sum(r.sequences for r in replicas))} slots")
        return 0
    client = stack.airflow_client(s)
    try:
        slots = pools.sync(client, replicas)
    finally:
        client.close()
    print(f"pool {pools.POOL}: {slots} slots")
    return 0


# --- ingest ----------------------------------------------------------------------------


def _files(paths: list[str]) -> list[tuple[Path, str]]:
    out = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend((f, f.relative_to(path).as_posix()) for f in sorted(path.rglob("*")) if f.is_file())
        elif path.is_file():
            out.append((path, path.name))
        else:
            raise KbError(f"{raw}: no such file or folder")
    return out


def cmd_ingest(args: argparse.Namespace) -> int:
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings

    s = _client_env()
    p = PipelineSettings()
    store = ObjectStore.from_settings()
    files = _files(args.paths)
    uploaded = []
    for path, key in files:
        key = f"{args.prefix}{key}"
        info = store.put_bytes(p.inbox_bucket, key, path.read_bytes(), content_type="application/pdf")
        uploaded.append(info)
        print(f"uploaded s3://{p.inbox_bucket}/{key} ({info.size} bytes)")
    if not args.wait:
        print(f"{len(files)} file(s) uploaded; the scheduled kb_ingest run picks them up (or use --wait)")
        return 0
    from kb.stack import run_ingest

    result = run_ingest(s, {"prefix": args.prefix, "force": args.force}, args.timeout)
    summary = result.summary or {}
    if summary:
        print(
            f"run {result.state}: {summary.get('documents_indexed', 0)} indexed, "
            f"{summary.get('documents_unchanged', 0)} unchanged, {summary.get('documents_quarantined', 0)} quarantined, "
            f"{summary.get('documents_failed', 0)} failed; {summary.get('pages', 0)} pages, {summary.get('chunks', 0)} chunks"
            + (f"; {summary['ranges_split']} range(s) split to fit the OCR service" if summary.get("ranges_split") else "")
        )
        ocr = summary.get("ocr") or {}
        if ocr.get("pages") and ocr.get("pages_per_gpu_hour") is not None:
            print(f"  OCR: {ocr['pages']} pages, {ocr['tokens_in']} tokens in, {ocr['tokens_out']} out, "
                  f"{ocr['device_seconds']:.1f} s of device time ({ocr['pages_per_gpu_hour']:.0f} pages per GPU-hour)"
                  + (f", {ocr['cost_per_1000_pages']:.2f} per 1,000 pages" if ocr.get("cost_per_1000_pages") is not None
                     else ""))
        for q in summary.get("quarantine", []):
            print(f"  quarantined {q['key']}: {q['code']}: {q['message']}")
        for f in summary.get("failed", []):
            print(f"  failed {f['key']}: {f['code']}: {f['message']} (next try not before {f['next_attempt_at']})")
        for p_ in summary.get("pages_failed", []):
            print(f"  {p_['key']} page {p_['page']} left out: {p_['reason']}")
    else:
        print(f"run {result.state}")
    _print_outcomes(store, p, uploaded)
    return 0 if result.state == "success" else 1


def _print_outcomes(store, p, uploaded) -> None:
    """Where each uploaded file stands now, from the ledger: the run summary counts only what
    that run did, and a scheduled run may have indexed the files just before it."""
    from kb.ledger import Status, doc_id_for
    from kb.ledger_db import Ledger

    ledger = Ledger.for_settings(p, store)
    for info in uploaded:
        entry = ledger.get(doc_id_for(info.bucket, info.key))
        if entry is None or not entry.same_version(info):
            print(f"  {info.key}: not processed yet (a run will pick it up)")
        elif entry.status == Status.INDEXED:
            missing = f", indexed without page(s) {', '.join(str(f['page']) for f in entry.failed_pages)}" \
                if entry.failed_pages else ""
            print(f"  {info.key}: indexed, {entry.pages} pages, {entry.chunks} chunks{missing}")
        elif entry.status == Status.FAILED:
            error = entry.error or {}
            print(f"  {info.key}: failed (attempt {entry.attempts}, next not before {entry.next_attempt_at}): "
                  f"{error.get('code')}: {error.get('message')}")
        else:
            error = entry.error or {}
            print(f"  {info.key}: {entry.status}: {error.get('code')}: {error.get('message')}")


# --- review ----------------------------------------------------------------------------


def cmd_review_list(args: argparse.Namespace) -> int:
    from kb.ledger_db import Ledger
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings

    s = _client_env()
    p = PipelineSettings()
    queue = Ledger.for_settings(p, ObjectStore.from_settings()).pending_reviews(p.inbox_bucket)
    waiting = {}
    if queue:
        from kb import review, stack

        try:
            client = stack.airflow_client(s)
        except KbError:  # Airflow is not running: the ledger's queue is still the queue
            client = None
        if client is not None:
            try:
                waiting = review.waiting_requests(client)
            finally:
                client.close()
    rows = [{"key": e.key, "code": (e.error or {}).get("code"), "message": (e.error or {}).get("message"),
             "since": e.updated_at, "run_id": e.run_id,
             "review_run_id": waiting[e.key].run_id if e.key in waiting else None} for e in queue]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no quarantined document waits for a decision")
        return 0
    for r in rows:
        asked = f"  (waiting in kb_review run {r['review_run_id']})" if r["review_run_id"] else ""
        print(f"{r['key']}  since {r['since']}  {r['code']}: {r['message']}{asked}")
    print(f"{len(rows)} document(s); decide with `kb review decide KEY accept|reextract-ocr|reextract-limits|drop`")
    return 0


def _quality_params(pairs: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` quality threshold overrides; a value is read as JSON where it parses."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise KbError(f"--param {pair!r}: expected NAME=VALUE, e.g. max_empty_page_share=0.9")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    from kb.settings import QualitySettings

    QualitySettings.with_overrides(out)  # BadParams now rather than in the review run
    return out


def cmd_review_decide(args: argparse.Namespace) -> int:
    from kb import review, stack

    s = _client_env()
    quality = _quality_params(args.param or [])
    client = stack.airflow_client(s)
    try:
        decided = review.decide(client, args.key, args.decision, quality)
        r = decided.response
        print(f"{args.key}: {r.chosen_options[0]} by {r.responded_by} at {r.responded_at} "
              f"(kb_review run {decided.review_run_id})")
        if not args.wait:
            return 0
        outcome = review.follow_through(client, decided, args.timeout)
    finally:
        client.close()
    if outcome is None:
        return 0
    print(f"kb_ingest run {outcome.run_id} {outcome.state}")
    _print_outcomes_of(args.key)
    return 0 if outcome.state == "success" else 1


def _print_outcomes_of(key: str) -> None:
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings

    p = PipelineSettings()
    store = ObjectStore.from_settings()
    _print_outcomes(store, p, [o for o in store.list_latest(p.inbox_bucket, key) if o.key == key])


# --- search ----------------------------------------------------------------------------


def searcher(quiet: bool = False):
    """The running search service's client; else an in-process retriever, with a note.

    In process, the first query loads the embedder and opens the store: seconds, where the
    service answers in milliseconds."""
    from kb.stack import search_client

    client = search_client(_stack_settings())
    if client is not None:
        return client
    from kb.retrieval import Retriever
    from kb.settings import PipelineSettings

    if not quiet:
        print("note: the search service is not running (`kb up` starts it); searching in this process",
              file=sys.stderr)
    return Retriever(PipelineSettings())


def search(query: str, top_k: int = 5, mode: str | None = None) -> list[dict[str, Any]]:
    return searcher().search(query, top_k, mode)


def cmd_search(args: argparse.Namespace) -> int:
    _client_env()
    hits = search(args.query, args.top_k, args.mode)
    if args.json:
        print(json.dumps(hits, ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no results (is anything indexed? try `kb ingest PATH --wait`)")
        return 0
    for i, h in enumerate(hits, 1):
        pages = ",".join(map(str, h["pages"]))
        print(f"{i}. {h['score']:.3f}  {h['key']}  p.{pages}\n   {h['snippet']}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from kb.evaluation import evaluate, format_report, load_questions
    from kb.settings import PipelineSettings

    _client_env()
    questions = load_questions(Path(args.questions))
    modes = ("dense", "sparse", "hybrid") if args.mode == "all" else (args.mode or PipelineSettings().search_mode,)
    report = evaluate(searcher(), questions, top_k=args.top_k, modes=modes)
    print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else format_report(report))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Ingest the sample documents and answer the sample questions, with source and page."""
    from kb.samples import DEMO_QUESTIONS

    samples = Path(__file__).resolve().parents[1] / "samples"
    rc = cmd_ingest(argparse.Namespace(paths=[str(samples)], prefix="", wait=True, force=False, timeout=args.timeout))
    if rc != 0:
        return rc
    right = 0
    ask = searcher()
    for question, key, page in DEMO_QUESTIONS:
        hit = ask.search(question, 1)
        print(f"\nQ: {question}")
        if not hit:
            print("A: (no answer)")
            continue
        h = hit[0]
        ok = h["key"] == key and page in h["pages"]
        right += ok
        print(f"A: {h['snippet']}\n   source: {h['key']}, page {','.join(map(str, h['pages']))}"
              f"  [{'expected page' if ok else 'expected ' + key + ' p.' + str(page)}]")
    print(f"\n{right}/{len(DEMO_QUESTIONS)} answers cite the expected page")
    return 0 if right == len(DEMO_QUESTIONS) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from kb.bench import bench_ingest

    _client_env()
    result = bench_ingest(documents=args.documents, pages=args.pages, timeout_s=args.timeout)
    print(json.dumps(result, indent=2) if args.json else result["table"])
    return 0


def cmd_bench_search(args: argparse.Namespace) -> int:
    from kb.bench_search import bench_search

    _client_env()
    result = bench_search(queries=args.queries, concurrency=args.concurrency,
                          echo=(lambda _l: None) if args.json else print)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else result["table"])
    return 0


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from kb.bench_soak import soak

    _client_env()
    result = soak(minutes=args.minutes, interval_s=args.interval, echo=(lambda _l: None) if args.json else print)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else result["table"])
    return 0 if not result["error_count"] else 1


def cmd_bench_latency(args: argparse.Namespace) -> int:
    from kb.bench_latency import bench_latency

    _client_env()
    result = bench_latency(documents=args.documents, timeout_s=args.timeout,
                           echo=(lambda _l: None) if args.json else print)
    print(json.dumps(result) if args.json else
          f"landing to searchable over {result['documents']} documents: p50 {result['p50_s']}s, max {result['max_s']}s")
    return 0


def cmd_bench_sense(args: argparse.Namespace) -> int:
    from kb.bench_sense import bench_sense

    result = bench_sense(objects=args.objects, ledger_url=args.ledger_url, echo=(lambda _l: None) if args.json else print)
    print(json.dumps(result) if args.json else
          f"sense over {result['objects']:,} objects / {result['ledger_rows']:,} ledger rows: {result['sense_s']}s, "
          f"{result['s3_list_calls']} list calls, {result['s3_other_requests']} other S3 requests, "
          f"{result['sql_selects']} SQL select(s) ({result['sql_statements']})")
    return 0


def cmd_bench_throughput(args: argparse.Namespace) -> int:
    from kb.bench_throughput import bench_throughput

    result = bench_throughput(documents=args.documents, pages=args.pages, timeout_s=args.timeout,
                              echo=(lambda _l: None) if args.json else print)
    print(json.dumps(result) if args.json else
          f"{result['pages']} born-digital pages: 1 worker {result['workers_1_pages_per_s']} pages/s, "
          f"2 workers {result['workers_2_pages_per_s']} pages/s ({result['speedup']}x)")
    return 0


def cmd_bench_corpus(args: argparse.Namespace) -> int:
    from kb.bench_corpus import bench_corpus

    _client_env()
    result = bench_corpus(Path(args.dest), timeout_s=args.timeout, echo=(lambda _l: None) if args.json else print)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else result["table"])
    return 0 if not result["totals"]["not_indexed"] else 1


def cmd_bench_structure(args: argparse.Namespace) -> int:
    from kb.bench_structure import bench_structure

    result = bench_structure(Path(args.dest))
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else result["table"])
    return 0


# --- entry point -----------------------------------------------------------------------


def _service_error(exc: Exception) -> str | None:
    """A one-line explanation for the errors a user can fix (stack down, wrong keys)."""
    import httpx
    from minio.error import S3Error
    from urllib3.exceptions import MaxRetryError

    if isinstance(exc, MaxRetryError):
        return f"cannot reach the S3 server ({exc.pool.host}:{exc.pool.port}); is the stack up? (`kb status`)"
    if isinstance(exc, S3Error):
        return f"the S3 server refused the request: {exc.code}: {exc.message}"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot reach Airflow: {exc}; is the stack up? (`kb status`)"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("up", help="start the local stack (S3 server, Airflow, Qdrant local store)",
                       description="Ports and the state folder come from KB_S3_PORT, KB_WEED_MASTER_PORT, "
                                   "KB_WEED_VOLUME_PORT, KB_WEED_FILER_PORT, KB_OCR_PORT, KB_AIRFLOW_PORT, "
                                   "KB_AIRFLOW_WORKER_LOG_PORT, KB_AIRFLOW_TRIGGER_LOG_PORT and KB_STATE_DIR.")
    p.add_argument("--no-airflow", action="store_true", help="only the S3 server and the Qdrant store (no OCR service, no Airflow)")
    p.add_argument("--distributed", action="store_true",
                   help="the production topology: Postgres and Redis (Debian packages), Airflow's CeleryExecutor "
                        "with a default and a gpu worker, two OCR replicas (ports: KB_POSTGRES_PORT, KB_REDIS_PORT, "
                        "KB_OCR_REPLICA_PORTS, KB_AIRFLOW_EXTRA_WORKER_LOG_PORTS)")
    p.add_argument("--workers", type=int, choices=(1, 2), default=2,
                   help="with --distributed: 2 = one worker per queue (default, gpu); 1 = one worker for both")
    p.add_argument("--no-observe", action="store_true",
                   help="leave out the exporter, the StatsD bridge, the mail sink, Prometheus and Alertmanager "
                        "(ports: KB_EXPORTER_PORT, KB_STATSD_PORT, KB_STATSD_HTTP_PORT, KB_MAIL_PORT, "
                        "KB_PROMETHEUS_PORT, KB_ALERTMANAGER_PORT)")
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("alerts", help="the alerts the local stack sent (mail to the ops team, at its mail sink)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--last", type=int, default=20, help="the last N (0: all)")
    p.set_defaults(func=cmd_alerts)
    sub.add_parser("down", help="stop what `kb up` started").set_defaults(func=cmd_down)
    p = sub.add_parser("status", help="report each part of the stack")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("ingest", help="upload files to the inbox bucket (and optionally run kb_ingest)")
    p.add_argument("paths", nargs="+", help="files or folders")
    p.add_argument("--prefix", default="", help="key prefix in the inbox bucket")
    p.add_argument("--wait", action="store_true", help="trigger kb_ingest and follow it to the end")
    p.add_argument("--force", action="store_true",
                   help="with --wait: re-plan and re-index everything under the prefix, quarantined versions included")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the run")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("review", help="the review queue: quarantined documents waiting for a decision (kb_review)")
    review_sub = p.add_subparsers(dest="review", required=True)
    b = review_sub.add_parser("list", help="quarantined documents with no decision yet: key, since, why")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_review_list)
    b = review_sub.add_parser("decide", help="decide about a quarantined document through Airflow's REST API "
                                             "(answers its kb_review run, starting one if none waits)")
    b.add_argument("key", help="the document's inbox key")
    b.add_argument("decision", choices=[d.value for d in Decision])
    b.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a quality threshold for this document alone (repeat), e.g. max_empty_page_share=0.9")
    b.add_argument("--wait", action="store_true", help="follow the review run and the kb_ingest run it triggers")
    b.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for each run")
    b.set_defaults(func=cmd_review_decide)

    p = sub.add_parser("search", help="search the knowledge base")
    p.add_argument("query")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--mode", choices=("hybrid", "dense", "sparse"), default=None,
                   help="default KB_SEARCH_MODE (hybrid)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("eval", help="recall@k and MRR of a question set against the index",
                       description='QA.jsonl holds one {"doc", "page", "question", "answer_substring"} per line; '
                                   "a question is found when a hit among the top k comes from doc and covers page.")
    p.add_argument("questions", help="a QA.jsonl file")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--mode", choices=("hybrid", "dense", "sparse", "all"), default=None,
                   help="'all' prints dense, sparse and hybrid side by side (default KB_SEARCH_MODE)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("demo", help="ingest the sample documents and answer sample questions")
    p.add_argument("--timeout", type=float, default=900.0)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("pools", help="Airflow pools")
    pools_sub = p.add_subparsers(dest="pools", required=True)
    b = pools_sub.add_parser("sync", help="set the gpu_ocr pool to the OCR replicas' published capacity (their KV "
                             "budgets in sequences of a typical range, or their engine slots)")
    b.add_argument("--ocr-url", action="append", help="an OCR replica's base URL (repeat); default: the stack's")
    b.add_argument("--dry-run", action="store_true", help="print the capacities and the slots, change nothing")
    b.set_defaults(func=cmd_pools_sync)

    p = sub.add_parser("bench", help="benchmarks")
    bench = p.add_subparsers(dest="bench", required=True)
    b = bench.add_parser("ingest", help="pages/s through the DAG against a direct script, same run")
    b.add_argument("--documents", type=int, default=10)
    b.add_argument("--pages", type=int, default=20, help="pages per document")
    b.add_argument("--timeout", type=float, default=1800.0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)
    b = bench.add_parser("corpus", help="the real corpus (include/corpus) through the stack: a row per document, "
                                        "pages/s for born-digital and for scanned pages")
    b.add_argument("--dest", default=".kb/corpus", help="where the corpus is fetched to (kept between runs)")
    b.add_argument("--timeout", type=float, default=7200.0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_corpus)
    b = bench.add_parser("structure", help="how documents are read, on the real corpus and the samples: chunks cut "
                                           "mid-sentence at a page break, running headers left in chunks, table "
                                           "chunks without their header row, chunks with boxes, OCR CER with spaces "
                                           "against Tesseract")
    b.add_argument("--dest", default=".kb/corpus", help="where the corpus is fetched to (kept between runs)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_structure)
    b = bench.add_parser("search", help="the search service under load (idle and while indexing), `kb search` "
                                        "as a fresh process, ONNX vs torch embedding, recall@5")
    b.add_argument("--queries", type=int, default=200)
    b.add_argument("--concurrency", type=int, default=4)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_search)
    b = bench.add_parser("soak", help="upload a new or changed document every few seconds while searching, for N "
                                      "minutes: documents, errors, RSS and open fds of every long-lived process")
    b.add_argument("--minutes", type=float, default=30.0)
    b.add_argument("--interval", type=float, default=5.0, help="seconds between uploads")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_soak)
    b = bench.add_parser("latency", help="seconds from an upload to its first search hit, with no trigger "
                                         "(the inbox watcher); one document at a time")
    b.add_argument("--documents", type=int, default=10)
    b.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one document")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_latency)
    b = bench.add_parser("sense", help="sense over N tiny objects with N ledger rows, on an S3 server of its own: "
                                       "seconds, S3 requests by kind, SQL statements")
    b.add_argument("--objects", type=int, default=20_000)
    b.add_argument("--ledger-url", default=None, help="a SQLAlchemy URL (e.g. the distributed stack's Postgres); "
                                                      "default: SQLite in a temporary folder")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_sense)
    b = bench.add_parser("throughput", help="the same born-digital pages through the distributed stack with 1 "
                                            "and with 2 Celery workers (starts and stops each stack itself)")
    b.add_argument("--documents", type=int, default=10)
    b.add_argument("--pages", type=int, default=20, help="pages per document")
    b.add_argument("--timeout", type=float, default=1800.0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_throughput)
    return parser


def main(argv: list[str] | None = None) -> int:
    # progress of long runs must show up when stdout is a file or a pipe too
    sys.stdout.reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retry warnings repeat what we report
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KbError as exc:
        print(f"kb: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 2
    except Exception as exc:
        message = _service_error(exc)
        if message is None:
            raise
        print(f"kb: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
