"""Throughput of the distributed stack: the same born-digital pages through 1 and 2 Celery workers.

``kb bench throughput`` starts ``kb up --distributed --workers N`` on a state folder and
free loopback ports of its own, runs a warm-up, uploads the same generated born-digital
documents (10 x 20 pages by default) and times one kb_ingest run over them; then the same
with the other worker count. Both in one invocation, since this machine is shared and its
speed drifts: the ratio is what to read. 1 worker consumes both queues (default, gpu);
2 workers are one per queue, as in production.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from kb.errors import KbError


def stack_env(state: Path) -> dict[str, str]:
    """An environment for a `kb` stack of the benchmark's own: its folder, free ports, no cron, no watcher."""
    from kb_dev.ports import free_ports, weed_port_set

    api, worker_logs, trigger_logs, ocr, ocr2, search, pg, redis, worker2_logs = free_ports(9)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "AIRFLOW", "OCR_"))}
    env.update({f"KB_{k.upper()}": str(v) for k, v in weed_port_set().items()})
    env.update({
        "KB_STATE_DIR": str(state), "KB_AIRFLOW_PORT": str(api), "KB_AIRFLOW_WORKER_LOG_PORT": str(worker_logs),
        "KB_AIRFLOW_TRIGGER_LOG_PORT": str(trigger_logs), "KB_OCR_PORT": str(ocr),
        "KB_OCR_REPLICA_PORTS": json.dumps([ocr2]), "KB_SEARCH_PORT": str(search), "KB_POSTGRES_PORT": str(pg),
        "KB_REDIS_PORT": str(redis), "KB_AIRFLOW_EXTRA_WORKER_LOG_PORTS": json.dumps([worker2_logs]),
        "KB_SCHEDULE": "", "KB_WATCH_INBOX": "false",
    })
    return env


def _kb(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run([str(Path(sys.executable).parent / "kb"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise KbError(f"`kb {' '.join(args)}` failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def _one(workers: int, files: list[Path], pages: int, timeout_s: float, echo: Callable[[str], None]) -> dict[str, Any]:
    from kb_dev.settings import StackSettings
    from kb_dev.stack import s3
    from kb_dev.stack.secrets import read_secrets
    from kb_dev.stack.topology import run_ingest

    root = Path(tempfile.mkdtemp(prefix="kb-bench-throughput-", dir="/tmp"))
    root.chmod(0o755)  # Postgres runs as its own user, which must reach its folder
    env = stack_env(root / "state")
    try:
        echo(f"{workers} worker(s): starting the distributed stack ...")
        _kb(env, "up", "--distributed", "--workers", str(workers), timeout=900)
        s = StackSettings.from_env(env)
        store = s3.admin_store(s, read_secrets(s.state_dir))
        warm = run_ingest(s, {"prefix": "warm-up/"}, timeout_s, echo=lambda _l: None, poll_s=0.5)
        if warm.state != "success":
            raise KbError(f"the warm-up run ended {warm.state}")
        for f in files:
            store.put_bytes("inbox", f"bench/{f.name}", f.read_bytes(), content_type="application/pdf")
        echo(f"{workers} worker(s): one run over {pages} pages ...")
        started = time.perf_counter()
        result = run_ingest(s, {"prefix": "bench/"}, timeout_s, echo=lambda _l: None, poll_s=0.5)
        seconds = time.perf_counter() - started
        if result.state != "success":
            raise KbError(f"the measured run ended {result.state}")
        return {"workers": workers, "seconds": round(seconds, 1), "pages": pages,
                "pages_per_s": round(pages / seconds, 2)}
    finally:
        subprocess.run([str(Path(sys.executable).parent / "kb"), "down"], env=env, capture_output=True, timeout=300)
        shutil.rmtree(root, ignore_errors=True)


def bench_throughput(documents: int = 10, pages: int = 20, timeout_s: float = 1800.0,
                     echo: Callable[[str], None] = print) -> dict[str, Any]:
    from kb_dev.samples import write_prose_documents

    with tempfile.TemporaryDirectory() as tmp:
        files = write_prose_documents(Path(tmp), documents=documents, pages_per_document=pages)
        rows = [_one(n, files, documents * pages, timeout_s, echo) for n in (1, 2)]
    one, two = rows
    return {"pages": documents * pages, "documents": documents, "workers_1_pages_per_s": one["pages_per_s"],
            "workers_2_pages_per_s": two["pages_per_s"], "speedup": round(two["pages_per_s"] / one["pages_per_s"], 2),
            "runs": rows}
