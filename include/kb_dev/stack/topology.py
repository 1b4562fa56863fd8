"""The whole local stack: ``up``, ``down`` and ``status``, and how a command reaches the stack
that is running under a state folder.

Two topologies share the parts: the local default (S3, one OCR service, the search
service, Airflow standalone on SQLite) and the distributed one (``kb up --distributed``:
Postgres, Redis, Airflow on Celery, OCR replicas). Which one is running is decided in one
place, ``is_distributed``: everything that differs between them asks it.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable

from kb.settings import PipelineSettings
from kb_airflow.names import INGEST_DAG_ID
from kb_dev.airflow_api import AirflowClient, RunOutcome, run_and_wait
from kb_dev.errors import StackNotRunning
from kb_dev.settings import StackSettings
from kb_dev.stack import airflow_celery, airflow_local, ocr, observe, postgres, redis_server, s3, search
from kb_dev.stack.ocr import Replica
from kb_dev.stack.process import part_pid, part_states
from kb_dev.stack.secrets import ensure_secrets, read_secrets


def is_distributed(s: StackSettings) -> bool:
    """The distributed stack is the one whose Postgres runs (the local one has none)."""
    return postgres.running(s)


def ocr_replicas(s: StackSettings) -> list[Replica]:
    """The OCR services the running stack's Airflow sends ranges to (every replica when distributed)."""
    return ocr.replicas(s, is_distributed(s))


def pipeline_env(s: StackSettings, secrets_: dict[str, str]) -> dict[str, str]:
    """What a process reading the pipeline's state needs beyond the state folder: the ledger's
    URL where it is not the folder's SQLite file (the distributed stack keeps it in Postgres)."""
    return {"KB_LEDGER_URL": postgres.ledger_url(s, secrets_)} if is_distributed(s) else {}


def load_client_env(s: StackSettings) -> None:
    """Let a command reach the running stack: its endpoint, keys and ledger into ``os.environ``
    (what the environment already says wins)."""
    secrets_ = read_secrets(s.state_dir)
    for k, v in {**secrets_, **pipeline_env(s, secrets_)}.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("KB_S3_ENDPOINT", s3.endpoint(s))
    os.environ.setdefault("KB_STATE_DIR", str(s.state_dir))


# --- up, down, status ----------------------------------------------------------------------


