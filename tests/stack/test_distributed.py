"""The distributed topology (``kb up --distributed``) ends where a plain run of the pipeline ends.

Postgres, Redis, Airflow on the CeleryExecutor with a default and a gpu worker, two OCR
replicas, the ledger in Postgres and the inbox watcher on: 20 documents (scanned ones
included) are uploaded with no trigger, and the Qdrant state they leave must equal what the
pipeline's stages make of the same files in this process (the same engine, no Airflow, no
service): the same point ids.

``distributed`` starts the stack once for the module, records what the checks need while it
runs, and stops it. Nothing here runs on the live stack and nothing times a limit, so the
module runs in make test's first pass, beside the tests that need no stack (first, so that
the minutes it waits on its stack overlap with their work).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from kb.ledger import LedgerEntry, Status, doc_id_for
from kb.points import point_id
from kb.ledger_db import Ledger
from kb.settings import PipelineSettings
from kb.store import open_reader
from kb_airflow.names import INGEST_DAG_ID, OCR_POOL, OCR_QUEUE
from kb_dev import pools
from kb_dev.samples import prose_pages, write_pdf, write_scanned_pdf
from kb_dev.settings import StackSettings
from kb_dev.stack import ocr, postgres
from kb_dev.stack.airflow_celery import WORKER_QUEUES
from kb_dev.stack.process import part_pid
from kb_dev.stack.secrets import read_secrets
from kb_dev.stack.topology import airflow_client
from tests.conftest import free_ports
from tests.stack.kbcli import REPO, kb, stack_env, stack_up
from tests.stack.preloaded import task_libraries_loaded

pytestmark = [pytest.mark.distributed, pytest.mark.own_stack]
DOCUMENTS = 20
FOLDER = "dist"
PREFIX = f"{FOLDER}/"


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


def _point_ids(state: Path, prefix: str) -> list[str]:
    """The ids of the points of documents under ``prefix``, read in this process once the stack
    is down (its search service held the store's copies)."""
    with open_reader(PipelineSettings(state_dir=state)) as vs:
        return sorted(p.id for p in vs.points() if p.payload["key"].startswith(prefix))


@dataclass
class DistributedRun:
    """What the checks need of the distributed stack, recorded while it ran."""

    status: dict
    pool_set_by_hand: int
    synced: str  # `kb pools sync`'s output
    replicas: list[pools.ReplicaCapacity]
    pool_after_sync: int
    entries: dict[str, LedgerEntry]
    runs: list[dict]
    task_instances: list[dict]
    served: list[float]  # /v1/parse requests each replica answered
    ledger_db_file: bool  # a ledger.db in the state folder (it must be in Postgres)
    preloaded: dict[str, bool]  # each Celery worker: the tasks' libraries loaded before it forked its pool
    point_ids: list[str]


def _wait_all_indexed(s: StackSettings, keys: list[str], timeout_s: float) -> tuple[dict, list[dict]]:
    ledger = Ledger(postgres.ledger_url(s, read_secrets(s.state_dir)))
    deadline = time.monotonic() + timeout_s
    while True:
        entries = ledger.get_many(doc_id_for("inbox", k) for k in keys)
        done = [e for e in entries.values() if e.status == Status.INDEXED]
        with closing(airflow_client(s)) as client:
            runs = client.dag_runs(INGEST_DAG_ID)
        active = [r for r in runs if r["state"] in ("queued", "running")]
        if len(done) == len(keys) and not active:
            return entries, runs
        failed = [e.key for e in entries.values() if e.status in (Status.FAILED, Status.QUARANTINED)]
        assert not failed, [(e.key, e.error) for e in entries.values() if e.key in failed]
        assert time.monotonic() < deadline, f"{len(done)}/{len(keys)} indexed, runs: {[(r['dag_run_id'], r['state']) for r in runs]}"
        time.sleep(3)


@pytest.fixture(scope="module")
def distributed(documents, embed_cache) -> DistributedRun:
    # Postgres runs as the `postgres` user, which cannot enter pytest's private tmp folders
    state = Path(tempfile.mkdtemp(prefix="kb-dist-", dir="/tmp"))
    state.chmod(0o755)
    pg, redis, ocr2, worker_logs = free_ports(4)
    env = stack_env(state / "state", KB_POSTGRES_PORT=str(pg), KB_REDIS_PORT=str(redis),
                    KB_OCR_REPLICA_PORTS=json.dumps([ocr2]), KB_AIRFLOW_EXTRA_WORKER_LOG_PORTS=json.dumps([worker_logs]),
                    KB_WATCH_INBOX="true", KB_WATCH_INTERVAL_S="2", KB_EMBED_CACHE_DIR=str(embed_cache))
    s = StackSettings.from_env(env)
    # the state folder goes in the end, also when the stack failed to start; `kb down` (which
    # also stops what a failed `up` started) makes the search service let go of the store first
    try:
        with stack_up(env, "--distributed", timeout=900):
            status = json.loads(kb(env, "status", "--json").stdout)
            preloaded = {part: task_libraries_loaded(part_pid(s, part)) for part in WORKER_QUEUES[2]}
            # the pool follows the replicas' published capacity (PP-OCR replicas: their engine slots)
            with closing(airflow_client(s)) as client:
                client.set_pool(OCR_POOL, 7, "set by hand")
                by_hand = client.pool(OCR_POOL)["slots"]
                synced = kb(env, "pools", "sync")
                assert synced.returncode == 0, synced.stdout + synced.stderr
                replicas = pools.replica_capacities([r["url"] for r in status["distributed"]["ocr_replicas"]],
                                                    ocr.api_key(s))
                after_sync = client.pool(OCR_POOL)["slots"]

            # no trigger: the inbox watcher in the triggerer starts the runs
            done = kb(env, "ingest", str(documents), "--prefix", FOLDER)
            assert done.returncode == 0, done.stdout + done.stderr
            keys = [f"{PREFIX}{p.name}" for p in sorted(documents.iterdir())]
            entries, runs = _wait_all_indexed(s, keys, timeout_s=900)
            with closing(airflow_client(s)) as client:
                tis = [ti for r in runs for ti in client.task_instances(INGEST_DAG_ID, r["dag_run_id"])]
            served = []
            for replica in status["distributed"]["ocr_replicas"]:
                metrics = httpx.get(replica["url"] + "/metrics", timeout=10).text
                served.append(sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                                  if line.startswith("ocr_requests_total{") and 'route="/v1/parse"' in line))
        return DistributedRun(status, by_hand, synced.stdout, replicas, after_sync, entries, runs, tis, served,
                              (Path(env["KB_STATE_DIR"]) / "ledger.db").exists(), preloaded,
                              _point_ids(Path(env["KB_STATE_DIR"]), PREFIX))
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_the_distributed_stack_runs_every_part_and_scales_out_the_ocr(distributed):
    parts = distributed.status["distributed"]
    for part in ("postgres", "redis", "airflow-api", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer", "worker-default", "worker-gpu"):
        assert parts[part]["running"], (part, parts)
    assert [r["healthy"] for r in parts["ocr_replicas"]] == [True, True]

    # `kb pools sync` set the pool to the replicas' published capacity: their engine slots
    assert distributed.pool_set_by_hand == 7
    capacity = sum(r.sequences for r in distributed.replicas)
    assert {r.source for r in distributed.replicas} == {"concurrency"}
    assert capacity == 2 and distributed.pool_after_sync == capacity, distributed.synced

    # the inbox watcher started every run, and each succeeded
    runs = distributed.runs
    assert runs and all(r["run_type"] == "asset_triggered" for r in runs), runs
    assert all(r["state"] == "success" for r in runs), runs
    assert len(distributed.entries) == DOCUMENTS

    # the page ranges went to the gpu queue, in the pool, and both replicas served them
    extract = [ti for ti in distributed.task_instances if ti["task_id"] == "extract"]
    assert extract and {ti["queue"] for ti in extract} == {OCR_QUEUE} and {ti["pool"] for ti in extract} == {OCR_POOL}
    assert {ti["queue"] for ti in distributed.task_instances if ti["task_id"] != "extract"} == {"default"}
    assert all(n > 0 for n in distributed.served), distributed.served

    # the ledger is in Postgres, not in the state folder's SQLite
    assert not distributed.ledger_db_file
    # each Celery worker imported the tasks' libraries before it forked its pool (kb_airflow.celery_config)
    assert distributed.preloaded == {"worker-default": True, f"worker-{OCR_QUEUE}": True}, distributed.preloaded


def test_the_distributed_stack_indexes_what_the_pipelines_stages_make_of_the_same_files(distributed, documents,
                                                                                         kb_env):
    from kb.pipeline.extract import extract
    from kb.pipeline.index import index_batch
    from tests.integration.stages import context, plan_run

    assert distributed.point_ids, "the distributed stack indexed nothing"
    ctx = context()
    for path in sorted(documents.iterdir()):
        kb_env["store"].put_bytes(kb_env["inbox"], f"{PREFIX}{path.name}", path.read_bytes(),
                                  content_type="application/pdf")
    plan = plan_run(ctx, "reference")
    for rng in plan.ranges:
        extract(ctx, rng, run_id="reference")
    results = {r.key: r for r in index_batch(ctx, plan.documents, "reference")}
    assert [r.status for r in results.values()] == [Status.INDEXED] * DOCUMENTS, [
        (r.key, r.status, r.message) for r in results.values()]
    # the ids the same chunks get under the stack's inbox bucket (a point id names its document's bucket)
    expected = sorted(str(point_id(doc_id_for("inbox", d.key), d.sha256, i))
                      for d in plan.documents for i in range(results[d.key].chunks))
    assert len(expected) == len(distributed.point_ids) and expected == distributed.point_ids
