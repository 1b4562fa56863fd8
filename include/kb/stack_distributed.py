"""The distributed topology on one machine, without Docker (``kb up --distributed``).

The same parts as production: Postgres (Airflow's metadata database, and the ledger in a
database of its own) and Redis from Debian's packages; Airflow's scheduler, API server,
DAG processor and triggerer as separate processes with the CeleryExecutor; a Celery
worker on the default queue and one on ``gpu``; two OCR service replicas, whose combined
concurrency is the ``gpu_ocr`` pool's slots. S3 (weed), the search service and Qdrant
(local mode: one machine) are the local stack's.

Every part is a process group recorded under ``<state_dir>/run/`` like the local
stack's, so ``kb down`` stops them the same way.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

from kb.errors import ServiceDidNotStart
from kb.settings import StackSettings
from kb.stack import (
    _alive, _tail, _write_private, airflow_base_url, start_process, wait_until, airflow_command, airflow_env, airflow_healthy,
    check_ports_free, part_pid, prepare_airflow, stop_part,
)

POSTGRES_DB_USER = "airflow"
LEDGER_DB_USER = "kb_ledger"
# Celery workers: the queue(s) each consumes. One worker consumes both queues when the
# stack is started with --workers 1 (what the throughput benchmark compares with).
WORKER_QUEUES = {1: {"worker": "default,gpu"}, 2: {"worker-default": "default", "worker-gpu": "gpu"}}
AIRFLOW_PARTS = ("airflow-api", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
ALL_WORKER_PARTS = ("worker", "worker-default", "worker-gpu")


# --- Postgres ---------------------------------------------------------------------------


def postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise ServiceDidNotStart(f"Postgres' `{name}` was not found; install Debian's `postgresql` package "
                                 "(`make test` and `make distributed` do)")
    return found[-1]


def _as_postgres_user(cmd: list[str]) -> list[str]:
    """Postgres refuses to run as root: as root, run it as the package's `postgres` user."""
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *cmd]


def _postgres_dir(s: StackSettings) -> Path:
    return s.state_dir / "postgres"