def up(s: StackSettings | None = None, *, airflow: bool = True, distributed: bool = False, workers: int = 2,
       echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Start what is not running (parts that run are left as they are); ``airflow=False``:
    only S3 and the Qdrant folder; ``distributed``: the production topology."""
    s = s or StackSettings()
    s.state_dir.mkdir(parents=True, exist_ok=True)
    secrets_ = ensure_secrets(s.state_dir)
    echo(f"starting S3 (weed) on {s3.endpoint(s)} ...")
    try:
        s3.start(s, secrets_)
        p = PipelineSettings(state_dir=s.state_dir)
        if not part_pid(s, search.PART):  # a running search service's store copies hold the store
            _prepare_store(p, echo)
        if distributed:
            _up_distributed(s, secrets_, workers, echo)
        elif airflow:
            [replica] = ocr.replicas(s, distributed=False)
            echo(f"starting the OCR service on {replica.url} (CPU: text layer, else PP-OCR) ...")
            echo(f"starting the search service on {search.base_url(s)} ...")
            echo(f"starting Airflow standalone on {airflow_local.base_url(s)} (this takes a minute) ...")
            _together(lambda: ocr.start(s, secrets_, replica), lambda: search.start(s, secrets_),
                            lambda: _observe(s, secrets_, {}, echo), lambda: airflow_local.start(s, secrets_))
    except Exception:
        down(s, echo=lambda _m: None)
        raise
    return status(s)


def _prepare_store(p: PipelineSettings, echo: Callable[[str], None]) -> None:
    """The embedded store ready for the search service: an older local-mode store moved in."""
    from kb.settings import StoreSettings
    from kb.store.migrate import legacy_store, prepare

    if p.qdrant_url:
        return
    if legacy_store(p) is not None:
        echo(f"moving the local-mode Qdrant store at {p.resolved_qdrant_path} into the embedded store "
             "(vectors and payloads as they are) ...")
    prepare(p, StoreSettings())
    echo(f"embedded store (Qdrant Edge) at {p.store_dir}")


def _together(*calls: Callable[[], Any]) -> list[Any]:
    """Run calls that need nothing of each other at once; their results, in order. Starting
    or stopping parts one after another, their start-up times and stop deadlines add up
    (local stack: OCR 1.6 s, search 2.1 s, observability 3.3 s, then Airflow 16 s). Every
    call ends before the first failure is raised, so ``down`` then finds each part that did
    start."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [future.result() for future in futures]


def _up_distributed(s: StackSettings, secrets_: dict[str, str], workers: int, echo: Callable[[str], None]) -> None:
    echo(f"starting Postgres on {s.host}:{s.postgres_port} and Redis on {s.host}:{s.redis_port} ...")
    replicas = ocr.replicas(s, distributed=True)
    # replicas refuse at once when full (no queue), so a client moves on to a free one
    replica_env = {"OCR_SERVICE_MAX_CONCURRENCY": str(s.ocr_replica_concurrency), "OCR_SERVICE_MAX_QUEUE": "0"}
    for i, replica in enumerate(replicas):
        echo(f"starting OCR replica {i + 1} on {replica.url} ...")
    # the replicas need neither Postgres nor Redis; the search service and Airflow need both
    _together(lambda: postgres.start(s, secrets_), lambda: redis_server.start(s, secrets_),
                    *(lambda r=replica: ocr.start(s, secrets_, r, replica_env) for replica in replicas))
    ledger = {"KB_LEDGER_URL": postgres.ledger_url(s, secrets_)}
    echo(f"starting the search service on {search.base_url(s)} ...")
    echo(f"starting Airflow (CeleryExecutor, {workers} worker(s)) on {airflow_local.base_url(s)} ...")
    _together(lambda: search.start(s, secrets_, ledger), lambda: _observe(s, secrets_, ledger, echo),
                    lambda: airflow_celery.start(s, secrets_, replicas, workers, echo))


def _observe(s: StackSettings, secrets_: dict[str, str], env: dict[str, str], echo: Callable[[str], None]) -> None:
    if s.observe:
        echo(f"starting the exporter, a mail sink and Prometheus on {s.host} (ports {observe.ports(s)}) ...")
        observe.start(s, secrets_, env, echo)


def down(s: StackSettings | None = None, *, echo: Callable[[str], None] = print) -> dict[str, bool]:
    """Stop every part ``up`` recorded: Airflow first, then what it uses, S3 last. The parts of
    one tier stop together, so their shutdown deadlines overlap instead of adding up."""
    s = s or StackSettings()
    result = {"airflow": airflow_local.stop(s), **airflow_celery.stop(s)}
    redis_, postgres_, observed, search_, ocr_ = _together(
        *(partial(stop, s) for stop in (redis_server.stop, postgres.stop, observe.stop, search.stop, ocr.stop)))
    result.update(redis=redis_, postgres=postgres_, **observed, search=search_, ocr=ocr_)
    result["s3"] = s3.stop(s)
    result = {k: v for k, v in result.items() if v or k in ("airflow", "search", "ocr", "s3")}
    for name, stopped in result.items():
        echo(f"{name}: {'stopped' if stopped else 'was not running'}")
    return result


def status(s: StackSettings | None = None) -> dict[str, Any]:
    s = s or StackSettings()
    secrets_ = read_secrets(s.state_dir)
    replicas = ocr_replicas(s)
    out: dict[str, Any] = {"state_dir": str(s.state_dir), "s3": s3.status(s, secrets_),
                           "airflow": airflow_local.api_status(s, airflow_pid(s)),
                           "ocr": ocr.status(s, replicas[0])}
    if is_distributed(s):
        out["distributed"] = {**part_states(s, (postgres.PART, redis_server.PART)), **airflow_celery.status(s),
                              "ocr_replicas": [ocr.status(s, r) for r in replicas]}
    out["search"] = search.status(s)
    out.update(observe.status(s))
    p = PipelineSettings(state_dir=s.state_dir)
    out["store"] = {"mode": "server" if p.qdrant_url else "embedded", "location": p.qdrant_url or str(p.store_dir),
                    "prepared": bool(p.qdrant_url) or p.store_dir.exists(), "collection": p.collection}
    return out


# --- reaching the running stack's Airflow -------------------------------------------------


def airflow_pid(s: StackSettings) -> int | None:
    """Airflow's API server: ``airflow standalone`` locally, its own part when distributed."""
    return part_pid(s, airflow_celery.API_PART if is_distributed(s) else airflow_local.PART)


def airflow_client(s: StackSettings) -> AirflowClient:
    """A REST client of the running stack's Airflow, logged in with the stack's password."""
    if not airflow_pid(s):
        raise StackNotRunning(f"Airflow is not running under {s.state_dir}; start the stack with `kb up`")
    # a person logged in as themself (KB_AIRFLOW_USER, KB_AIRFLOW_PASSWORD), else the stack's user
    password = os.environ.get("KB_AIRFLOW_PASSWORD") or read_secrets(s.state_dir).get("KB_AIRFLOW_PASSWORD")
    return AirflowClient(airflow_local.base_url(s), s.airflow_user, password or "", timeout=s.airflow_api_timeout_s)


def run_ingest(s: StackSettings, conf: dict[str, Any], timeout_s: float, echo: Callable[[str], None] = print,
               poll_s: float = 1.0) -> RunOutcome:
    """One run of kb_ingest on the running stack, followed to its end."""
    client = airflow_client(s)
    try:
        return run_and_wait(client, INGEST_DAG_ID, conf, timeout_s, echo=echo, poll_s=poll_s)
    finally:
        client.close()
