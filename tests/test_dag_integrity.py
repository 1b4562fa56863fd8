"""Every DAG imports cleanly, fast, and without touching the network or a service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, socket, sys, time
attempts = []
def refuse(self, address, *a, **k):
    attempts.append(repr(address))
    raise OSError("network access at DAG parse time")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = lambda address, *a, **k: refuse(None, address)
started = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
heavy = sorted(m for m in ("torch", "sentence_transformers", "qdrant_client", "minio", "pymupdf", "transformers") if m in sys.modules)
dag = bag.dags.get("kb_ingest")
extract = dag.get_task("extract") if dag else None
print(json.dumps({
    "errors": {k: v[-500:] for k, v in bag.import_errors.items()},
    "dag_ids": sorted(bag.dag_ids),
    "network": attempts,
    "heavy": heavy,
    "seconds": time.perf_counter() - started,
    "extract_pool": getattr(extract, "pool", None),
    "extract_queue": getattr(extract, "queue", None),
    "max_active_runs": dag.max_active_runs if dag else None,
}))
"""


def parse_dags(extra_env: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "AIRFLOW_CONN_"))}
    # Settings that point nowhere: parsing must not need them.
    env.update({"KB_S3_ENDPOINT": "203.0.113.1:9", "KB_QDRANT_URL": "http://203.0.113.1:9"}, **(extra_env or {}))
    done = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "dags")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_dag_imports_without_errors_network_or_heavy_imports():
    result = parse_dags()
    assert result["errors"] == {}
    assert "kb_ingest" in result["dag_ids"]
    assert result["network"] == []
    assert result["heavy"] == [], "DAG files must not import heavy libraries at parse time"


def test_ocr_ranges_run_in_the_gpu_pool_and_queue_and_runs_do_not_overlap():
    result = parse_dags()
    assert result["extract_pool"] == "gpu_ocr"
    assert result["extract_queue"] == "gpu"
    assert result["max_active_runs"] == 1


def test_the_schedule_is_configurable():
    probe = PROBE.replace('"max_active_runs"', '"schedule": str(dag.schedule) if dag else None, "max_active_runs"')
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env["KB_SCHEDULE"] = "0 3 * * *"
    done = subprocess.run([sys.executable, "-c", probe, str(REPO / "dags")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "0 3 * * *" in json.loads(done.stdout.strip().splitlines()[-1])["schedule"]


def test_airflows_plugin_scan_executes_no_file_of_the_kb_airflow_package():
    """Airflow runs every .py file under the plugins folder as a top-level module of its own
    (a second ``hooks``, ``notifiers``...) in every task process; plugins/.airflowignore keeps
    the package, which defines no AirflowPlugin, out of that scan. The scan's own file walk
    (airflow._shared, Airflow 3.3) with the ignore syntax Airflow is configured with."""
    from airflow._shared.module_loading import find_path_from_directory
    from airflow.configuration import conf

    plugins = REPO / "plugins"
    assert list(plugins.rglob("*.py")), "the kb_airflow package is gone: nothing to check"
    syntax = conf.get("core", "dag_ignore_file_syntax", fallback="glob")
    assert list(find_path_from_directory(str(plugins), ".airflowignore", syntax)) == []


def _task_body_imports() -> set[str]:
    """The project's modules the DAGs' task bodies import when they run (imports inside a
    function; the file's top-level imports are parse time, held light by the tests above)."""
    import ast

    found = set()
    for path in (REPO / "dags").glob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and node.module:
                        found.add(node.module)
                    elif isinstance(node, ast.Import):
                        found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] in ("kb", "kb_airflow")}


def test_the_task_preload_imports_what_the_task_bodies_and_the_gates_import():
    """The local stack's executor starts from a forkserver that imported kb_airflow.preload;
    Python's forkserver skips a preload that raises ImportError without a word (the tasks would
    be 2-3 s slower a run, nothing else), so the module is imported here on its own."""
    probe = "import json, sys; import kb_airflow.preload; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    wanted = _task_body_imports()
    assert "kb.pipeline.index" in wanted, wanted  # the walk found the task bodies
    assert wanted - loaded == set()
    # what the index task imports inside functions: the gates' library, the embedder's runtime
    assert {"great_expectations", "onnxruntime", "tokenizers", "qdrant_client"} <= loaded


def _environment_reads(source: str) -> list[str]:
    """``os.environ`` / ``os.getenv`` in a module: the reads that bypass the settings classes."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr in ("environ", "getenv"):
            found.append(f"line {node.lineno}: os.{node.attr}")
    return found


def test_dag_files_read_their_settings_through_the_settings_classes():
    assert _environment_reads('import os\nDELAY = float(os.environ.get("KB_RETRY_DELAY_S", "15"))\n')  # can fail
    reads = {path.name: _environment_reads(path.read_text()) for path in (REPO / "dags").glob("*.py")}
    assert {name: found for name, found in reads.items() if found} == {}
