"""kb_ingest's schedule: the cron alone, or with KB_WATCH_INBOX also the inbox asset and its
watcher; and the watcher's trigger survives the trip through the metadata database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Parses the DAG folder as the DAG processor does, then reads the schedule back from the
# serialized DAG (what the scheduler and the DAG processor's watcher bookkeeping use).
PROBE = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.encoders import encode_trigger
from airflow.serialization.serialized_objects import LazyDeserializedDAG
bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags.get("kb_ingest")
timetable = LazyDeserializedDAG.from_dag(dag).timetable if dag else None
inner = getattr(timetable, "timetable", timetable)  # AssetOrTimeSchedule wraps the cron's timetable
cron = inner.serialize() if type(inner).__name__ == "CronTriggerTimetable" else None
assets = []
if hasattr(timetable, "asset_condition"):
    for key, asset in timetable.asset_condition.iter_assets():
        watchers = [{"name": w.name, **encode_trigger(w.trigger)} for w in asset.watchers]
        assets.append({"uri": key.uri, "watchers": watchers})
print(json.dumps({
    "errors": {k: v[-500:] for k, v in bag.import_errors.items()},
    "timetable": type(timetable).__name__,
    "cron": cron,
    "assets": assets,
    "heavy": sorted(m for m in ("minio", "kb.objectstore") if m in sys.modules),
}))
"""


def parse(env_overrides: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "AIRFLOW_CONN_"))}
    env.update(env_overrides)
    done = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "dags")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    return result


def test_without_watching_the_schedule_is_the_cron_alone():
    result = parse({})
    assert (result["timetable"], result["cron"]["expression"], result["assets"]) == (
        "CronTriggerTimetable", "*/5 * * * *", [])
    assert parse({"KB_SCHEDULE": ""})["timetable"] == "NullTimetable"  # manual runs only


def test_watching_adds_the_inbox_asset_whose_watcher_runs_our_trigger_and_keeps_the_cron():
    result = parse({"KB_WATCH_INBOX": "true", "KB_WATCH_INTERVAL_S": "2", "KB_INBOX_BUCKET": "box",
                    "KB_SCHEDULE": "0 3 * * *"})
    assert result["timetable"] == "AssetOrTimeSchedule"
    # the same cron timetable (expression, time zone, ...) as without watching
    assert result["cron"] == parse({"KB_SCHEDULE": "0 3 * * *"})["cron"]
    assert result["cron"]["expression"] == "0 3 * * *"
    assert result["assets"] == [{"uri": "s3://box/", "watchers": [{
        "name": "kb_inbox_watcher", "classpath": "kb_airflow.triggers.InboxChangeTrigger",
        "kwargs": {"bucket": "box", "interval_s": 2.0, "max_delay_s": 60.0, "s3_conn_id": "kb_s3"},
    }]}]
    # the DAG file builds the trigger at parse time: the S3 client stays out of it
    assert result["heavy"] == []


def test_watching_without_a_cron_runs_on_the_asset_alone():
    result = parse({"KB_WATCH_INBOX": "true", "KB_SCHEDULE": ""})
    assert result["timetable"] == "AssetTriggeredTimetable"
    assert [a["uri"] for a in result["assets"]] == ["s3://inbox/"]


def test_the_trigger_comes_back_from_the_metadata_database_as_it_went_in(monkeypatch):
    """What the DAG processor stores and the triggerer rebuilds: the kwargs encrypted with a
    real Fernet key, then decoded and passed to the class named by the classpath. Its hash
    is the same after the trip, so a re-parse keeps the running trigger instead of replacing it."""
    from cryptography.fernet import Fernet

    from airflow.models.trigger import Trigger
    from airflow.serialization.decoders import smart_decode_trigger_kwargs
    from airflow.serialization.encoders import encode_trigger
    from airflow.triggers.base import BaseEventTrigger
    from airflow._shared.module_loading import import_string  # what the triggerer imports a classpath with

    from kb_airflow.triggers import InboxChangeTrigger

    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", Fernet.generate_key().decode())
    trigger = InboxChangeTrigger("inbox", interval_s=5, max_delay_s=30)
    encoded = encode_trigger(trigger)
    row = Trigger(classpath=encoded["classpath"], kwargs=encoded["kwargs"])
    assert "inbox" not in row.encrypted_kwargs  # really encrypted

    kwargs = {k: smart_decode_trigger_kwargs(v) for k, v in row.kwargs.items()}
    rebuilt = import_string(row.classpath)(**kwargs)
    assert type(rebuilt) is InboxChangeTrigger
    assert rebuilt.serialize() == trigger.serialize()
    assert BaseEventTrigger.hash(row.classpath, row.kwargs) == BaseEventTrigger.hash(encoded["classpath"],
                                                                                     encoded["kwargs"])
    # configuration only: the credentials are looked up from the connection at run time
    assert set(kwargs) == {"bucket", "interval_s", "max_delay_s", "s3_conn_id"}


def test_watch_settings_are_off_unless_enabled(monkeypatch):
    from pydantic import ValidationError

    from kb.settings import WatchSettings

    assert WatchSettings().inbox is False
    monkeypatch.setenv("KB_WATCH_INTERVAL_S", "0")
    with pytest.raises(ValidationError):
        WatchSettings()
