"""``kb bench ...``: the benchmarks (``kb_dev.bench``), each printing what it measured as a
table, or as JSON with ``--json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from kb_dev.cli.stack import client_env


def _echo(args: argparse.Namespace) -> Callable[[str], None]:
    """Progress lines, unless the output is JSON (then stdout carries the result alone)."""
    return (lambda _line: None) if args.json else print


def _report(args: argparse.Namespace, result: dict[str, Any], text: str) -> None:
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else text)


def cmd_ingest(args: argparse.Namespace) -> int:
    from kb_dev.bench.ingest import bench_ingest

    client_env()
    result = bench_ingest(documents=args.documents, pages=args.pages, timeout_s=args.timeout)
    _report(args, result, result["table"])
    return 0


def cmd_corpus(args: argparse.Namespace) -> int:
    from kb_dev.bench.corpus import bench_corpus

    client_env()
    result = bench_corpus(Path(args.dest), timeout_s=args.timeout, echo=_echo(args))
    _report(args, result, result["table"])
    return 0 if not result["totals"]["not_indexed"] else 1


def cmd_structure(args: argparse.Namespace) -> int:
    from kb_dev.bench.structure import bench_structure

    result = bench_structure(Path(args.dest))
    _report(args, result, result["table"])
    return 0


def cmd_scans(args: argparse.Namespace) -> int:
    from kb_dev.bench.scans import bench_scans

    splits = ("tuning", "frozen") if args.split == "all" else (args.split,)
    result = bench_scans(Path(args.dest), splits=splits, skews=tuple(args.skews), reuse_ocr=args.reuse_ocr,
                         only=args.document or None)
    _report(args, result, result["table"])
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    from kb_dev.bench.scale import bench_scale

    result = bench_scale(args.chunks, Path(args.dest), queries=args.queries, before_max=args.before_max,
                         rebuild=args.rebuild, memory_limit_mb=args.memory_limit_mb)
    _report(args, result, result["table"])
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from kb_dev.bench.search import bench_search

    client_env()
    result = bench_search(queries=args.queries, concurrency=args.concurrency, echo=_echo(args))
    _report(args, result, result["table"])
    return 0


def cmd_soak(args: argparse.Namespace) -> int:
    from kb_dev.bench.soak import soak

    client_env()
    result = soak(minutes=args.minutes, interval_s=args.interval, echo=_echo(args))
    _report(args, result, result["table"])
    return 0 if not result["error_count"] else 1


def cmd_latency(args: argparse.Namespace) -> int:
    from kb_dev.bench.latency import bench_latency

    client_env()
    result = bench_latency(documents=args.documents, timeout_s=args.timeout, echo=_echo(args))
    _report(args, result, f"landing to searchable over {result['documents']} documents: p50 {result['p50_s']}s, "
                          f"max {result['max_s']}s; medians: "
                          + ", ".join(f"{k} {v}" for k, v in result["split_median_s"].items()))
    return 0


def cmd_sense(args: argparse.Namespace) -> int:
    from kb_dev.bench.sense import bench_sense

    result = bench_sense(objects=args.objects, ledger_url=args.ledger_url, echo=_echo(args))
    _report(args, result, f"sense over {result['objects']:,} objects / {result['ledger_rows']:,} ledger rows: "
                          f"{result['sense_s']}s, {result['s3_list_calls']} list calls, {result['s3_other_requests']} "
                          f"other S3 requests, {result['sql_selects']} SQL select(s) ({result['sql_statements']})")
    return 0


def cmd_throughput(args: argparse.Namespace) -> int:
    from kb_dev.bench.throughput import bench_throughput

    result = bench_throughput(documents=args.documents, pages=args.pages, timeout_s=args.timeout, echo=_echo(args))
    _report(args, result, f"{result['pages']} born-digital pages: 1 worker {result['workers_1_pages_per_s']} pages/s, "
                          f"2 workers {result['workers_2_pages_per_s']} pages/s ({result['speedup']}x)")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks")
    bench = p.add_subparsers(dest="bench", required=True)

    def add(name: str, func, help_: str) -> argparse.ArgumentParser:
        b = bench.add_parser(name, help=help_)
        b.add_argument("--json", action="store_true")
        b.set_defaults(func=func)
        return b

    b = add("ingest", cmd_ingest, "pages/s through the DAG against a direct script, same run")
    b.add_argument("--documents", type=int, default=10)
    b.add_argument("--pages", type=int, default=20, help="pages per document")
    b.add_argument("--timeout", type=float, default=1800.0)
    b = add("corpus", cmd_corpus, "the real corpus (include/corpus) through the stack: a row per document, "
                                  "pages/s for born-digital and for scanned pages")
    b.add_argument("--dest", default=".kb/corpus", help="where the corpus is fetched to (kept between runs)")
    b.add_argument("--timeout", type=float, default=7200.0)
    b = add("structure", cmd_structure, "how documents are read, on the real corpus and the samples: chunks cut "
                                        "mid-sentence at a page break, running headers left in chunks, table "
                                        "chunks without their header row, chunks with boxes, OCR CER with spaces "
                                        "against Tesseract")
    b.add_argument("--dest", default=".kb/corpus", help="where the corpus is fetched to (kept between runs)")
    b = add("scans", cmd_scans, "how scanned pages are read, on documents no reading rule was chosen on "
                                "(include/scanbench): reading order, columns mixed in chunks, table rows with "
                                "their header, tables claimed where there are none, CER, seconds per page; "
                                "line geometry and the layout model side by side, at several skews")
    b.add_argument("--split", choices=("tuning", "frozen", "all"), default="tuning",
                   help="frozen is measured once, at the end of a piece of work: choose nothing on it")
    b.add_argument("--skews", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0], help="degrees")
    b.add_argument("--document", action="append", help="only this file of the list (repeatable)")
    b.add_argument("--reuse-ocr", action="store_true",
                   help="PP-OCR's lines and the regions from the last run (for trying reading rules; "
                        "seconds are then that run's)")
    b.add_argument("--dest", default=".kb/scanbench", help="where the originals are fetched to (kept between runs)")
    b = add("scale", cmd_scale, "the embedded store at realistic sizes as the search service runs it: one "
                                "document's write and the time until searchable, hybrid p50/p99 with and "
                                "without a folder filter, replica RSS, HNSW recall@10; local mode beside it")
    b.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    b.add_argument("--queries", type=int, default=200)
    b.add_argument("--before-max", type=int, default=100_000,
                   help="the largest size also measured on qdrant-client's local mode (the path it replaced)")
    b.add_argument("--dest", default=".kb/bench-scale", help="where the stores are built (kept between runs)")
    b.add_argument("--rebuild", action="store_true", help="build the Edge stores again")
    b.add_argument("--memory-limit-mb", type=int, default=2048,
                   help="run each replica in a memory cgroup of this size, as a container would (0: none; "
                        "needs a writable cgroup tree, else the bench says so and runs without)")
    b = add("search", cmd_search, "the search service under load (idle and while indexing), `kb search` "
                                  "as a fresh process, ONNX vs torch embedding, recall@5")
    b.add_argument("--queries", type=int, default=200)
    b.add_argument("--concurrency", type=int, default=4)
    b = add("soak", cmd_soak, "upload a new or changed document every few seconds while searching, for N "
                              "minutes: documents, errors, RSS and open fds of every long-lived process")
    b.add_argument("--minutes", type=float, default=30.0)
    b.add_argument("--interval", type=float, default=5.0, help="seconds between uploads")
    b = add("latency", cmd_latency, "seconds from an upload to its first search hit, with no trigger "
                                    "(the inbox watcher); one document at a time")
    b.add_argument("--documents", type=int, default=10)
    b.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one document")
    b = add("sense", cmd_sense, "sense over N tiny objects with N ledger rows, on an S3 server of its own: "
                                "seconds, S3 requests by kind, SQL statements")
    b.add_argument("--objects", type=int, default=20_000)
    b.add_argument("--ledger-url", default=None, help="a SQLAlchemy URL (e.g. the distributed stack's Postgres); "
                                                      "default: SQLite in a temporary folder")
    b = add("throughput", cmd_throughput, "the same born-digital pages through the distributed stack with 1 "
                                          "and with 2 Celery workers (starts and stops each stack itself)")
    b.add_argument("--documents", type=int, default=10)
    b.add_argument("--pages", type=int, default=20, help="pages per document")
    b.add_argument("--timeout", type=float, default=1800.0)
