"""docker-compose.yaml cannot be started here (no Docker engine); its wiring is checked instead."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def test_compose_has_every_production_part():
    services = compose()["services"]
    for name in ("postgres", "redis", "minio", "minio-init", "qdrant", "airflow-apiserver", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-triggerer", "airflow-worker", "airflow-worker-gpu",
                 "ocr-service", "search-service", "prometheus", "grafana", "alertmanager", "statsd-exporter",
                 "kb-exporter"):
        assert name in services, name


def test_the_gpu_worker_serves_the_ocr_queue_and_reserves_a_gpu():
    from kb_airflow.names import OCR_POOL, OCR_QUEUE

    gpu = compose()["services"]["airflow-worker-gpu"]
    assert f"--queues {OCR_QUEUE}" in gpu["command"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    # the pool the extract task runs in, created by name when the deployment starts
    assert f"pools set {OCR_POOL} " in compose()["services"]["airflow-init"]["command"][-1]


def test_no_secret_is_written_into_the_compose_file():
    text = (REPO / "docker-compose.yaml").read_text()
    found = re.findall(r"^\s*(\w*(?:PASSWORD|SECRET|API_KEY)\w*):\s*(\S+)", text, flags=re.MULTILINE)
    assert found
    for name, value in found:
        if name.endswith("_FILE"):  # where a file of them is (a path), not a secret
            assert not value.startswith("${") or value.endswith("}"), (name, value)
            continue
        assert value.startswith("${"), (name, value)
    assert "minioadmin" not in text


def test_published_ports_bind_to_loopback_only():
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_the_ocr_service_runs_on_a_gpu_and_airflow_reaches_it_through_its_connection():
    services = compose()["services"]
    ocr = services["ocr-service"]
    assert ocr["entrypoint"] == ["ocr-engine", "serve"]
    assert ocr["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    env = services["airflow-scheduler"]["environment"]
    assert '"host": "ocr-service"' in env["AIRFLOW_CONN_OCR_SERVICE"] and env["KB_OCR_MODE"] == "service"
    for template in ("dev.env", "test.env", "prod.env"):
        assert (REPO / "include" / "config" / template).is_file()


def test_the_search_service_reads_the_qdrant_server_and_has_its_own_key():
    search = compose()["services"]["search-service"]
    assert search["entrypoint"] == ["kb-search", "serve"]
    env = search["environment"]
    assert env["KB_QDRANT_URL"] == "http://qdrant:6333" and env["KB_SEARCH_API_KEY"].startswith("${")
    assert "/ready" in " ".join(search["healthcheck"]["test"])


AIRFLOW_SERVICES = ("airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer", "airflow-worker", "airflow-worker-gpu")
POSTGRES_INIT = REPO / "include" / "config" / "postgres-init"
AIRFLOW_DB_INIT = POSTGRES_INIT / "00-airflow-db.sh"
LEDGER_INIT = POSTGRES_INIT / "01-kb-ledger.sh"
SEARCH_ROLE_INIT = POSTGRES_INIT / "02-kb-search-role.sh"


def test_the_ledger_has_its_own_database_and_role_apart_from_airflows():
    services = compose()["services"]
    postgres = services["postgres"]
    assert "./include/config/postgres-init:/docker-entrypoint-initdb.d:ro" in postgres["volumes"]
    assert postgres["environment"]["KB_LEDGER_DB_PASSWORD"] == "${KB_LEDGER_DB_PASSWORD:?set in .env}"
    for script in (AIRFLOW_DB_INIT, LEDGER_INIT, SEARCH_ROLE_INIT):
        assert script.is_file() and script.stat().st_mode & 0o111, script  # the entrypoint runs executables
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["KB_LEDGER_URL"] == \
            "postgresql+psycopg2://kb_ledger:${KB_LEDGER_DB_PASSWORD:?set in .env}@postgres/kb_ledger", name
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres/airflow"), name


def test_sensing_is_event_driven_with_the_cron_schedule_as_reconciliation():
    for name in AIRFLOW_SERVICES:
        env = compose()["services"][name]["environment"]
        assert env["KB_WATCH_INBOX"] == "true" and float(env["KB_WATCH_INTERVAL_S"]) > 0, name
        assert env["KB_SCHEDULE"], name


def test_every_airflow_service_and_the_local_stack_look_for_a_finished_task_each_second(tmp_path):
    """At Airflow's default (5 s) a task's supervisor can hold its worker slot that long after
    the task has ended (include/kb_dev/stack/airflow_local.py says how it was seen)."""
    from kb_dev.settings import StackSettings
    from kb_dev.stack import airflow_local

    key = "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"
    for name in AIRFLOW_SERVICES:
        assert compose()["services"][name]["environment"][key] == "1", name
    local = airflow_local.env_for(StackSettings(state_dir=tmp_path, observe=False),
                                  {"KB_S3_ACCESS_KEY": "a", "KB_S3_SECRET_KEY": "s", "KB_OCR_API_KEY": "o",
                                   "KB_AIRFLOW_JWT_SECRET": "j"})
    assert local[key] == "1"


def test_tasks_of_compose_and_of_the_local_stack_wait_as_long_for_a_stalled_api_server(tmp_path):
    from kb_dev.settings import StackSettings
    from kb_dev.stack import airflow_local

    local = airflow_local.env_for(StackSettings(state_dir=tmp_path, observe=False),
                                  {"KB_S3_ACCESS_KEY": "a", "KB_S3_SECRET_KEY": "s", "KB_OCR_API_KEY": "o",
                                   "KB_AIRFLOW_JWT_SECRET": "j"})
    for key, value in airflow_local.EXECUTION_API_PATIENCE.items():
        assert local[key] == value, key
        for name in AIRFLOW_SERVICES:
            assert compose()["services"][name]["environment"][key] == value, (name, key)


def test_the_celery_workers_of_compose_and_of_the_distributed_stack_preload_the_task_libraries():
    """Each Celery worker imports kb_airflow.preload before it forks its pool; the distributed
    stack's test checks the running workers, this one that compose sets the same."""
    import importlib

    from kb_dev.stack import airflow_celery

    key = "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"
    for name in AIRFLOW_SERVICES:
        assert compose()["services"][name]["environment"][key] == airflow_celery.CELERY_CONFIG_OPTIONS, name
    module, _, name = airflow_celery.CELERY_CONFIG_OPTIONS.rpartition(".")
    assert getattr(importlib.import_module(module), name)["imports"] == ("kb_airflow.preload",)


