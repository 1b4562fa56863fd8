"""One live local stack (``kb up``) shared by every suite that probes a running stack from
outside: the security suite and the observability suite. Started once per session on free
loopback ports (only when a test asks for ``live``); tests isolate their data by inbox prefix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.stack.kbcli import kb
from tests.stack.kbcli import stack_env as stack_env_for


@dataclass
class LiveStack:
    env: dict[str, str]
    secrets: dict[str, str]
    status: dict

    @property
    def search_url(self) -> str:
        return self.status["search"]["url"]

    @property
    def ocr_url(self) -> str:
        return self.status["ocr"]["url"]

    def url(self, part: str) -> str:
        return self.status[part]["url"]

    def kb(self, *args: str, timeout: float = 600):
        return kb(self.env, *args, timeout=timeout)

    @property
    def runs(self):
        """Upload, trigger ``kb_ingest`` on a prefix, wait; read Qdrant and the ledger back."""
        from tests.stack.faultkit import FaultStack

        return FaultStack(self.env, {"calls": []})

    def ingest(self, prefix: str, documents: dict[str, bytes], timeout_s: float = 600) -> tuple[str, dict | None]:
        runs = self.runs
        runs.upload(prefix, documents)
        return runs.run(prefix, timeout_s)

    def headers(self, part: str) -> dict[str, str]:
        key = {"search": "KB_SEARCH_API_KEY", "ocr": "KB_OCR_API_KEY"}[part]
        return {"Authorization": f"Bearer {self.secrets[key]}"}


# What the suites sharing the stack need of it:
LIVE_SETTINGS = {
    # a small page-image queue, so that a burst shows the bound (security/test_service_bounds)
    "KB_SEARCH_PAGE_QUEUE": "2",
    # the exporter, StatsD bridge, mail sink, Prometheus and Alertmanager (observability suite)
    "KB_OBSERVE": "true",
    # kb_ingest's searchable-within promise, as its deadline alert (observability/test_deadline):
    # one value for every run on this stack (Airflow's deadline interval is the DAG's, not a
    # run's), so well above what a small run takes here on 2 cores, yet short enough to wait out.
    "KB_SEARCHABLE_WITHIN_S": "180",
}


def live_stack(tmp_path_factory):
    env = stack_env_for(tmp_path_factory.mktemp("live-stack"), **LIVE_SETTINGS)
    up = kb(env, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        state = Path(env["KB_STATE_DIR"])
        secrets = dict(line.split("=", 1) for line in (state / "secrets.env").read_text().split())
        done = kb(env, "status", "--json")
        assert done.returncode == 0, done.stderr
        yield LiveStack(env, secrets, json.loads(done.stdout))
    finally:
        kb(env, "down")
