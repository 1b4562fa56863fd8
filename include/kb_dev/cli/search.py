"""``kb search``, ``kb eval`` and ``kb demo``: asking the knowledge base."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kb_dev.cli.documents import folder_prefix, ingest
from kb_dev.cli.stack import client_env


def searcher(quiet: bool = False):
    """The running search service's client; else an in-process retriever, with a note.

    In process, the first query loads the embedder and opens the store: seconds, where the
    service answers in milliseconds."""
    from kb_dev.stack import search

    s = client_env()
    client = search.client(s)
    if client is not None:
        return client
    from kb.retrieval import Retriever
    from kb.settings import PipelineSettings

    if not quiet:
        print("note: the search service is not running (`kb up` starts it); searching in this process",
              file=sys.stderr)
    return Retriever(PipelineSettings())


def cmd_search(args: argparse.Namespace) -> int:
    from kb.points import SearchFilter

    folder = folder_prefix(args.prefix)
    hits = searcher().search(args.query, args.top_k, args.mode, SearchFilter(key_prefix=folder) if folder else None)
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
    from kb_dev.evaluation import evaluate, format_report, load_questions
    from kb.settings import PipelineSettings

    ask = searcher()
    questions = load_questions(Path(args.questions))
    modes = ("dense", "sparse", "hybrid") if args.mode == "all" else (args.mode or PipelineSettings().search_mode,)
    report = evaluate(ask, questions, top_k=args.top_k, modes=modes, folder=folder_prefix(args.prefix))
    print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else format_report(report))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Ingest the sample documents and answer the sample questions, with source and page."""
    from kb_dev.samples import DEMO_QUESTIONS, SAMPLES_DIR

    rc = ingest([str(SAMPLES_DIR)], wait=True, timeout_s=args.timeout)
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


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="search the knowledge base")
    p.add_argument("query")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--mode", choices=("hybrid", "dense", "sparse"), default=None,
                   help="default KB_SEARCH_MODE (hybrid)")
    p.add_argument("--prefix", default="", help="only documents in this folder of the inbox (as `kb ingest --prefix`)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("eval", help="recall@k and MRR of a question set against the index",
                       description='QA.jsonl holds one {"doc", "page", "question", "answer_substring"} per line '
                                   '(optionally "split": tuning or frozen, "kind": table-cell, with its "row", '
                                   "paraphrase or two-column); a question is found when a hit among the top k comes "
                                   "from doc, covers page and holds the answer (a table cell's, its row too; on an "
                                   "image-only copy, a fuzzy match: kb_dev.evaluation). The report has a table per "
                                   "split.")
    p.add_argument("questions", help="a QA.jsonl file")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--mode", choices=("hybrid", "dense", "sparse", "all"), default=None,
                   help="'all' prints dense, sparse and hybrid side by side (default KB_SEARCH_MODE)")
    p.add_argument("--prefix", default="", help="only documents in this folder of the inbox; each question's doc "
                                                "is then a key relative to it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("demo", help="ingest the sample documents and answer sample questions")
    p.add_argument("--timeout", type=float, default=900.0)
    p.set_defaults(func=cmd_demo)
