"""Airflow on the CeleryExecutor, the distributed stack's Airflow (``kb up --distributed``).

The production topology on one machine: the scheduler, API server, DAG processor and
triggerer as processes of their own, on Postgres (``postgres``) with Redis as the broker
(``redis_server``); a Celery worker on the default queue and one on the OCR queue; the OCR
replicas (``ocr``), whose combined concurrency is the OCR pool's slots. Every part is a
process group recorded like the local stack's, so ``kb down`` stops them the same way.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from kb_airflow.names import OCR_QUEUE
from kb_dev.settings import StackSettings
from kb_dev.stack import airflow_local
from kb_dev.stack import postgres, redis_server
from kb_dev.stack.ocr import Replica
from kb_dev.stack.process import (alive, check_ports_free, exited_while_starting, log_path, part_pid, part_states,
                                  start_process, stop_parts, wait_until)

API_PART = "airflow-api"
CELERY_CONFIG_OPTIONS = "kb_airflow.celery_config.CELERY_CONFIG"  # imported by Airflow's Celery app, not here
# Airflow's own parts, each a process of its own, and the command that runs it
AIRFLOW_PARTS = {API_PART: ["api-server"], "airflow-scheduler": ["scheduler"],
                 "airflow-dag-processor": ["dag-processor"], "airflow-triggerer": ["triggerer"]}
# Celery workers: the queue(s) each consumes. One worker consumes both queues when the
# stack is started with --workers 1 (what the throughput benchmark compares with).
WORKER_QUEUES = {1: {"worker": f"default,{OCR_QUEUE}"}, 2: {"worker-default": "default", f"worker-{OCR_QUEUE}": OCR_QUEUE}}
ALL_WORKER_PARTS = tuple(dict.fromkeys(part for queues in WORKER_QUEUES.values() for part in queues))


def env_for(s: StackSettings, secrets_: dict[str, str], replicas: list[Replica]) -> dict[str, str]:
    env = airflow_local.env_for(s, secrets_)
    # No LocalExecutor workers here to start from a preloaded forkserver: Celery's run the tasks.
    for name in airflow_local.LOCAL_EXECUTOR_ONLY:
        del env[name]
    airflow_pw = secrets_["KB_PG_AIRFLOW_PASSWORD"]
    env.update({
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url(s, postgres.AIRFLOW_DB_USER, airflow_pw),
        "AIRFLOW__CELERY__BROKER_URL": redis_server.url(s, secrets_),
        "AIRFLOW__CELERY__RESULT_BACKEND": postgres.url(s, postgres.AIRFLOW_DB_USER, airflow_pw, "db+postgresql+psycopg2"),
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(s.celery_worker_concurrency),
        # each Celery worker imports the tasks' libraries before it forks its pool
        "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": CELERY_CONFIG_OPTIONS,
        "AIRFLOW__API__WORKERS": "1",
        "KB_LEDGER_URL": postgres.ledger_url(s, secrets_),
    })
    # the OCR replicas: the connection's host:port is the first, extra.replicas the others
    ocr = json.loads(env["AIRFLOW_CONN_OCR_SERVICE"])
    ocr["extra"]["replicas"] = [r.url for r in replicas[1:]]
    env["AIRFLOW_CONN_OCR_SERVICE"] = json.dumps(ocr)
    return env


def worker_log_ports(s: StackSettings, workers: int) -> list[int]:
    return [s.airflow_worker_log_port, *s.airflow_extra_worker_log_ports][:workers]


def start(s: StackSettings, secrets_: dict[str, str], replicas: list[Replica], workers: int = 2,
          echo: Callable[[str], None] = print) -> None:
    if part_pid(s, "airflow-scheduler"):
        return
    check_ports_free(s.host, {"Airflow API": s.airflow_port, "Airflow triggerer logs": s.airflow_trigger_log_port,
                              **{f"worker {i} logs": p for i, p in enumerate(worker_log_ports(s, workers))}})
    env = env_for(s, secrets_, replicas)
    # the pool: the replicas' combined concurrency; migrating a new Postgres takes longer than SQLite
    slots = s.ocr_replica_concurrency * len(replicas)
    home = airflow_local.prepare(s, env, secrets_, slots, s.start_timeout_s * 2)
    pids = {part: start_process(s, part, airflow_local.command(*cmd), env, home) for part, cmd in AIRFLOW_PARTS.items()}
    for (part, queues), log_port in zip(WORKER_QUEUES[workers].items(), worker_log_ports(s, workers)):
        worker_env = {**env, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port)}
        cmd = airflow_local.command("celery", "worker", "--queues", queues, "--concurrency",
                                    str(s.celery_worker_concurrency), "--celery-hostname", f"{part}@%h")
        pids[part] = start_process(s, part, cmd, worker_env, home)

    echo("waiting for the API server, scheduler, DAG processor and triggerer ...")
    wait_until(s, API_PART, pids[API_PART], lambda: airflow_local.healthy(s),
               f"scheduler, DAG processor, triggerer healthy on {airflow_local.base_url(s)}")
    for part in WORKER_QUEUES[workers]:
        log = log_path(s, part)
        wait_until(s, part, pids[part], lambda log=log: " ready." in log.read_text(errors="replace"),
                   "Celery worker ready")
    for part, pid in pids.items():
        if not alive(pid):
            raise exited_while_starting(s, part)


def stop(s: StackSettings) -> dict[str, bool]:
    """Workers first (they finish or are killed), then Airflow's own parts."""
    workers = stop_parts(s, dict.fromkeys(ALL_WORKER_PARTS))
    return {**workers, **stop_parts(s, dict.fromkeys(AIRFLOW_PARTS))}


def status(s: StackSettings) -> dict[str, Any]:
    return part_states(s, (*AIRFLOW_PARTS, *ALL_WORKER_PARTS))
