"""A bounded load test of the OCR service, loopback only.

    .venv/bin/python bench/load_test.py [--requests 500] [--concurrency 4] [--url URL --key KEY --pid PID]

Without --url it starts its own `ocr-engine serve` on a free loopback port (with
generated keys), sends a warm-up round, then exactly --requests requests at a fixed
concurrency, and prints latency percentiles, throughput, the error rate and the
service's RSS after warm-up and at the end. It refuses any host that is not loopback.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx
import psutil
import pymupdf

from kb_dev.samples import scanned_copy


def sample_pdf(pages: int = 2, scanned: bool = False) -> bytes:
    doc = pymupdf.open()
    for i in range(pages):
        doc.new_page().insert_textbox(pymupdf.Rect(60, 60, 535, 780),
                                      f"Load test page {i + 1}. " + "The pump must be primed before it starts. " * 20,
                                      fontsize=11)
    # Scanned: the same pages as pictures, so every request runs PP-OCR.
    return scanned_copy(doc.tobytes()) if scanned else doc.tobytes()


def loopback_only(url: str) -> None:
    host = urlparse(url).hostname or ""
    if host != "localhost" and not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
        raise SystemExit(f"refusing to load-test {host}: loopback addresses only")


def start_service(concurrency: int, queue: int) -> tuple[subprocess.Popen, str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = secrets.token_urlsafe(24)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCR_")}
    env.update({"OCR_SERVICE_HOST": "127.0.0.1", "OCR_SERVICE_PORT": str(port), "OCR_SERVICE_API_KEYS": key,
                "OCR_SERVICE_MAX_CONCURRENCY": str(concurrency), "OCR_SERVICE_MAX_QUEUE": str(queue)})
    proc = subprocess.Popen([str(Path(sys.executable).parent / "ocr-engine"), "serve"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url, key
        except httpx.TransportError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("the service did not become ready")


def run(url: str, key: str, pdf: bytes, n: int, concurrency: int) -> tuple[list[float], dict[int, int], float]:
    client = httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"},
                          limits=httpx.Limits(max_connections=concurrency))

    def one(_):
        started = time.perf_counter()
        try:
            status = client.post(f"{url}/v1/parse", files={"file": ("d.pdf", pdf, "application/pdf")}).status_code
        except httpx.TransportError:
            status = 0
        return time.perf_counter() - started, status

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(n)))
    wall = time.perf_counter() - started
    client.close()
    statuses: dict[int, int] = {}
    for _, s in results:
        statuses[s] = statuses.get(s, 0) + 1
    return [t for t, _ in results], statuses, wall


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1] if len(values) > 1 else values[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--url")
    ap.add_argument("--key", default=os.environ.get("OCR_SERVICE_API_KEY", ""))
    ap.add_argument("--pid", type=int, help="the service's process, for RSS (with --url)")
    ap.add_argument("--scanned", action="store_true", help="image-only pages (PP-OCR) instead of text-layer pages")
    ap.add_argument("--pages", type=int, default=2, help="pages per request")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not 1 <= args.requests <= 10_000 or not 1 <= args.concurrency <= 64:
        raise SystemExit("requests must be 1..10000 and concurrency 1..64")

    proc = None
    if args.url:
        loopback_only(args.url)
        url, key, pid = args.url, args.key, args.pid
    else:
        # Capacity: 2 in the engine's slots and 8 queued, above the test's concurrency.
        proc, url, key = start_service(concurrency=2, queue=8)
        pid = proc.pid
    try:
        pdf = sample_pdf(args.pages, args.scanned)
        rss = (lambda: psutil.Process(pid).memory_info().rss) if pid else (lambda: None)
        run(url, key, pdf, args.warmup, args.concurrency)
        rss_warm = rss()
        latencies, statuses, wall = run(url, key, pdf, args.requests, args.concurrency)
        rss_end = rss()
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
    errors = sum(c for s, c in statuses.items() if s != 200)
    report = {
        "requests": args.requests, "concurrency": args.concurrency, "pages_per_request": args.pages,
        "scanned": args.scanned, "statuses": statuses,
        "error_rate": round(errors / args.requests, 4),
        "p50_ms": round(pct(latencies, 50) * 1000, 1), "p95_ms": round(pct(latencies, 95) * 1000, 1),
        "p99_ms": round(pct(latencies, 99) * 1000, 1), "throughput_rps": round(args.requests / wall, 2),
        "rss_after_warmup_mb": round(rss_warm / 2**20, 1) if rss_warm else None,
        "rss_end_mb": round(rss_end / 2**20, 1) if rss_end else None,
        "rss_growth": round(rss_end / rss_warm - 1, 4) if rss_warm else None,
    }
    print(json.dumps(report, indent=2) if args.json else
          "\n".join(f"{k:22} {v}" for k, v in report.items()))
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