def _postgres_bin(name: str) -> str | None:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    return str(found[-1]) if found else shutil.which(name)


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture
def scratch_postgres():
    """A throwaway Postgres on a Unix socket only (no TCP port), with password auth, the way
    the image's init phase sees it: superuser `postgres`, database `postgres`."""
    initdb, pg_ctl = _postgres_bin("initdb"), _postgres_bin("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("Debian's postgresql package is not installed")
    root = Path(tempfile.mkdtemp(prefix="kb-ledger-init-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    (root / "pw").write_text("superuser-pw\n")
    (root / "pw").chmod(0o644)
    data = root / "data"
    try:
        subprocess.run(_as_postgres([initdb, "-D", str(data), "-U", "postgres", "--pwfile", str(root / "pw"),
                                     "--auth=scram-sha-256", "--no-instructions"]),
                       check=True, capture_output=True, timeout=120)
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60", "-o",
                                     f"-c listen_addresses='' -c unix_socket_directories={root}", "start"]),
                       check=True, capture_output=True, timeout=90)
        try:
            yield root
        finally:
            subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
                           capture_output=True, timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _psql(socket_dir: Path, user: str, password: str, sql: str, db: str = "kb_ledger") -> subprocess.CompletedProcess:
    return subprocess.run(["psql", "-h", str(socket_dir), "-U", user, "-d", db, "-XAtq",
                           "-v", "ON_ERROR_STOP=1", "-c", sql],
                          capture_output=True, text=True, timeout=30, env={**os.environ, "PGPASSWORD": password})


def test_the_ledger_init_script_makes_a_role_that_owns_its_database_and_reruns_as_a_rotation(scratch_postgres):
    def init(password: str) -> None:
        _run_init(scratch_postgres, LEDGER_INIT, KB_LEDGER_DB_PASSWORD=password)

    init("first-Pw_1'; DROP ROLE postgres; --")  # quoted by psql, never spliced into the SQL
    made = _psql(scratch_postgres, "kb_ledger", "first-Pw_1'; DROP ROLE postgres; --",
                 "CREATE TABLE probe (x int); SELECT current_user, pg_get_userbyid(datdba) "
                 "FROM pg_database WHERE datname = current_database()")
    assert made.returncode == 0, made.stderr
    assert made.stdout.split() == ["kb_ledger|kb_ledger"]
    assert _psql(scratch_postgres, "kb_ledger", "wrong", "SELECT 1").returncode != 0

    init("second-pw")  # the role and database exist: only the password changes
    assert _psql(scratch_postgres, "kb_ledger", "second-pw", "SELECT count(*) FROM probe").stdout.strip() == "0"
    assert _psql(scratch_postgres, "kb_ledger", "first-Pw_1'; DROP ROLE postgres; --", "SELECT 1").returncode != 0


