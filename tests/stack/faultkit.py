"""A live local stack for fault tests, and what they compare: the end state of a run.

``FaultStack`` starts ``kb up`` on free loopback ports with a webhook receiver for alerts
and a failpoints folder, and gives tests the few moves they need: upload, trigger a run,
wait for a task to be running, read Qdrant, the ledger and the alerts back.
"""

from __future__ import annotations

import hashlib
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb_dev.airflow_api import TERMINAL, AirflowClient
from kb.ledger import LedgerEntry, doc_id_for
from kb.ledger_db import Ledger
from kb.objectstore import ObjectStore
from kb.settings import PipelineSettings
from kb_dev.settings import StackSettings
from kb_airflow.names import INGEST_DAG_ID
from kb_dev.stack import search
from kb_dev.stack.topology import airflow_client
from kb.points import point_id
from tests.stack.kbcli import kb

INBOX, ARTIFACTS = "inbox", "kb-artifacts"


@dataclass(frozen=True)
class Chunk:
    id: str
    sha256: str
    chunk_index: int
    text: str


class RunEnded(AssertionError):
    """The run finished before the task reached the state a test waited for."""


@dataclass
class FaultStack:
    env: dict[str, str]
    webhook: dict  # tests.receivers.webhook_receiver's calls

    @property
    def state(self) -> Path:
        return Path(self.env["KB_STATE_DIR"])

    @property
    def failpoints(self) -> Path:
        return Path(self.env["KB_FAILPOINTS_DIR"])

    @property
    def settings(self) -> StackSettings:
        fields = StackSettings.model_fields
        values = {k[3:].lower(): v for k, v in self.env.items() if k.startswith("KB_") and k[3:].lower() in fields}
        return StackSettings(**values)

    @property
    def pipeline(self) -> PipelineSettings:
        return PipelineSettings(state_dir=self.state)

    @property
    def store(self) -> ObjectStore:
        secrets = dict(line.split("=", 1) for line in (self.state / "secrets.env").read_text().split())
        return ObjectStore.connect(f"127.0.0.1:{self.env['KB_S3_PORT']}", secrets["KB_S3_ACCESS_KEY"],
                                   secrets["KB_S3_SECRET_KEY"])

    def up(self) -> None:
        done = kb(self.env, "up")
        assert done.returncode == 0, done.stdout + done.stderr

    # --- runs ---------------------------------------------------------------------------

    def upload(self, prefix: str, documents: dict[str, bytes]) -> None:
        store = self.store
        for name, data in documents.items():
            store.put_bytes(INBOX, prefix + name, data, content_type="application/pdf")

    def client(self) -> AirflowClient:
        client = airflow_client(self.settings)
        client.wait_for_dag(INGEST_DAG_ID)
        return client

    def trigger(self, prefix: str) -> str:
        with closing(self.client()) as client:
            return client.trigger(INGEST_DAG_ID, {"prefix": prefix})

    def wait(self, run_id: str, timeout_s: float = 600) -> str:
        deadline = time.monotonic() + timeout_s
        with closing(self.client()) as client:
            while time.monotonic() < deadline:
                try:
                    state = client.progress(INGEST_DAG_ID, run_id).state
                except Exception:  # noqa: BLE001 - the API may be briefly busy while a part restarts
                    state = None
                if state in TERMINAL:
                    return state
                time.sleep(1.0)
        raise AssertionError(f"run {run_id} did not finish within {timeout_s:.0f}s")

    def run(self, prefix: str, timeout_s: float = 600) -> tuple[str, dict | None]:
        run_id = self.trigger(prefix)
        state = self.wait(run_id, timeout_s)
        return state, self.summary(run_id)

    def summary(self, run_id: str) -> dict | None:
        from kb.artifacts import ArtifactKeys

        return self.store.get_json(ARTIFACTS, ArtifactKeys.run_summary(run_id))

    def wait_for_task(self, run_id: str, task_id: str, state: str = "running", timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        with closing(self.client()) as client:
            while time.monotonic() < deadline:
                progress = client.progress(INGEST_DAG_ID, run_id)
                if progress.counts.get(task_id, {}).get(state):
                    return
                if progress.state in TERMINAL:
                    raise RunEnded(f"run {run_id} ended ({progress.state}) before {task_id} was {state}")
                time.sleep(0.3)
        raise AssertionError(f"{task_id} was not {state} within {timeout_s:.0f}s")

    def task_states(self, run_id: str) -> dict[str, dict[str, int]]:
        with closing(self.client()) as client:
            return client.progress(INGEST_DAG_ID, run_id).counts

    def tries(self, run_id: str, task_id: str) -> list[int]:
        with closing(self.client()) as client:
            return [ti["try_number"] for ti in client.task_instances(INGEST_DAG_ID, run_id) if ti["task_id"] == task_id]

    # --- end state ----------------------------------------------------------------------

    def chunks(self, key: str) -> list[Chunk]:
        """The document's points in the store, by chunk index, as the search service reads them
        (its copies hold the store's shards)."""
        client = search.client(self.settings)
        assert client is not None, "the stack's search service is not running"
        try:
            records = client.chunks(doc_id_for(INBOX, key))
        finally:
            client.close()
        return sorted((Chunk(r["id"], r["payload"]["sha256"], r["payload"]["chunk_index"], r["payload"]["text"])
                       for r in records), key=lambda c: (c.sha256, c.chunk_index))

    def ledger(self, key: str) -> LedgerEntry | None:
        return Ledger.for_settings(self.pipeline).get(doc_id_for(INBOX, key))

    def alerts(self, key: str) -> list[dict[str, Any]]:
        """The document alerts (quarantined, indexed without pages) the webhook got for ``key``."""
        return [body for _path, body in self.webhook["calls"] if body.get("kb", {}).get("key") == key]

    def expect_same_as_clean(self, key: str, clean_key: str, data: bytes) -> None:
        """``key`` holds exactly what a clean run made of the same bytes under ``clean_key``:
        the same number of chunks with the same texts, under the ids that content gives, and
        a ledger entry that says indexed, at this content, with no error."""
        sha = hashlib.sha256(data).hexdigest()
        clean = self.chunks(clean_key)
        assert clean and {c.sha256 for c in clean} == {sha}, f"no clean reference for {clean_key}"
        got = self.chunks(key)
        expected_ids = {point_id(doc_id_for(INBOX, key), sha, c.chunk_index) for c in clean}
        assert {c.id for c in got} == expected_ids, f"{key}: {len(got)} points, a clean run made {len(clean)}"
        assert [c.text for c in got] == [c.text for c in clean], f"{key}: chunk texts differ from a clean run"
        entry = self.ledger(key)
        assert entry is not None and entry.status == "indexed", (key, entry and entry.status, entry and entry.error)
        assert entry.indexed_sha256 == sha and entry.indexed_chunks == len(clean) and entry.error is None, entry
        assert self.alerts(key) == [], f"{key} was indexed whole, yet alerted: {self.alerts(key)}"