def _prepare_postgres_dir(s: StackSettings) -> Path:
    data = _postgres_dir(s)
    if (data / "PG_VERSION").exists():
        return data
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
        probe = subprocess.run(_as_postgres_user(["test", "-w", str(data)]), capture_output=True)
        if probe.returncode != 0:
            raise ServiceDidNotStart(
                f"the `postgres` user cannot reach {data}: a folder above it is private to root. "
                "Use a state folder the postgres user can traverse (KB_STATE_DIR), e.g. under /tmp or /var/tmp")
    done = subprocess.run(_as_postgres_user([postgres_bin("initdb"), "-D", str(data), "-U", "postgres",
                                             "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                                             "--no-instructions"]), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ServiceDidNotStart(f"initdb failed:\n{done.stderr[-2000:]}")
    return data


def _superuser_dsn(s: StackSettings) -> str:
    # the Unix socket in the data folder, where initdb's local trust lets the superuser in
    return f"host={_postgres_dir(s)} port={s.postgres_port} user=postgres dbname=postgres"


def start_postgres(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, "postgres"):
        return
    check_ports_free(s.host, {"Postgres": s.postgres_port})
    data = _prepare_postgres_dir(s)
    cmd = _as_postgres_user([postgres_bin("postgres"), "-D", str(data), "-p", str(s.postgres_port),
                             "-c", f"listen_addresses={s.host}", "-c", f"unix_socket_directories={data}",
                             # Airflow's parts and Celery's result backend hold ~40 connections at rest
                             "-c", "max_connections=200", "-c", "shared_buffers=128MB"])
    pid = start_process(s, "postgres", cmd, dict(os.environ), s.state_dir)

    def ready() -> bool:
        import psycopg2

        psycopg2.connect(_superuser_dsn(s), connect_timeout=2).close()
        return True

    wait_until(s, "postgres", pid, ready, f"accepting connections on {s.host}:{s.postgres_port}")
    _ensure_database(s, POSTGRES_DB_USER, secrets_["KB_PG_AIRFLOW_PASSWORD"])
    _ensure_database(s, LEDGER_DB_USER, secrets_["KB_PG_LEDGER_PASSWORD"])


def _ensure_database(s: StackSettings, name: str, password: str) -> None:
    """A role and a database of the same name, owned by it (idempotent)."""
    import psycopg2
    from psycopg2 import sql

    conn = psycopg2.connect(_superuser_dsn(s))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
            verb = "ALTER" if cur.fetchone() else "CREATE"
            cur.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD %s").format(sql.Identifier(name)), (password,))
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if not cur.fetchone():
                cur.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(name)))
    finally:
        conn.close()


def postgres_url(s: StackSettings, user: str, password: str, driver: str = "postgresql+psycopg2") -> str:
    return f"{driver}://{user}:{password}@{s.host}:{s.postgres_port}/{user}"


def ledger_url(s: StackSettings, secrets_: dict[str, str]) -> str:
    """The ledger's own database (never Airflow's)."""
    return postgres_url(s, LEDGER_DB_USER, secrets_["KB_PG_LEDGER_PASSWORD"])


# --- Redis ------------------------------------------------------------------------------


def start_redis(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, "redis"):
        return
    binary = shutil.which("redis-server")
    if not binary:
        raise ServiceDidNotStart("`redis-server` was not found; install Debian's `redis-server` package")
    check_ports_free(s.host, {"Redis": s.redis_port})
    folder = s.state_dir / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "redis.conf"
    # the password in a 0600 file, not on the command line where `ps` shows it
    _write_private(conf, f"bind {s.host}\nport {s.redis_port}\nrequirepass {secrets_['KB_REDIS_PASSWORD']}\n"
                         f"dir {folder}\nsave \"\"\nappendonly no\nprotected-mode yes\n")
    pid = start_process(s, "redis", [binary, str(conf)], dict(os.environ), folder)

    def ready() -> bool:
        import redis

        return bool(redis.Redis(host=s.host, port=s.redis_port, password=secrets_["KB_REDIS_PASSWORD"],
                                socket_timeout=2).ping())

    wait_until(s, "redis", pid, ready, f"answering PING on {s.host}:{s.redis_port}")


# --- Airflow with the CeleryExecutor ------------------------------------------------------


def ocr_replica_ports(s: StackSettings) -> list[int]:
    return [s.ocr_port, *s.ocr_replica_ports][: s.ocr_replicas]


def celery_env(s: StackSettings, secrets_: dict[str, str]) -> dict[str, str]:
    env = airflow_env(s, secrets_)
    airflow_pw = secrets_["KB_PG_AIRFLOW_PASSWORD"]
    ports = ocr_replica_ports(s)
    env.update({
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_url(s, POSTGRES_DB_USER, airflow_pw),
        "AIRFLOW__CELERY__BROKER_URL": f"redis://:{secrets_['KB_REDIS_PASSWORD']}@{s.host}:{s.redis_port}/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": postgres_url(s, POSTGRES_DB_USER, airflow_pw, "db+postgresql+psycopg2"),
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(s.celery_worker_concurrency),
        "AIRFLOW__API__WORKERS": "1",
        "KB_LEDGER_URL": ledger_url(s, secrets_),
    })
    # the OCR replicas: the connection's host:port is the first, extra.replicas the others
    ocr = json.loads(env["AIRFLOW_CONN_OCR_SERVICE"])
    ocr["extra"]["replicas"] = [f"http://{s.host}:{p}" for p in ports[1:]]
    env["AIRFLOW_CONN_OCR_SERVICE"] = json.dumps(ocr)
    return env


def start_airflow_celery(s: StackSettings, secrets_: dict[str, str], workers: int = 2,
                         echo: Callable[[str], None] = print) -> None:
    if part_pid(s, "airflow-scheduler"):
        return
    check_ports_free(s.host, {"Airflow API": s.airflow_port, "Airflow triggerer logs": s.airflow_trigger_log_port,
                              **{f"worker {i} logs": p for i, p in enumerate(worker_log_ports(s, workers))}})
    env = celery_env(s, secrets_)
    # the pool: the replicas' combined concurrency; migrating a new Postgres takes longer than SQLite
    slots = s.ocr_replica_concurrency * len(ocr_replica_ports(s))
    home = prepare_airflow(s, env, secrets_, slots, s.start_timeout_s * 2)
    commands = {"airflow-api": ["api-server"], "airflow-scheduler": ["scheduler"],
                "airflow-dag-processor": ["dag-processor"], "airflow-triggerer": ["triggerer"]}
    pids = {part: start_process(s, part, airflow_command(*cmd), env, home) for part, cmd in commands.items()}
    for (part, queues), log_port in zip(WORKER_QUEUES[workers].items(), worker_log_ports(s, workers)):
        worker_env = {**env, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port)}
        pids[part] = start_process(s, part, airflow_command("celery", "worker", "--queues", queues, "--concurrency",
                                              str(s.celery_worker_concurrency), "--celery-hostname", f"{part}@%h"),
                            worker_env, home)

    echo("waiting for the API server, scheduler, DAG processor and triggerer ...")
    wait_until(s, "airflow-api", pids["airflow-api"], lambda: airflow_healthy(s), f"scheduler, DAG processor, triggerer healthy on "
                                                                  f"{airflow_base_url(s)}")
    for part in WORKER_QUEUES[workers]:
        log = s.state_dir / "logs" / f"{part}.log"
        wait_until(s, part, pids[part], lambda log=log: " ready." in log.read_text(errors="replace"),
                    "Celery worker ready")
    for part, pid in pids.items():
        if not _alive(pid):
            raise ServiceDidNotStart(f"{part} exited while starting:\n{_tail(s.state_dir / 'logs' / f'{part}.log')}")


def worker_log_ports(s: StackSettings, workers: int) -> list[int]:
    return [s.airflow_worker_log_port, *s.airflow_extra_worker_log_ports][:workers]


def stop_distributed(s: StackSettings) -> dict[str, bool]:
    """Airflow's parts first (workers finish or are killed), then Redis and Postgres."""
    out = {part: stop_part(s, part) for part in (*ALL_WORKER_PARTS, *AIRFLOW_PARTS)}
    out["redis"] = stop_part(s, "redis")
    # SIGTERM is Postgres' "smart" shutdown: it waits for clients, which are gone by now
    out["postgres"] = stop_part(s, "postgres", timeout_s=max(s.stop_timeout_s, 30))
    return out


def distributed_status(s: StackSettings) -> dict[str, Any]:
    parts = ("postgres", "redis", *AIRFLOW_PARTS, *ALL_WORKER_PARTS)
    return {part: {"running": bool(pid), "pid": pid} for part in parts
            if (pid := part_pid(s, part)) or (s.state_dir / "run" / f"{part}.json").exists()}
