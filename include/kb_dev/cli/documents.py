"""``kb ingest`` and ``kb review``: documents into the inbox, and decisions about the ones
that were quarantined."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kb.decisions import Decision
from kb.errors import AlreadyDecided, KbError, ReviewedAnotherVersion
from kb_dev.cli.stack import client_env


def folder_prefix(prefix: str) -> str:
    """``--prefix`` names a folder of the inbox: ``hostile`` and ``hostile/`` both put a file
    at ``hostile/<name>`` and limit the run to that folder ("" is the whole inbox)."""
    folder = prefix.strip("/")
    return f"{folder}/" if folder else ""


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


def ingest(paths: list[str], prefix: str = "", *, wait: bool = False, force: bool = False,
           reread: bool = False, timeout_s: float = 1800.0) -> int:
    """Upload files (a folder's keep their relative paths) under the folder ``prefix``; with
    ``wait``, run kb_ingest on that folder and say where each file stands."""
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev.stack.topology import run_ingest

    if (force or reread) and not wait:  # before any upload: they would be ignored
        raise KbError("--force and --reread apply to the run that --wait starts; without --wait the files "
                      "are only uploaded and the scheduled run treats them as usual: add --wait")
    s = client_env()
    p = PipelineSettings()
    store = ObjectStore.from_settings()
    folder = folder_prefix(prefix)
    files = _files(paths)
    uploaded = []
    for path, name in files:
        info = store.put_bytes(p.inbox_bucket, folder + name, path.read_bytes(), content_type="application/pdf")
        uploaded.append(info)
        print(f"uploaded s3://{p.inbox_bucket}/{info.key} ({info.size} bytes)")
    if not wait:
        print(f"{len(files)} file(s) uploaded; the scheduled kb_ingest run picks them up (or use --wait)")
        return 0
    result = run_ingest(s, {"prefix": folder, "force": force, "reread": reread}, timeout_s)
    _print_summary(result.state, result.summary or {})
    # The counts above are this run's; a run the inbox watcher started on the upload may have
    # indexed the files first (then this one finds them unchanged), so say where each stands.
    print("the uploaded files now:")
    _print_outcomes(store, p, uploaded)
    return 0 if result.state == "success" else 1


def cmd_ingest(args: argparse.Namespace) -> int:
    return ingest(args.paths, args.prefix, wait=args.wait, force=args.force, reread=args.reread,
                  timeout_s=args.timeout)


def _print_summary(state: str, summary: dict[str, Any]) -> None:
    if not summary:
        print(f"run {state}")
        return
    print(
        f"run {state}: {summary.get('documents_indexed', 0)} indexed, "
        f"{summary.get('documents_unchanged', 0)} unchanged, {summary.get('documents_quarantined', 0)} quarantined, "
        f"{summary.get('documents_failed', 0)} failed; {_pages(summary)}, {summary.get('chunks', 0)} chunks"
        + (f"; {summary['ranges_split']} range(s) split to fit the OCR service" if summary.get("ranges_split") else "")
    )
    ocr = summary.get("ocr") or {}
    if ocr.get("pages") and ocr.get("pages_per_gpu_hour") is not None:
        print(f"  OCR of the indexed documents (whichever run read them): {ocr['pages']} pages, "
              f"{ocr['tokens_in']} tokens in, {ocr['tokens_out']} out, "
              f"{ocr['device_seconds']:.1f} s of device time ({ocr['pages_per_gpu_hour']:.0f} pages per GPU-hour)"
              + (f", {ocr['cost_per_1000_pages']:.2f} per 1,000 pages" if ocr.get("cost_per_1000_pages") is not None
                 else ""))
    for q in summary.get("quarantine", []):
        print(f"  quarantined {q['key']}: {q['code']}: {q['message']}")
    for f in summary.get("failed", []):
        print(f"  failed {f['key']}: {f['code']}: {f['message']} (next try not before {f['next_attempt_at']})")
    for page in summary.get("pages_failed", []):
        print(f"  {page['key']} page {page['page']} left out: {page['reason']}")


def _pages(summary: dict[str, Any]) -> str:
    pages, read = summary.get("pages", 0), summary.get("pages_read", 0)
    if not pages or read == pages:
        return f"{pages} pages"
    return f"{pages} pages ({read} read by this run, the rest reused)"


def _print_outcomes(store, p, uploaded) -> None:
    """Where each uploaded file stands now, from the ledger: the run summary counts only what
    that run did, and a scheduled run may have indexed the files just before it."""
    from kb.ledger import Status, doc_id_for
    from kb.ledger_db import Ledger

    ledger = Ledger.for_settings(p, store)
    for info in uploaded:
        entry = ledger.get(doc_id_for(info.bucket, info.key))
        error = (entry.error or {}) if entry else {}
        if entry is None or not entry.same_version(info):
            print(f"  {info.key}: not processed yet (a run will pick it up)")
        elif entry.status == Status.INDEXED:
            missing = f", indexed without page(s) {', '.join(str(f['page']) for f in entry.failed_pages)}" \
                if entry.failed_pages else ""
            print(f"  {info.key}: indexed, {entry.pages} pages, {entry.chunks} chunks{missing}")
        elif entry.status == Status.FAILED:
            print(f"  {info.key}: failed (attempt {entry.attempts}, next not before {entry.next_attempt_at}): "
                  f"{error.get('code')}: {error.get('message')}")
        else:
            print(f"  {info.key}: {entry.status}: {error.get('code')}: {error.get('message')}")


# --- review ----------------------------------------------------------------------------


def cmd_review_list(args: argparse.Namespace) -> int:
    from kb.ledger_db import Ledger
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev import review
    from kb_dev.errors import StackNotRunning
    from kb_dev.stack.topology import airflow_client

    s = client_env()
    p = PipelineSettings()
    queue = Ledger.for_settings(p, ObjectStore.from_settings()).pending_reviews(p.inbox_bucket)
    waiting = {}
    if queue:
        try:
            client = airflow_client(s)
        except StackNotRunning:  # the ledger's queue is still the queue
            client = None
        if client is not None:
            try:
                waiting = review.waiting_requests(client)
            finally:
                client.close()
    rows = [{"key": e.key, "version": e.sha256 or e.version_id or e.etag, "code": (e.error or {}).get("code"),
             "message": (e.error or {}).get("message"), "since": e.updated_at, "run_id": e.run_id,
             "review_run_id": waiting[e.key].run_id if e.key in waiting else None} for e in queue]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no quarantined document waits for a decision")
        return 0
    for r in rows:
        asked = f"  (waiting in kb_review run {r['review_run_id']})" if r["review_run_id"] else ""
        print(f"{r['key']}  version {(r['version'] or '?')[:12]}  since {r['since']}  {r['code']}: {r['message']}{asked}")
    print(f"{len(rows)} document(s); decide with `kb review decide KEY {'|'.join(d.value for d in Decision)} "
          "[--version VERSION]`")
    return 0


def _quality_params(pairs: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` quality threshold overrides; a value is read as JSON where it parses."""
    from kb.settings import QualitySettings

    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise KbError(f"--param {pair!r}: expected NAME=VALUE, e.g. max_empty_page_share=0.9")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    QualitySettings.with_overrides(out)  # BadParams now rather than in the review run
    return out


def cmd_review_decide(args: argparse.Namespace) -> int:
    from kb.ledger import doc_id_for
    from kb.ledger_db import Ledger
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev import review
    from kb_dev.stack.topology import airflow_client

    s = client_env()
    quality = _quality_params(args.param or [])
    p = PipelineSettings()
    ledger, doc_id = Ledger.for_settings(p, ObjectStore.from_settings()), doc_id_for(p.inbox_bucket, args.key)
    entry = ledger.get(doc_id)
    if entry is not None and (decided := entry.pending_decision) is not None:
        # one decision per version: refused before any run is started (Ledger.give refuses it too)
        raise AlreadyDecided(f"{args.key}: this version was decided already: {decided.decision} by "
                             f"{decided.decided_by} at {decided.decided_at} (kb_review run {decided.review_run_id})")
    current = entry and (entry.sha256 or entry.version_id or entry.etag)
    version = args.version
    if version is None:  # the version quarantined now is the one this decision is about
        version = current
        if version:
            print(f"{args.key}: deciding about version {version[:12]} (the one quarantined now)")
    elif entry is not None and version not in {entry.sha256, entry.etag, entry.version_id} - {None}:
        # refused here already; kb_review's act checks again, against a version landing meanwhile
        raise ReviewedAnotherVersion(
            f"{args.key}: the decision is about version {version}, but the version quarantined now is {current}; "
            "that version stays in the review queue (`kb review list`): look at it and decide again")
    client = airflow_client(s)
    try:
        decided = review.decide(client, ledger, args.key, doc_id, args.decision, quality, version=version)
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
    p, store = PipelineSettings(), ObjectStore.from_settings()
    _print_outcomes(store, p, [o for o in store.list_latest(p.inbox_bucket, args.key) if o.key == args.key])
    return 0 if outcome.state == "success" else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="upload files to the inbox bucket (and optionally run kb_ingest)")
    p.add_argument("paths", nargs="+", help="files or folders")
    p.add_argument("--prefix", default="", help="a folder of the inbox bucket: `manuals` and `manuals/` both upload "
                                                "to manuals/<name>, and --wait runs on that folder only")
    p.add_argument("--wait", action="store_true", help="trigger kb_ingest and follow it to the end")
    p.add_argument("--force", action="store_true",
                   help="with --wait: re-plan and re-index everything under the prefix, quarantined versions included")
    p.add_argument("--reread", action="store_true",
                   help="with --wait: re-index everything under the prefix, and read again the pages an older "
                        "version of the engine's reading rules read, or, for scanned pages, another OCR model "
                        "(after an upgrade or a model switch); other pages are reused")
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
    b.add_argument("--version", help="the version decided about (sha256, ETag or version id, as `kb review list` "
                                     "shows it); default: the one quarantined when the command starts. A decision "
                                     "about a version no longer quarantined is refused")
    b.add_argument("--wait", action="store_true", help="follow the review run and the kb_ingest run it triggers")
    b.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for each run")
    b.set_defaults(func=cmd_review_decide)
