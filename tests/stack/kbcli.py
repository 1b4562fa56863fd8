"""The real ``kb`` command against a stack of its own on free loopback ports."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.conftest import free_ports, weed_port_set

REPO = Path(__file__).resolve().parents[2]
KB = str(Path(sys.executable).parent / "kb")


def kb(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([KB, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@contextmanager
def stack_up(env: dict[str, str], *args: str, timeout: float = 600) -> Iterator[None]:
    """``kb up`` with ``env`` (and ``args``), held while the block runs; ``kb down`` after it,
    and also after an ``up`` that failed partway, so what it did start is stopped."""
    up = kb(env, "up", *args, timeout=timeout)
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield
    finally:
        kb(env, "down")


def stack_env(state: Path, **extra: str) -> dict[str, str]:
    """An environment for ``kb`` with its own state folder and free ports, manual runs only."""
    api, worker_logs, trigger_logs, ocr, search, *observe = free_ports(11)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "AIRFLOW", "OCR_"))}
    env.update({f"KB_{k.upper()}": str(v) for k, v in weed_port_set().items()})
    env.update({
        "KB_STATE_DIR": str(state),
        "KB_AIRFLOW_PORT": str(api),
        "KB_AIRFLOW_WORKER_LOG_PORT": str(worker_logs),
        "KB_AIRFLOW_TRIGGER_LOG_PORT": str(trigger_logs),
        "KB_OCR_PORT": str(ocr),
        "KB_SEARCH_PORT": str(search),
        "KB_SCHEDULE": "",  # manual runs only, so the test decides when runs happen
        "KB_WATCH_INBOX": "false",
        # the observability parts only where a suite asks for them (tests/live.py does)
        "KB_OBSERVE": "false",
        **dict(zip(("KB_EXPORTER_PORT", "KB_STATSD_PORT", "KB_STATSD_HTTP_PORT", "KB_PROMETHEUS_PORT",
                    "KB_ALERTMANAGER_PORT", "KB_MAIL_PORT"), map(str, observe))),
        **extra,
    })
    return env
