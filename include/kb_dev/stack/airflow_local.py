"""The Airflow part of the local stack: ``airflow standalone`` (API server, scheduler, DAG
processor, triggerer; the LocalExecutor on SQLite), and what the distributed stack's Airflow
shares with it: the environment, the home with its login and the metadata DB, the pool.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from kb_airflow.names import OCR_POOL, TASK_PRELOAD_MODULE
from kb_dev import REPO_ROOT
from kb_dev.errors import ServiceDidNotStart, StackNotRunning
from kb_dev.settings import StackSettings
from kb_dev.stack import observe
from kb_dev.stack.process import (alive, check_ports_free, cmdline, environment, forget_part, part_members, part_pid,
                                  start_process, stop_parts, wait_until)
from kb_dev.stack.secrets import read_secrets, write_private

PART = "airflow"
# How long a task waits for the Execution API (the API server) before it gives up. At Airflow's
# defaults (5 s a request, 5 tries) a task fails when the API server answers nothing for about
# 40 s, as it can on a loaded 2-core machine, or in a stall (tests/stack/test_soak.py stops it
# for 45 s): the task's own work was fine. 30 s a request and 10 tries ride out minutes. Compose
# sets the same (tests/test_deployment_files.py).
EXECUTION_API_PATIENCE = {
    "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "15",
}
LOCAL_EXECUTOR_ONLY = ("AIRFLOW__SCHEDULER__MP_START_METHOD", "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD")
SCHEDULER_PART = "scheduler"  # one that restart_scheduler started beside standalone


def ports(s: StackSettings) -> dict[str, int]:
    return {"Airflow API": s.airflow_port, "Airflow worker logs": s.airflow_worker_log_port,
            "Airflow triggerer logs": s.airflow_trigger_log_port}


def env_for(s: StackSettings, secrets_: dict[str, str]) -> dict[str, str]:
    home = s.state_dir / "airflow"
    bin_dir = str(Path(sys.executable).parent)
    conn = {
        "conn_type": "generic", "host": s.host, "port": s.s3_port,
        "login": secrets_["KB_S3_ACCESS_KEY"], "password": secrets_["KB_S3_SECRET_KEY"], "extra": {"secure": False},
    }
    env = dict(os.environ)
    env.update({
        # `airflow standalone` starts its parts by running `airflow` from PATH.
        "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
        "AIRFLOW_HOME": str(home),
        # SQLite's default 5 s busy timeout is shorter than a scheduler write burst on a
        # 2-core machine; API writes then fail with "database is locked".
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db?timeout=30",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(s.airflow_parallelism),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{s.airflow_user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{s.host}:{s.airflow_port}/execution/",
        "AIRFLOW__API__HOST": s.host,
        "AIRFLOW__API__PORT": str(s.airflow_port),
        "AIRFLOW__API__BASE_URL": f"http://{s.host}:{s.airflow_port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets_["KB_AIRFLOW_JWT_SECRET"],
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(s.airflow_worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(s.airflow_trigger_log_port),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        # A short idle loop: between two mapped-task waves the scheduler otherwise
        # sleeps a full second, which is most of a text-layer range's cost.
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "30",
        # A task's supervisor (in the executor's worker) notices its task process has exited
        # only when a wait of min_heartbeat_interval (5 s by default) ends, if the exit lands
        # just after its last look: strace showed epoll_wait(..., 5000) after the SIGCHLD, and
        # about one task in three held its worker 5 s after it had finished, so the next task
        # waited for a free worker (runs of a small document: 4.8-9.7 s, 5.3-6.0 s at 1 s).
        # The cost: a heartbeat a second per running task, instead of one per 5 s.
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        **EXECUTION_API_PATIENCE,
        # The LocalExecutor's workers (and so every task process, a fork of one) start from a
        # forkserver that has imported the tasks' libraries once (kb_airflow/preload.py):
        # otherwise each task process imports them itself, 2 s of Great Expectations per index
        # task. Scheduler only: the DAG processor and the triggerer import none of them.
        "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
        "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD": TASK_PRELOAD_MODULE,
        "AIRFLOW_CONN_KB_S3": json.dumps(conn),
        "AIRFLOW_CONN_OCR_SERVICE": json.dumps({
            "conn_type": "http", "host": s.host, "port": s.ocr_port, "schema": "http",
            "password": secrets_["KB_OCR_API_KEY"], "extra": {"read_timeout_s": 900, "retries": 5},
        }),
        "KB_OCR_MODE": "service",
        # a file that lands starts a run within seconds (the asset watcher in the triggerer);
        # tests that trigger runs by hand turn it off
        "KB_WATCH_INBOX": env.get("KB_WATCH_INBOX", "true"),
        # a listing a second: a landing waits one to two intervals before its run is queued
        # (the change, then a listing that held still); a small inbox lists in milliseconds,
        # and the watcher spaces a big one's listings by what they take (compose keeps 5 s)
        "KB_WATCH_INTERVAL_S": env.get("KB_WATCH_INTERVAL_S", "1"),
        "KB_STATE_DIR": str(s.state_dir),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    if s.observe:  # StatsD to the bridge, alerts to the mail sink
        env.update(observe.airflow_env(s, secrets_))
    return env


def base_url(s: StackSettings) -> str:
    return f"http://{s.host}:{s.airflow_port}"


def command(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "airflow"), *args]


def prepare(s: StackSettings, env: dict[str, str], secrets_: dict[str, str], pool_slots: int,
                    timeout_s: float) -> Path:
    """Airflow's home, its login, its metadata database migrated and the OCR pool
    set, before any part starts (the local and the distributed stack alike); the home."""
    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    write_private(home / "passwords.json", json.dumps({s.airflow_user: secrets_["KB_AIRFLOW_PASSWORD"]}))
    for args in (["db", "migrate"], ["pools", "set", OCR_POOL, str(pool_slots), "OCR page ranges on the GPU pool"]):
        done = subprocess.run(command(*args), env=env, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise ServiceDidNotStart(f"`airflow {' '.join(args[:2])}` failed:\n{done.stderr[-2000:]}")
    return home


def _health(s: StackSettings) -> dict[str, Any]:
    return httpx.get(f"{base_url(s)}/api/v2/monitor/health", timeout=5).json()


def healthy(s: StackSettings) -> bool:
    """The API answers and reports the scheduler, DAG processor and triggerer healthy."""
    health = _health(s)
    return all(health.get(part, {}).get("status") == "healthy" for part in ("scheduler", "dag_processor", "triggerer"))


def api_status(s: StackSettings, pid: int | None) -> dict[str, Any]:
    """The API server's part (``pid``: standalone's, or the distributed stack's API part) and
    the health it reports of Airflow's components."""
    out: dict[str, Any] = {"running": bool(pid), "pid": pid, "url": base_url(s), "healthy": False}
    if pid:
        try:
            out["components"] = {k: v.get("status") for k, v in _health(s).items()}
            out["healthy"] = all(v == "healthy" for v in out["components"].values())
        except (httpx.HTTPError, ValueError) as exc:
            out["error"] = str(exc)
    return out


