"""The libraries the pipeline's tasks import, imported once before any task process starts.

A task process of the LocalExecutor is a fork of one of the executor's workers, and it
imports what its task needs after the fork: Great Expectations alone takes 2 s of a core
(pandas, scipy, altair), paid by every index task, as was the OCR client's and the vector
store's share by extract, plan and retire. The local stack's scheduler starts its workers
from a forkserver that has imported this module first (``[scheduler] mp_start_method`` =
forkserver, ``mp_forkserver_preload`` = this module: ``kb_dev.stack.airflow_local``), so
every task process starts with these modules loaded, shared copy-on-write; each Celery
worker imports it before it forks its pool (``celery_config.py``). A run of a small document
on the local stack took 9.1 s before and 5.0 s after (docs/benchmarks/test-times.md).

Imports only: no client, thread or file is opened here (a fork copies the calling thread
alone). Python's forkserver skips a preload module that raises ImportError without a word,
so tests/test_dag_integrity.py imports this one on its own.
"""

import gc

# The executor's worker loop and the task supervisor: each worker starts with them.
import airflow.executors.local_executor  # noqa: F401
import airflow.sdk.execution_time.supervisor  # noqa: F401
import airflow.sdk.execution_time.task_runner  # noqa: F401
# What a task process imports to load its DAG file, before its task runs (PYTHONPROFILEIMPORTTIME
# in the task logs: 100-150 ms a task, the DAG bag's 100 ms of it).
import airflow.dag_processing.bundles.manager  # noqa: F401
import airflow.dag_processing.dagbag  # noqa: F401
import airflow.providers.standard.decorators.python  # noqa: F401
import airflow.sdk.bases.decorator  # noqa: F401
import airflow.sdk.definitions.decorators.setup_teardown  # noqa: F401
import jinja2.ext  # noqa: F401
# What the DAGs' functions import (dags/kb_ingest.py, dags/kb_review.py), and the
# libraries those import inside functions.
import great_expectations  # noqa: F401  (kb.quality.gate imports it when a gate runs)
import kb.pipeline.alerts  # noqa: F401
import kb.pipeline.extract  # noqa: F401
import kb.pipeline.index  # noqa: F401
import kb.pipeline.plan  # noqa: F401
import kb.pipeline.report  # noqa: F401
import kb.pipeline.retention  # noqa: F401
import kb.pipeline.sense  # noqa: F401
import kb.quality.gate  # noqa: F401
import kb.quality.measures  # noqa: F401
import kb.store.local  # noqa: F401  (the embedded store's writer: its log)
import kb.store.server  # noqa: F401  (a Qdrant server's writer: qdrant-client)
import kb_airflow.deadline  # noqa: F401
import kb_airflow.hooks  # noqa: F401
import kb_airflow.notifiers  # noqa: F401
import kb_airflow.triggers  # noqa: F401  (the DAG file's schedule, parsed in every task process)
import kb_airflow.usage  # noqa: F401
import onnxruntime  # noqa: F401  (kb.embedding imports it when it loads the model)
import tokenizers  # noqa: F401

# Keep the cyclic garbage collector off what was just loaded (about 480,000 objects), as
# Airflow's LocalExecutor does before it forks workers itself: a full collection in a process
# forked from here would walk them all (0.25 s measured in one such process) and write their
# collector headers, turning shared pages into private copies. A module is not garbage.
gc.freeze()