def _run_init(socket_dir: Path, script: Path, check: bool = True, **passwords: str) -> subprocess.CompletedProcess:
    """One init script as the postgres image runs it: as the superuser, on the Unix socket."""
    env = {**os.environ, "PGHOST": str(socket_dir), "PGPASSWORD": "superuser-pw", "POSTGRES_USER": "postgres",
           "POSTGRES_DB": "postgres", **passwords}
    return subprocess.run(["bash", str(script)], check=check, capture_output=True, text=True, env=env, timeout=60)


def test_each_database_gets_its_own_role_and_the_search_role_only_reads_the_ledger(scratch_postgres):
    from kb.errors import LedgerUnavailable
    from kb.ledger import LedgerEntry, Status, doc_id_for
    from kb.ledger_db import Ledger

    pw = {"AIRFLOW_DB_PASSWORD": "airflow-pw", "KB_LEDGER_DB_PASSWORD": "ledger-pw", "KB_SEARCH_DB_PASSWORD": "search-pw"}
    for script in (AIRFLOW_DB_INIT, LEDGER_INIT, SEARCH_ROLE_INIT):  # the image runs them in name order
        _run_init(scratch_postgres, script, **pw)

    # Airflow owns its metadata database, is no superuser, and cannot reach the ledger
    made = _psql(scratch_postgres, "airflow", "airflow-pw", "CREATE TABLE probe (x int); "
                 "SELECT rolsuper FROM pg_roles WHERE rolname = current_user", db="airflow")
    assert made.returncode == 0 and made.stdout.split() == ["f"], made.stderr
    assert _psql(scratch_postgres, "airflow", "airflow-pw", "SELECT 1").returncode != 0
    for role, password in (("kb_ledger", "ledger-pw"), ("kb_search", "search-pw")):
        assert _psql(scratch_postgres, role, password, "SELECT 1", db="airflow").returncode != 0, role

    # the pipeline writes the ledger; the search service reads what it wrote, and cannot write
    def url(role: str, password: str) -> str:
        return f"postgresql+psycopg2://{role}:{password}@/kb_ledger?host={scratch_postgres}"

    doc_id = doc_id_for("inbox", "a.pdf")
    Ledger(url("kb_ledger", "ledger-pw")).put(
        LedgerEntry(doc_id, "inbox", "a.pdf", "etag-1", "v1", 10, Status.INDEXED))
    reader = Ledger(url("kb_search", "search-pw"))
    assert reader.get(doc_id).etag == "etag-1"
    with pytest.raises(LedgerUnavailable):
        reader.put(LedgerEntry(doc_id, "inbox", "a.pdf", "etag-2", "v2", 10, Status.INDEXED))
    assert Ledger(url("kb_ledger", "ledger-pw")).get(doc_id).etag == "etag-1"


