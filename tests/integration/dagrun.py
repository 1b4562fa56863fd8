"""Running kb_ingest in-process with ``dag.test()`` against the real S3 server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def load_dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag("kb_ingest")


def run_ingest(**conf: Any):
    """One run of kb_ingest; returns (dag run, the run summary the report task wrote)."""
    from kb.artifacts import ArtifactKeys
    from kb.objectstore import ObjectStore
    from kb.settings import PipelineSettings

    dag = load_dag()
    # Airflow 3.3.2's dag.test() rebuilds the DAG from its serialized form without the ids the
    # metadata DB gives deadline alerts, and a run that succeeds then fails looking its deadline
    # alert up by the serialized dict ('dict' object has no attribute 'hex'). Nothing fires a
    # deadline without a scheduler anyway; the deadline is tested on the live stack
    # (tests/observability/test_deadline.py).
    dag.deadline = None
    dr = dag.test(run_conf={"prefix": "", "force": False, **conf})
    settings = PipelineSettings()
    summary = ObjectStore.from_settings().get_json(settings.artifacts_bucket, ArtifactKeys.run_summary(dr.run_id))
    return dr, summary


def points_by_doc(key: str):
    from kb.ledger import doc_id_for
    from kb.settings import PipelineSettings
    from kb.store import open_reader

    settings = PipelineSettings()
    with open_reader(settings) as vs:
        return vs.points(doc_id_for(settings.inbox_bucket, key))
