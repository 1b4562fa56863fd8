"""The Postgres part of the distributed stack (Debian's ``postgresql`` package): Airflow's
metadata database and the ledger, each in a database of its own with its own role."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
from pathlib import Path

from kb_dev.errors import ServiceDidNotStart
from kb_dev.settings import StackSettings
from kb_dev.stack.process import check_ports_free, part_pid, start_process, stop_part, wait_until

PART = "postgres"
AIRFLOW_DB_USER = "airflow"
LEDGER_DB_USER = "kb_ledger"


def postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise ServiceDidNotStart(f"Postgres' `{name}` was not found; install Debian's `postgresql` package "
                                 "(`make distributed-packages` does)")
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


def start(s: StackSettings, secrets_: dict[str, str]) -> None:
    if part_pid(s, PART):
        return
    check_ports_free(s.host, {"Postgres": s.postgres_port})
    data = _prepare_postgres_dir(s)
    cmd = _as_postgres_user([postgres_bin("postgres"), "-D", str(data), "-p", str(s.postgres_port),
                             "-c", f"listen_addresses={s.host}", "-c", f"unix_socket_directories={data}",
                             # Airflow's parts and Celery's result backend hold ~40 connections at rest
                             "-c", "max_connections=200", "-c", "shared_buffers=128MB"])
    pid = start_process(s, PART, cmd, dict(os.environ), s.state_dir)

    def ready() -> bool:
        import psycopg2

        psycopg2.connect(_superuser_dsn(s), connect_timeout=2).close()
        return True

    wait_until(s, PART, pid, ready, f"accepting connections on {s.host}:{s.postgres_port}")
    _ensure_database(s, AIRFLOW_DB_USER, secrets_["KB_PG_AIRFLOW_PASSWORD"])
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


def url(s: StackSettings, user: str, password: str, driver: str = "postgresql+psycopg2") -> str:
    """A SQLAlchemy URL of the database named after ``user``, logged in as it."""
    return f"{driver}://{user}:{password}@{s.host}:{s.postgres_port}/{user}"


def ledger_url(s: StackSettings, secrets_: dict[str, str]) -> str:
    """The ledger's own database (never Airflow's)."""
    return url(s, LEDGER_DB_USER, secrets_["KB_PG_LEDGER_PASSWORD"])


def stop(s: StackSettings) -> bool:
    # SIGINT first: Postgres' "fast" shutdown (pg_ctl's default) ends its sessions, rolls back
    # and checkpoints. SIGTERM alone is its "smart" shutdown, which waits for every client to
    # leave: a test process's pooled connections held it for the whole 30 s deadline and a
    # SIGKILL (the session's teardown, measured: 30.2 s; under 1.5 s with SIGINT).
    pid = part_pid(s, PART)
    if pid:
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    return stop_part(s, PART, timeout_s=max(s.stop_timeout_s, 30))


def running(s: StackSettings) -> bool:
    return part_pid(s, PART) is not None
