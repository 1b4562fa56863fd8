"""Shared fixtures: a real S3 server (weed) on loopback, an Airflow metadata DB on SQLite.

Airflow reads AIRFLOW_HOME when it is first imported, so the test home is set here,
before any test module imports Airflow.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from kb_dev.ports import free_ports, weed_port_set  # noqa: F401  (tests import them from here)

REPO = Path(__file__).resolve().parents[1]
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kb-test-airflow-"))
# one per pytest process (xdist's workers too); removed when the process ends
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
for name in list(os.environ):  # a developer's own stack settings must not leak into tests
    if name.startswith("KB_"):
        del os.environ[name]




@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One weed server for the session, with generated keys; stopped at the end."""
    from kb_dev.settings import StackSettings
    from kb_dev.stack import s3
    from kb_dev.stack.secrets import ensure_secrets

    state = tmp_path_factory.mktemp("s3-state")
    settings = StackSettings(state_dir=state, **weed_port_set())
    secrets = ensure_secrets(state)
    s3.start(settings, secrets)
    yield {
        "settings": settings,
        "endpoint": f"127.0.0.1:{settings.s3_port}",
        "access_key": secrets["KB_S3_ACCESS_KEY"],
        "secret_key": secrets["KB_S3_SECRET_KEY"],
    }
    s3.stop(settings)


