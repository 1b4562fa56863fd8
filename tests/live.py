"""The one live local stack (``kb up``) of the session, shared by every suite that drives a
running stack from outside: ``tests/stack`` (the ``kb`` command, real documents, faults),
``tests/security`` and ``tests/observability``.

It starts once, for the first test that asks for ``live``, on free loopback ports, and stops
at the end of the session; those tests run last and in a fixed order (``LIVE_ORDER``, in
``tests/conftest.py``), the ones that stop or kill parts of the stack at the end. Each test
keeps its documents under an inbox prefix of its own and reads back only what is under it.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.receivers import webhook_receiver
from tests.stack.kbcli import kb, stack_up
from tests.stack.kbcli import stack_env as stack_env_for


@dataclass
class LiveStack:
    env: dict[str, str]
    secrets: dict[str, str]
    status: dict
    webhook: dict  # the alert webhook's receiver (tests.receivers.webhook_receiver): its calls

    @property
    def state(self) -> Path:
        return Path(self.env["KB_STATE_DIR"])

    @property
    def search_url(self) -> str:
        return self.status["search"]["url"]

    @property
    def ocr_url(self) -> str:
        return self.status["ocr"]["url"]

    def url(self, part: str) -> str:
        return self.status[part]["url"]

    def kb(self, *args: str, timeout: float = 600, **env: str):
        """The real ``kb`` command against this stack (``env``: settings for this call only)."""
        return kb({**self.env, **env}, *args, timeout=timeout)

    @property
    def runs(self):
        """Upload, trigger ``kb_ingest`` on a prefix, wait; read Qdrant, the ledger and the
        webhook's alerts back."""
        from tests.stack.faultkit import FaultStack

        return FaultStack(self.env, self.webhook)

    def ingest(self, prefix: str, documents: dict[str, bytes], timeout_s: float = 600) -> tuple[str, dict | None]:
        runs = self.runs
        runs.upload(prefix, documents)
        return runs.run(prefix, timeout_s)

    def headers(self, part: str) -> dict[str, str]:
        key = {"search": "KB_SEARCH_API_KEY", "ocr": "KB_OCR_API_KEY"}[part]
        return {"Authorization": f"Bearer {self.secrets[key]}"}

    @contextmanager
    def ocr_service_with(self, **env: str) -> Iterator[None]:
        """The stack's OCR service restarted with other settings (its limits, its pace prior)
        for the block, then restarted as it was: the planner reads the limits the service
        publishes at each run, so the rest of the stack needs no restart."""
        from kb_dev.settings import StackSettings
        from kb_dev.stack import ocr

        settings = StackSettings.from_env(self.env)
        assert ocr.stop(settings)
        try:
            up = self.kb("up", **env)  # starts what is not running: the OCR service
            assert up.returncode == 0, up.stdout + up.stderr
            yield
        finally:
            ocr.stop(settings)
            up = self.kb("up")
            assert up.returncode == 0, up.stdout + up.stderr


def run_id_of(kb_output: str) -> str:
    """The run ``kb ingest --wait`` triggered, from its progress lines."""
    [run_id] = re.findall(r"^triggered \S+ run (\S+)$", kb_output, flags=re.MULTILINE)
    return run_id


# What the suites sharing the stack need of it:
LIVE_SETTINGS = {
    # a small page-image queue, so that a burst shows the bound (security/test_service_bounds)
    "KB_SEARCH_PAGE_QUEUE": "2",
    # the exporter, StatsD bridge, mail sink, Prometheus and Alertmanager (observability suite)
    "KB_OBSERVE": "true",
    # kb_ingest's searchable-within promise, as its deadline alert (observability/test_deadline):
    # one value for every run on this stack (Airflow's deadline interval is the DAG's, not a
    # run's), so well above what a small run takes here on 2 cores (a 2-document run: 8 to 14 s
    # from queued to success, 16 s on a slow day), yet short enough to wait out: the held-back
    # run waits the whole promise. Longer runs (the corpus, the size test, faults that hold a run back) miss it
    # and alert; those alerts name a run, not a document, so no test that counts a document's
    # alerts sees them.
    "KB_SEARCHABLE_WITHIN_S": "30",
    # a failed document is due again in the next run, and a failed task is retried after 5 s
    # (stack/test_faults: every fault's end state is reached within a run or two)
    "KB_RETRY_BACKOFF_S": "0",
    "KB_RETRY_DELAY_S": "5",
}


def live_stack(tmp_path_factory, **settings: str):
    """``settings``: more KB_* settings of the session (where the embedder's export is kept)."""
    state = tmp_path_factory.mktemp("live-stack")
    with webhook_receiver() as hook:
        env = stack_env_for(
            state, **LIVE_SETTINGS, **settings,
            # the failpoints stack/test_faults arms (nothing fires unless a file is there)
            KB_FAILPOINTS_DIR=str(state / "failpoints"),
            # document and run alerts to a real webhook on loopback, beside the mail sink
            AIRFLOW_CONN_KB_ALERTS_WEBHOOK=json.dumps({
                "conn_type": "http", "host": f"http://127.0.0.1:{hook['port']}/services", "password": "T0/B0/live"}),
        )
        with stack_up(env):
            secrets = dict(line.split("=", 1) for line in (state / "secrets.env").read_text().split())
            done = kb(env, "status", "--json")
            assert done.returncode == 0, done.stderr
            yield LiveStack(env, secrets, json.loads(done.stdout), hook)
