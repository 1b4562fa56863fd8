"""The distributed topology (``kb up --distributed``) ends where the LocalExecutor stack ends.

Postgres, Redis, Airflow on the CeleryExecutor with a default and a gpu worker, two OCR
replicas, the ledger in Postgres and the inbox watcher on: 20 documents (scanned ones
included) are uploaded with no trigger, and the Qdrant state they leave must equal the one
a LocalExecutor stack leaves after `kb ingest --wait` of the same files: the same point ids.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from kb.ledger import Status, doc_id_for
from kb.samples import prose_pages, write_pdf, write_scanned_pdf
from kb.settings import PipelineSettings, StackSettings
from kb.vectorstore import VectorStore
from tests.conftest import free_ports
from tests.stack.kbcli import REPO, kb, stack_env

pytestmark = [pytest.mark.stack, pytest.mark.distributed]
DOCUMENTS = 20
PREFIX = "dist/"


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dist-docs")
    for sample in sorted((REPO / "include" / "samples").glob("*.pdf")):
        shutil.copyfile(sample, folder / sample.name)
    n = DOCUMENTS - len(list(folder.iterdir()))
    for i in range(n):
        pages = prose_pages(1 + i % 3, seed=500 + i, paragraphs=2)
        if i % 4 == 0:  # a quarter of the generated ones are scans: OCR on the replicas
            write_scanned_pdf(folder / f"scan-{i:02d}.pdf", f"Scanned record {i}", pages[:1], dpi=120)
        else:
            write_pdf(folder / f"doc-{i:02d}.pdf", f"Generated manual {i}", pages)
    assert len(list(folder.iterdir())) == DOCUMENTS
    return folder


def _point_ids(state: Path) -> list[str]:
    with VectorStore.open(PipelineSettings(state_dir=state)) as vs:
        return sorted(str(p.id) for p in vs.points())


def _settings(env: dict[str, str]) -> StackSettings:
    return StackSettings.from_env(env)


@pytest.fixture(scope="module")
def local_point_ids(documents, tmp_path_factory) -> list[str]:
    """The reference: the LocalExecutor stack (Airflow standalone on SQLite), a manual run."""
    env = stack_env(tmp_path_factory.mktemp("local-stack"))
    up = kb(env, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        done = kb(env, "ingest", str(documents), "--prefix", PREFIX, "--wait", "--timeout", "900", timeout=1000)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"{DOCUMENTS} indexed" in done.stdout, done.stdout[-3000:]
    finally:
        kb(env, "down")
    return _point_ids(Path(env["KB_STATE_DIR"]))


@pytest.fixture(scope="module")
def distributed(tmp_path_factory):
    # Postgres runs as the `postgres` user, which cannot enter pytest's private tmp folders
    state = Path(tempfile.mkdtemp(prefix="kb-dist-", dir="/tmp"))
    state.chmod(0o755)
    pg, redis, ocr2, worker_logs = free_ports(4)
    env = stack_env(state / "state", KB_POSTGRES_PORT=str(pg), KB_REDIS_PORT=str(redis),
                    KB_OCR_REPLICA_PORTS=json.dumps([ocr2]), KB_AIRFLOW_EXTRA_WORKER_LOG_PORTS=json.dumps([worker_logs]),
                    KB_WATCH_INBOX="true", KB_WATCH_INTERVAL_S="2")
    up = kb(env, "up", "--distributed", timeout=900)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    try:
        yield env
    finally:
        kb(env, "down")
        shutil.rmtree(state, ignore_errors=True)


def _wait_all_indexed(env, keys: list[str], timeout_s: float) -> dict:
    from kb import stack
    from kb.ledger_db import Ledger
    from kb.stack_distributed import ledger_url

    s = _settings(env)
    ledger = Ledger(ledger_url(s, stack.read_env_file(stack.secrets_path(s.state_dir))))
    deadline = time.monotonic() + timeout_s
    while True:
        entries = ledger.get_many(doc_id_for("inbox", k) for k in keys)
        done = [e for e in entries.values() if e.status == Status.INDEXED]
        with closing(stack.airflow_client(s)) as client:
            runs = client.dag_runs(stack.INGEST_DAG_ID)
        active = [r for r in runs if r["state"] in ("queued", "running")]
        if len(done) == len(keys) and not active:
            return {"entries": entries, "runs": runs}
        failed = [e.key for e in entries.values() if e.status in (Status.FAILED, Status.QUARANTINED)]
        assert not failed, [(e.key, e.error) for e in entries.values() if e.key in failed]
        assert time.monotonic() < deadline, f"{len(done)}/{len(keys)} indexed, runs: {[(r['dag_run_id'], r['state']) for r in runs]}"
        time.sleep(3)


def test_the_distributed_stack_indexes_what_the_local_one_does(local_point_ids, distributed, documents):
    # (the LocalExecutor reference first: two stacks at once would share two cores)
    env = distributed
    status = json.loads(kb(env, "status", "--json").stdout)
    parts = status["distributed"]
    for part in ("postgres", "redis", "airflow-api", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer", "worker-default", "worker-gpu"):
        assert parts[part]["running"], (part, parts)
    assert [r["healthy"] for r in parts["ocr_replicas"]] == [True, True]

    # the pool follows the replicas' published capacity (PP-OCR replicas: their engine slots)
    from kb import pools, stack

    s = _settings(env)
    with closing(stack.airflow_client(s)) as client:
        client.set_pool(pools.POOL, 7, "set by hand")
        assert client.pool(pools.POOL)["slots"] == 7
        synced = kb(env, "pools", "sync")
        assert synced.returncode == 0, synced.stdout + synced.stderr
        replicas = pools.replica_capacities([r["url"] for r in parts["ocr_replicas"]], stack.ocr_api_key(s))
        capacity = sum(r.sequences for r in replicas)
        assert {r.source for r in replicas} == {"concurrency"}
        assert capacity == 2 and client.pool(pools.POOL)["slots"] == capacity, synced.stdout

    # no trigger: the inbox watcher in the triggerer starts the runs
    done = kb(env, "ingest", str(documents), "--prefix", PREFIX)
    assert done.returncode == 0, done.stdout + done.stderr
    keys = [f"{PREFIX}{p.name}" for p in sorted(documents.iterdir())]
    state = _wait_all_indexed(env, keys, timeout_s=900)
    assert state["runs"] and all(r["run_type"] == "asset_triggered" for r in state["runs"]), state["runs"]
    assert all(r["state"] == "success" for r in state["runs"]), state["runs"]

    # the page ranges went to the gpu queue, in the pool, and both replicas served them
    with closing(stack.airflow_client(s)) as client:
        tis = [ti for r in state["runs"] for ti in client.task_instances(stack.INGEST_DAG_ID, r["dag_run_id"])]
    extract = [ti for ti in tis if ti["task_id"] == "extract"]
    assert extract and {ti["queue"] for ti in extract} == {"gpu"} and {ti["pool"] for ti in extract} == {"gpu_ocr"}
    assert {ti["queue"] for ti in tis if ti["task_id"] != "extract"} == {"default"}
    served = []
    for replica in parts["ocr_replicas"]:
        metrics = httpx.get(replica["url"] + "/metrics", timeout=10).text
        served.append(sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                          if line.startswith("ocr_requests_total{") and 'route="/v1/parse"' in line))
    assert all(n > 0 for n in served), served

    # the ledger is in Postgres, not in the state folder's SQLite
    assert not (Path(env["KB_STATE_DIR"]) / "ledger.db").exists()

    kb(env, "down")  # the search service holds the Qdrant store's lock while it refreshes
    ids = _point_ids(Path(env["KB_STATE_DIR"]))
    assert len(ids) == len(local_point_ids) and ids == local_point_ids