@pytest.fixture(scope="session")
def airflow_db():
    done = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                          capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def embed_cache(tmp_path_factory) -> Path:
    """One folder for the embedder's ONNX export, exported once for the whole pytest run:
    every test and stack of the session, and every xdist worker (their temporary folders
    share a parent), reads it. Exporting takes 8 s of a core; each of make test's first-pass
    workers exported its own copy, at the same moment, before. The first worker exports under
    a lock; the others wait for it."""
    import fcntl

    from kb.embedding import OnnxEmbedder

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "models"
    folder.mkdir(exist_ok=True)
    with open(folder / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        OnnxEmbedder(cache_dir=folder).exported()
    return folder


@pytest.fixture
def kb_env(s3_server, embed_cache, tmp_path, monkeypatch):
    """Pipeline settings for one test: its own buckets, state folder and Qdrant store."""
    import json

    from kb.objectstore import ObjectStore

    tag = uuid.uuid4().hex[:8]
    env = {
        "KB_S3_ENDPOINT": s3_server["endpoint"],
        "KB_S3_ACCESS_KEY": s3_server["access_key"],
        "KB_S3_SECRET_KEY": s3_server["secret_key"],
        "KB_STATE_DIR": str(tmp_path / "state"),
        "KB_EMBED_CACHE_DIR": str(embed_cache),
        "KB_INBOX_BUCKET": f"inbox-{tag}",
        "KB_ARTIFACTS_BUCKET": f"artifacts-{tag}",
        "KB_MAX_PAGES_PER_RANGE": "3",
        "KB_MAX_TEXTLAYER_PAGES_PER_RANGE": "3",
        "AIRFLOW_CONN_KB_S3": json.dumps({
            "conn_type": "generic", "host": "127.0.0.1", "port": s3_server["settings"].s3_port,
            "login": s3_server["access_key"], "password": s3_server["secret_key"], "extra": {"secure": False},
        }),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    store = ObjectStore.connect(s3_server["endpoint"], s3_server["access_key"], s3_server["secret_key"])
    store.ensure_bucket(env["KB_INBOX_BUCKET"], versioned=True)
    store.ensure_bucket(env["KB_ARTIFACTS_BUCKET"])
    return {"store": store, "inbox": env["KB_INBOX_BUCKET"], "artifacts": env["KB_ARTIFACTS_BUCKET"], **env}


@contextmanager
def serve(command: str, env: dict[str, str], log_path: Path, port: int, timeout_s: float = 120,
          own_group: bool = False):
    """One of the project's HTTP services (``ocr-engine serve``, ``kb-search serve``) on
    ``port`` until the block ends, once its ``/ready`` answers 200; yields base URL, log and process.
    ``own_group``: in a process group (a session) of its own, as ``kb up`` starts it."""
    import httpx

    log = open(log_path, "w+")
    proc = subprocess.Popen([str(Path(sys.executable).parent / command), "serve"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=own_group)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{base}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, f"{command} exited while starting"
            assert time.monotonic() < deadline, f"{command} did not become ready"
            time.sleep(0.3)
        yield {"base": base, "port": port, "log": log, "proc": proc}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def start_service(s3_server, folder: Path, env_overrides: dict[str, str]):
    """`ocr-engine serve` on a free loopback port until the block ends; yields base URL and log."""
    port = free_ports(1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCR_", "KB_"))}
    env.update({
        "OCR_SERVICE_HOST": "127.0.0.1", "OCR_SERVICE_PORT": str(port),
        "OCR_SERVICE_S3_ENDPOINT": s3_server["endpoint"], "OCR_SERVICE_S3_ACCESS_KEY": s3_server["access_key"],
        "OCR_SERVICE_S3_SECRET_KEY": s3_server["secret_key"], **env_overrides,
    })
    with serve("ocr-engine", env, folder / "service.log", port, timeout_s=90) as svc:
        yield {**svc, "api_key": env.get("OCR_SERVICE_API_KEYS", "")}


@pytest.fixture(scope="session")
def postgres_ledger_url():
    """A Postgres server of the session's own (Debian's package, as the distributed stack runs
    it) on a free loopback port; the URL of its ledger database."""
    from kb_dev.settings import StackSettings
    from kb_dev.stack import postgres
    from kb_dev.stack.secrets import ensure_secrets

    # Postgres runs as the `postgres` user, which cannot enter pytest's private tmp folders
    state = Path(tempfile.mkdtemp(prefix="kb-pg-", dir="/tmp"))
    state.chmod(0o755)
    settings = StackSettings(state_dir=state, postgres_port=free_ports(1)[0])
    secrets = ensure_secrets(state)
    try:
        postgres.start(settings, secrets)
        yield postgres.ledger_url(settings, secrets)
    finally:
        postgres.stop(settings)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request, tmp_path):
    """A ledger database of each kind the ledger runs on."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("postgres_ledger_url")


@pytest.fixture(scope="session")
def embedder():
    from kb.embedding import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def live(tmp_path_factory, embed_cache):
    """The one live local stack of ``tests/live.py`` (security and observability suites)."""
    from tests.live import live_stack

    yield from live_stack(tmp_path_factory, KB_EMBED_CACHE_DIR=str(embed_cache))


# The suites on the shared live stack, in the order they run: the stack starts for the first
# of them (after every other test: no test runs beside an idle Airflow) and stops at the end
# of the session; the suites that hold back, stop or kill its parts come last. A module not
# named here runs after the named ones.
LIVE_ORDER = ("stack/test_stack.py", "security/", "observability/",
              "stack/test_corpus.py", "stack/test_faults.py")


def _live_rank(item) -> int:
    path = Path(str(item.fspath)).relative_to(REPO / "tests").as_posix()
    return next((i for i, prefix in enumerate(LIVE_ORDER) if path.startswith(prefix)), len(LIVE_ORDER))


def _on_live_stack(item) -> bool:
    return "live" in getattr(item, "fixturenames", ())


def _order(item) -> tuple[int, int]:
    if _on_live_stack(item):
        return 2, _live_rank(item)
    # The modules that start a stack of their own first (the distributed stack, the soak): in
    # make test's first pass (three workers, files sent in collection order), the minutes they
    # wait on their stacks overlap with the other tests' work.
    return (0, 0) if item.get_closest_marker("own_stack") else (1, 0)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers this adds
def pytest_collection_modifyitems(items):
    """Tests on the shared live stack run together, last, in ``LIVE_ORDER``. Every test that
    starts the local stack, or runs on the live one, is ``sequential``: ``make test`` runs
    those in a pass of their own, one at a time, after the others ran on three workers."""
    for item in items:
        if _on_live_stack(item) or item.get_closest_marker("stack"):
            item.add_marker(pytest.mark.sequential)
    # a stable sort: within a rank, tests keep the order they were collected in
    items.sort(key=_order)
