"""``kb bench corpus``: the real corpus through the running stack, end to end.

Born-digital PDFs first, then the image-only copies, each group in a run of its own
under a fresh prefix, so each group's pages per second is its own wall time from the
trigger to the run's end. A row per document comes from the runs' summaries: pages,
text-layer and OCR pages, the extract tasks' seconds, and its status. The pages a group
indexed, and so its pages per second, are counted from the ledger: each document the ledger
holds as indexed at the uploaded content, its pages less the ones it is searchable without.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Callable

from kb_dev.corpus import fetch
from kb.ledger import LedgerEntry, Status


def indexed_pages(entry: LedgerEntry | None, sha256: str) -> int:
    """The pages the ledger says are searchable for the content ``sha256``: none unless the
    entry is indexed at that content, else its pages less its failed pages."""
    if entry is None or entry.status != Status.INDEXED or entry.indexed_sha256 != sha256:
        return 0
    return (entry.pages or 0) - len(entry.failed_pages or [])


def bench_corpus(dest: Path, timeout_s: float = 7200.0, echo: Callable[[str], None] = print) -> dict[str, Any]:
    from kb.ledger import doc_id_for
    from kb.ledger_db import Ledger
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings
    from kb_dev.settings import StackSettings
    from kb_dev.stack.topology import run_ingest

    files = fetch(dest, echo=echo)
    settings, store = PipelineSettings(), ObjectStore.from_settings()
    ledger = Ledger.for_settings(settings, store)
    digests: dict[str, str] = {}
    prefix = f"corpus/{time.strftime('%Y%m%dT%H%M%S')}/"
    groups: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for group, scanned in (("born-digital", False), ("scanned", True)):
        chosen = [f for f in files if f.scanned == scanned]
        where = f"{prefix}{group}/"
        for f in chosen:
            data = f.path.read_bytes()
            digests[f.path.name] = hashlib.sha256(data).hexdigest()
            store.put_bytes(settings.inbox_bucket, where + f.path.name, data, content_type="application/pdf")
        echo(f"{group}: {len(chosen)} files, {sum(f.pages for f in chosen)} pages uploaded under {where}")
        started = time.perf_counter()
        outcome = run_ingest(StackSettings(), {"prefix": where, "force": False}, timeout_s, echo=echo, poll_s=1.0)
        seconds = time.perf_counter() - started
        summary = outcome.summary or {}
        done = {d["key"]: d for d in summary.get("documents", [])}
        pages = 0
        for f in chosen:
            d = done.get(where + f.path.name, {})
            indexed = d.get("status") == "indexed"
            got = indexed_pages(ledger.get(doc_id_for(settings.inbox_bucket, where + f.path.name)),
                                digests[f.path.name])
            pages += got
            rows.append({
                "file": f.path.name, "group": group, "language": f.document.language, "pages": f.pages,
                "pages_indexed": got,
                "text_pages": (d.get("pages") or 0) - (d.get("ocr_pages") or 0) - (d.get("failed_pages") or 0)
                if indexed else None,
                "ocr_pages": d.get("ocr_pages"), "failed_pages": d.get("failed_pages"),
                "ranges_split": d.get("ranges_split"), "extract_s": d.get("extract_seconds"),
                "status": d.get("status", "not in this run's summary") + (f" ({d['code']})" if d.get("code") else ""),
            })
        groups[group] = {"run_id": outcome.run_id, "state": outcome.state, "files": len(chosen),
                         "pages": sum(f.pages for f in chosen), "pages_indexed": pages, "seconds": round(seconds, 1),
                         "pages_per_s": round(pages / seconds, 3) if seconds else None,
                         "ranges": summary.get("ranges"), "ranges_split": summary.get("ranges_split"),
                         "limits": summary.get("limits")}
    totals = {
        "files": len(rows), "pages": sum(r["pages"] for r in rows),
        "pages_indexed": sum(r["pages_indexed"] for r in rows),
        "indexed": sum(1 for r in rows if r["status"] == "indexed"),
        "not_indexed": [r["file"] for r in rows if r["status"] != "indexed"],
        "pages_failed": sum(r["failed_pages"] or 0 for r in rows),
    }
    return {"prefix": prefix, "groups": groups, "documents": rows, "totals": totals, "table": _table(rows, groups, totals)}


def _table(rows: list[dict[str, Any]], groups: dict[str, Any], totals: dict[str, Any]) -> str:
    def cell(v: Any) -> str:
        return "-" if v is None else str(v)

    head = f"{'file':38} {'group':12} {'lang':4} {'pages':>5} {'text':>5} {'ocr':>5} {'fail':>4} {'split':>5} {'extract s':>9}  status"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['file'][:38]:38} {r['group']:12} {r['language']:4} {r['pages']:>5} {cell(r['text_pages']):>5} "
                     f"{cell(r['ocr_pages']):>5} {cell(r['failed_pages']):>4} {cell(r['ranges_split']):>5} "
                     f"{cell(r['extract_s']):>9}  {r['status']}")
    lines.append("")
    for name, g in groups.items():
        lines.append(f"{name}: {g['pages_indexed']}/{g['pages']} pages indexed in {g['seconds']} s = "
                     f"{g['pages_per_s']} pages/s (run {g['state']}, {g['ranges']} ranges, {g['ranges_split']} split)")
    lines.append(f"total: {totals['indexed']}/{totals['files']} documents indexed, "
                 f"{totals['pages_indexed']}/{totals['pages']} pages indexed (ledger), "
                 f"{totals['pages_failed']} page(s) left out; not indexed: {totals['not_indexed'] or 'none'}")
    return "\n".join(lines)