def test_the_airflow_role_script_refuses_a_volume_whose_airflow_role_is_a_superuser(scratch_postgres):
    # a volume made before the roles were split: `airflow` was the image's superuser
    done = subprocess.run(["psql", "-h", str(scratch_postgres), "-U", "postgres", "-d", "postgres", "-Xq", "-c",
                           "CREATE ROLE airflow LOGIN SUPERUSER"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PGPASSWORD": "superuser-pw"})
    assert done.returncode == 0, done.stderr
    refused = _run_init(scratch_postgres, AIRFLOW_DB_INIT, check=False, AIRFLOW_DB_PASSWORD="airflow-pw")
    assert refused.returncode != 0 and "docs/DEPLOY.md" in refused.stderr


FAKE_MC = """#!/bin/sh
# mc as minio-init calls it: records each call; an attached policy cannot be attached twice
echo "$*" >> "$MC_LOG"
case "$1 $2 $3" in
  "admin policy attach")
    if [ -e "$MC_STATE/$7.$5" ]; then echo "policy already attached" >&2; exit 1; fi
    : > "$MC_STATE/$7.$5" ;;
  "admin user info")
    echo "AccessKey: $5"; for f in "$MC_STATE/$5".*; do [ -e "$f" ] && echo "PolicyName: ${f##*.}"; done ;;
esac
exit 0
"""


def test_minio_init_gives_each_service_its_own_user_and_policy_and_reruns(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir(), state.mkdir()
    (bin_dir / "mc").write_text(FAKE_MC)
    (bin_dir / "mc").chmod(0o755)
    keys = {"MINIO_ROOT_USER": "root-user", "MINIO_ROOT_PASSWORD": "root-secret-value",
            "AIRFLOW_S3_ACCESS_KEY": "airflow-ak", "AIRFLOW_S3_SECRET_KEY": "airflow-secret-value",
            "OCR_S3_ACCESS_KEY": "ocr-ak", "OCR_S3_SECRET_KEY": "ocr-secret-value",
            "SEARCH_S3_ACCESS_KEY": "search-ak", "SEARCH_S3_SECRET_KEY": "search-secret-value",
            "EXPORTER_S3_ACCESS_KEY": "exporter-ak", "EXPORTER_S3_SECRET_KEY": "exporter-secret-value"}
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "MC_LOG": str(tmp_path / "calls"), "MC_STATE": str(state), **keys}
    script = REPO / "include" / "config" / "minio-init" / "init.sh"
    for _ in range(2):  # the second run finds every policy attached already
        done = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert not any(v in done.stdout + done.stderr for k, v in keys.items() if "SECRET" in k or "PASSWORD" in k)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "mb --ignore-existing kb/inbox kb/kb-artifacts" in calls and "version enable kb/inbox" in calls
    for user, policy in (("airflow-ak", "kb-pipeline"), ("ocr-ak", "kb-ocr-read"), ("search-ak", "kb-search-read"),
                         ("exporter-ak", "kb-exporter-read")):
        assert f"admin policy create kb {policy} {script.parent}/{policy}.json" in calls
        assert (script.parent / f"{policy}.json").is_file()
        assert sorted(p.name for p in state.glob(f"{user}.*")) == [f"{user}.{policy}"]  # that policy, only


def test_the_ledger_init_script_refuses_to_run_without_a_password():
    env = {k: v for k, v in os.environ.items() if k != "KB_LEDGER_DB_PASSWORD"}
    done = subprocess.run(["bash", str(LEDGER_INIT)], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode != 0 and "KB_LEDGER_DB_PASSWORD" in done.stderr


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_the_ocr_service_is_given_time_to_drain_before_it_is_killed():
    prod = dict(line.split("=", 1) for line in (REPO / "include/config/prod.env").read_text().splitlines()
                if line and not line.startswith("#"))
    grace = _seconds(compose()["services"]["ocr-service"]["stop_grace_period"])
    assert grace > float(prod["OCR_SERVICE_DRAIN_TIMEOUT_S"])


def test_the_deployment_guide_is_linked_and_the_files_it_names_exist():
    assert "docs/DEPLOY.md" in (REPO / "README.md").read_text()
    guide = (REPO / "docs" / "DEPLOY.md").read_text()
    named = set(re.findall(r"`((?:docs|include|tests|ocr_engine|plugins|dags)/[\w./-]+\.(?:md|json|py|sh|env|yml))`", guide))
    assert len(named) >= 8
    for path in named:
        assert (REPO / path).is_file(), path
    for image in {s["image"] for s in compose()["services"].values() if "image" in s}:
        assert image in guide, f"docs/DEPLOY.md does not name the image {image}"


def test_compose_runs_airflow_with_named_users_and_only_reviewers_answer_reviews():
    env = compose()["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "${AIRFLOW_USERS:?set in .env}"  # no shared admin
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == "/opt/airflow/passwords.json"
    assert env["KB_REVIEW_REVIEWERS"] == "${KB_REVIEW_REVIEWERS:?set in .env}"
    for name in AIRFLOW_SERVICES:
        service = compose()["services"][name]
        assert "${AIRFLOW_LOGINS_FILE:?set in .env}:/opt/airflow/passwords.json:ro" in service["volumes"], name
    example = dict(line.split("=", 1) for line in (REPO / ".env.example").read_text().splitlines()
                   if line and not line.startswith("#") and "=" in line)
    users = dict(pair.split(":") for pair in example["AIRFLOW_USERS"].split(","))
    reviewers = example["KB_REVIEW_REVIEWERS"].split(",")
    assert reviewers and all(users.get(r) in ("user", "op", "admin") for r in reviewers), (users, reviewers)


def test_the_review_task_is_answered_only_by_the_configured_reviewers(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from kb_airflow.names import REVIEW_DAG_ID, REVIEW_DECIDE_TASK

    monkeypatch.setenv("KB_REVIEW_REVIEWERS", "ana, ben")
    monkeypatch.setenv("KB_REVIEW_ANSWER_TIMEOUT_S", "3600")
    bag = DagBag(dag_folder=str(REPO / "dags" / "kb_review.py"))
    assert not bag.import_errors, bag.import_errors
    task = bag.dags[REVIEW_DAG_ID].get_task(REVIEW_DECIDE_TASK)
    assert [u["id"] for u in task.assigned_users] == ["ana", "ben"]
    assert task.response_timeout.total_seconds() == 3600
    monkeypatch.setenv("KB_REVIEW_REVIEWERS", "")
    bag = DagBag(dag_folder=str(REPO / "dags" / "kb_review.py"))
    assert bag.dags[REVIEW_DAG_ID].get_task(REVIEW_DECIDE_TASK).assigned_users is None
