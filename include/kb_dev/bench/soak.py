"""``kb bench soak``: the running stack under steady change for N minutes.

Every ``interval_s`` a document is uploaded under ``soak/<stamp>/``: a new one, or a new
version of one uploaded before (every third upload), while a client asks the search
service twice a second. Ingest runs are triggered back to back (one at a time, as the
DAG allows). At the end it waits for the last run and reports:

- documents uploaded, and how many stand indexed at their latest content;
- errors: failed runs, failed searches, documents not indexed at the end;
- the RSS and open file descriptors of every long-lived process (one alive before and after
  a warm-up run: the S3 server, the OCR and search services, Airflow's components), with the
  growth. The start is taken after that warm-up run, so model loading is not growth. A
  long-lived process that is gone at the end is reported as died, and counted as an error.

Traffic goes only to the stack's own loopback services, bounded by the duration.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kb.errors import KbError

QUERIES = ("pressure sensor calibration", "How often is the coupling replaced?", "impeller seal inspection",
           "quarterly audit of the warehouse inventory", "firmware of the controller", "thermal cooling assembly")


@dataclass
class _Searches:
    ok: int = 0
    errors: list[str] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)


def _search_loop(client, stop: threading.Event, out: _Searches, per_second: float) -> None:
    rng = random.Random(3)
    while not stop.wait(1.0 / per_second):
        started = time.perf_counter()
        try:
            client.search(rng.choice(QUERIES), top_k=5)
            out.ok += 1
            out.ms.append((time.perf_counter() - started) * 1000)
        except Exception as exc:  # noqa: BLE001 - counted and reported, the soak goes on
            out.errors.append(f"{type(exc).__name__}: {exc}"[:200])


def _document(n: int, version: int) -> bytes:
    import pymupdf

    from kb_dev.samples import PAGE_H, PAGE_W, prose_pages

    doc = pymupdf.open()
    for heading, paragraphs in prose_pages(3, seed=1000 * n + version, paragraphs=2):
        page = doc.new_page(width=PAGE_W, height=PAGE_H)
        page.insert_textbox(pymupdf.Rect(60, 60, PAGE_W - 60, PAGE_H - 60),
                            f"Soak document {n}, version {version}. {heading}\n\n" + "\n\n".join(paragraphs),
                            fontsize=11, fontname="helv")
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


def _program(command: str) -> str:
    """A command without the title a process gives itself per job (Airflow's LocalExecutor
    workers: ``airflow worker -- LocalExecutor: <task uuid>``)."""
    return command.split(" -- ")[0]


def long_lived(before: list[dict[str, Any]], start: list[dict[str, Any]],
               end: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row per long-lived process: one alive before the warm-up run and still after it
    (a task process of that run is not). Each has ``alive``: a process that is gone at
    ``end``, or whose pid now runs another program, died during the soak; its row keeps its
    start figures and has ``None`` for the end ones."""
    earlier = {p["pid"]: _program(p["command"]) for p in before}
    now = {p["pid"]: p for p in end}
    rows = []
    for b in start:
        if earlier.get(b["pid"]) != _program(b["command"]):
            continue  # started during the warm-up run: a task process
        p = now.get(b["pid"])
        alive = p is not None and _program(p["command"]) == _program(b["command"])
        row = {"part": b["part"], "pid": b["pid"], "command": _program(b["command"]), "alive": alive,
               "rss_start_mb": b["rss_mb"], "rss_end_mb": None, "rss_growth_pct": None,
               "fds_start": b["fds"], "fds_end": None}
        if alive:
            growth = (p["rss_mb"] - b["rss_mb"]) / b["rss_mb"] * 100 if b["rss_mb"] else 0.0
            row.update(rss_end_mb=p["rss_mb"], rss_growth_pct=round(growth, 1), fds_end=p["fds"])
        rows.append(row)
    return rows


