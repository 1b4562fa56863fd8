"""`kb review decide --wait`, N times in a row, beside `kb bench soak` on the same running stack.

    KB_STATE_DIR=... .venv/bin/python bench/review_beside_soak.py [--decisions 20] [--soak-minutes 10]

Starts `kb bench soak` (a new or changed document every few seconds, searches twice a second)
and, while it runs, N times: uploads a new version of a mostly blank document (quarantined by
the pages gate), runs kb_ingest on its folder, then `kb review decide KEY accept --wait` and
checks the document ends indexed. Prints each decision's seconds and exit code, the soak's
result, and exits 1 on any failure. The stack must be up (`kb up`); loopback only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pymupdf

KB = str(Path(sys.executable).parent / "kb")


def _mostly_blank(label: str) -> bytes:
    """One page of text and two blank ones: the empty-page share (2/3) fails the pages gate."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(60, 60, 535, 780), f"Review check {label}: the maintenance code is "
                        f"{label.upper()}-001, on a page of its own.", fontsize=11)
    doc.new_page(width=595, height=842)
    doc.new_page(width=595, height=842)
    data = doc.tobytes()
    doc.close()
    return data


def _kb(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([KB, *args], capture_output=True, text=True, timeout=timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=20)
    parser.add_argument("--soak-minutes", type=float, default=10.0)
    args = parser.parse_args()
    soak = subprocess.Popen([KB, "bench", "soak", "--minutes", str(args.soak_minutes), "--interval", "6", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    folder = f"review-loop-{uuid.uuid4().hex[:6]}"
    rows, failures = [], 0
    try:
        for i in range(args.decisions):
            label = f"loop{i:02d}"
            path = Path(f"/tmp/{folder}-{label}.pdf")
            path.write_bytes(_mostly_blank(label))
            ingested = _kb("ingest", str(path), "--prefix", folder, "--wait")
            key = f"{folder}/{path.name}"
            started = time.monotonic()
            decided = _kb("review", "decide", key, "accept", "--wait")
            seconds = time.monotonic() - started
            status = _kb("review", "list", "--json")
            waiting = key in {row["key"] for row in json.loads(status.stdout or "[]")}
            ok = decided.returncode == 0 and not waiting
            failures += not ok
            rows.append({"decision": i + 1, "seconds": round(seconds, 1), "rc": decided.returncode,
                         "quarantined_first": "quarantined" in ingested.stdout, "ok": ok})
            print(json.dumps(rows[-1]), flush=True)
            if not ok:
                print(decided.stdout[-2000:], decided.stderr[-2000:], file=sys.stderr)
    finally:
        out, err = soak.communicate(timeout=args.soak_minutes * 60 + 900)
    soak_result = json.loads(out) if soak.returncode in (0, 1) and out.strip() else {"error": err[-2000:]}
    seconds = [r["seconds"] for r in rows]
    print(json.dumps({"decisions": len(rows), "failures": failures,
                      "seconds_median": statistics.median(seconds) if seconds else None,
                      "seconds_max": max(seconds) if seconds else None,
                      "soak_errors": soak_result.get("error_count"), "soak_uploads": soak_result.get("uploads"),
                      "soak_runs": soak_result.get("runs")}, indent=2))
    return 1 if failures or soak_result.get("error_count") else 0


if __name__ == "__main__":
    raise SystemExit(main())