def start(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, PART):
        return
    check_ports_free(s.host, ports(s))
    env = env_for(s, secrets_)
    home = prepare(s, env, secrets_, s.gpu_ocr_pool_slots, s.start_timeout_s)
    pid = start_process(s, PART, command("standalone"), env, home)
    wait_until(s, PART, pid, lambda: healthy(s),
                f"API, scheduler and DAG processor healthy on {base_url(s)}")


def stop(s: StackSettings) -> bool:
    return stop_parts(s, {SCHEDULER_PART: None, PART: None})[PART]


def _is_scheduler(pid: int) -> bool:
    """The scheduler's main process: ``airflow scheduler`` (its executor's workers retitle
    themselves ``airflow worker ...``)."""
    args = cmdline(pid)
    return len(args) >= 2 and args[-1] == "scheduler" and Path(args[-2]).name == "airflow"


def scheduler_pids(s: StackSettings) -> list[int]:
    """The scheduler's main process (of ``airflow standalone``, or the one a restart started),
    without its executor's workers: what a test holds back to hold back scheduling alone."""
    return [pid for part in (PART, SCHEDULER_PART) for pid in part_members(s, part) if _is_scheduler(pid)]


def restart_scheduler(s: StackSettings, timeout_s: float = 120.0) -> int:
    """Stop Airflow's scheduler (SIGTERM, as a service manager does) and start a new one,
    recorded as part ``scheduler`` so ``down`` stops it too; the new one's pid.

    ``airflow standalone`` does not restart a component that exits, so the new scheduler
    runs beside it with the old one's environment: the stack's settings are what ``kb up``
    was given, and the caller's environment need not have them (built from the caller's, a
    restart from the test suite lost the stack's retry delay and embedder cache, so the
    task processes the new scheduler forked ran with the defaults)."""
    if not part_pid(s, PART):
        raise StackNotRunning(f"Airflow standalone is not running under {s.state_dir}; start the stack with `kb up`")
    old = scheduler_pids(s)
    env = next((e for e in map(environment, old) if e), None) or env_for(s, read_secrets(s.state_dir))
    for pid in old:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in old) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in old:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    forget_part(s, SCHEDULER_PART)
    return start_process(s, SCHEDULER_PART, command("scheduler"), env, Path(env["AIRFLOW_HOME"]))