def soak(minutes: float = 30.0, interval_s: float = 5.0, searches_per_s: float = 2.0,
         run_timeout_s: float = 900.0, echo: Callable[[str], None] = print) -> dict[str, Any]:
    from kb_dev.airflow_api import TERMINAL
    from kb.ledger import Status, doc_id_for
    from kb.ledger_db import Ledger
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev.settings import StackSettings
    from kb_airflow.names import INGEST_DAG_ID
    from kb_dev.stack import search
    from kb_dev.stack.process import processes
    from kb_dev.stack.topology import airflow_client, run_ingest

    stack, settings = StackSettings(), PipelineSettings()
    client = search.client(stack)
    if client is None:
        raise KbError("the search service is not running; start the stack with `kb up`")
    store = ObjectStore.from_settings()
    prefix = f"soak/{time.strftime('%Y%m%dT%H%M%S')}/"
    latest: dict[str, bytes] = {}  # key -> the bytes last uploaded

    def upload(n: int, version: int) -> None:
        key = f"{prefix}doc-{n:04d}.pdf"
        latest[key] = _document(n, version)
        store.put_bytes(settings.inbox_bucket, key, latest[key], content_type="application/pdf")

    echo(f"warm-up: one document through a run under {prefix} ...")
    upload(0, 0)
    before = processes(stack)
    warm = run_ingest(stack, {"prefix": prefix}, run_timeout_s, echo=lambda _l: None, poll_s=1.0)
    start = processes(stack)

    searches, stop = _Searches(), threading.Event()
    searcher = threading.Thread(target=_search_loop, args=(client, stop, searches, searches_per_s), daemon=True)
    searcher.start()
    airflow = airflow_client(stack)
    runs: dict[str, str] = {}
    active: str | None = None
    uploads, versions = 1, {0: 0}
    deadline = time.monotonic() + minutes * 60
    next_upload = time.monotonic()
    next_echo = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_upload:
                if uploads % 3 == 2 and versions:  # a new version of an earlier document
                    n = random.Random(uploads).choice(sorted(versions))
                    versions[n] += 1
                else:
                    n = len(versions)
                    versions[n] = 0
                upload(n, versions[n])
                uploads += 1
                next_upload = now + interval_s
            if active is not None:
                state = airflow.progress(INGEST_DAG_ID, active).state
                if state in TERMINAL:
                    runs[active], active = state, None
            if active is None:
                active = airflow.trigger(INGEST_DAG_ID, {"prefix": prefix})
            if now >= next_echo:
                echo(f"{(deadline - now) / 60:.1f} min left: {uploads} uploads, {len(runs)} runs "
                     f"({sum(s != 'success' for s in runs.values())} failed), {searches.ok} searches "
                     f"({len(searches.errors)} errors)")
                next_echo = now + 30
            time.sleep(0.5)
    finally:
        stop.set()
        searcher.join(timeout=10)
    echo("uploads stopped; waiting for the runs to catch up ...")
    if active is not None:
        runs[active] = airflow.follow(INGEST_DAG_ID, active, timeout_s=run_timeout_s, echo=lambda _l: None).state
    # one last run picks up what arrived during the previous one
    last = run_ingest(stack, {"prefix": prefix}, run_timeout_s, echo=lambda _l: None, poll_s=1.0)
    runs[last.run_id] = last.state
    end = processes(stack)
    airflow.close()
    client.close()

    import hashlib

    ledger = Ledger.for_settings(settings, store)
    not_indexed = []
    for key, data in latest.items():
        entry = ledger.get(doc_id_for(settings.inbox_bucket, key))
        if not (entry and entry.status == Status.INDEXED and entry.indexed_sha256 == hashlib.sha256(data).hexdigest()):
            not_indexed.append({"key": key, "status": entry.status.value if entry else None})
    rows = long_lived(before, start, end)
    died = [{k: p[k] for k in ("part", "pid", "command")} for p in rows if not p["alive"]]
    failed_runs = [r for r, s in runs.items() if s != "success"]
    ms = sorted(searches.ms)
    out = {
        "minutes": minutes, "prefix": prefix, "warm_up_run": warm.state,
        "uploads": uploads, "documents": len(latest), "new_versions": uploads - len(latest),
        "documents_indexed": len(latest) - len(not_indexed),
        "runs": len(runs), "searches": searches.ok,
        "search_p50_ms": round(ms[len(ms) // 2], 1) if ms else None,
        "search_p99_ms": round(ms[int(len(ms) * 0.99)], 1) if ms else None,
        "errors": {"failed_runs": failed_runs, "search_errors": searches.errors[:20],
                   "search_error_count": len(searches.errors), "not_indexed": not_indexed,
                   "processes_died": died},
        "error_count": len(failed_runs) + len(searches.errors) + len(not_indexed) + len(died),
        "processes": rows,
        "max_rss_growth_pct": max((p["rss_growth_pct"] for p in rows if p["alive"]), default=None),
    }
    out["table"] = table(out)
    return out


def table(out: dict[str, Any]) -> str:
    """The report as text: totals, errors, and a line per long-lived process."""
    lines = [
        f"soak: {out['minutes']} min under {out['prefix']}",
        f"  documents: {out['uploads']} uploads ({out['documents']} documents, {out['new_versions']} new versions); "
        f"{out['documents_indexed']} indexed at their latest content",
        f"  runs: {out['runs']}; searches: {out['searches']} (p50 {out['search_p50_ms']} ms, p99 {out['search_p99_ms']} ms)",
        f"  errors: {out['error_count']} ({len(out['errors']['failed_runs'])} failed runs, "
        f"{out['errors']['search_error_count']} failed searches, {len(out['errors']['not_indexed'])} not indexed, "
        f"{len(out['errors']['processes_died'])} long-lived processes died)",
        "  long-lived processes (RSS MB start -> end, growth; open fds start -> end):",
    ]
    for p in out["processes"]:
        if not p["alive"]:
            lines.append(f"    {p['part']:<9} {p['pid']:>7} {p['command'][:44]:<44} {p['rss_start_mb']:>7.1f} -> "
                         f"   DIED during the soak               fds {p['fds_start']} -> -")
            continue
        lines.append(f"    {p['part']:<9} {p['pid']:>7} {p['command'][:44]:<44} {p['rss_start_mb']:>7.1f} -> "
                     f"{p['rss_end_mb']:>7.1f} MB ({p['rss_growth_pct']:+.1f}%)  fds {p['fds_start']} -> {p['fds_end']}")
    return "\n".join(lines)
