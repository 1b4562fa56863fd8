"""The pipeline exporter's sums over run summaries, and the local StatsD bridge."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kb.observe.exporter import RunTotals, bounded
from kb.observe.statsd import StatsdSeries, listen, load_mappings, parse
from kb.settings import ExporterSettings
from tests.conftest import free_ports


def _summary(**over):
    base = {"documents_indexed": 2, "documents_quarantined": 1, "documents_failed": 0, "documents_deleted": 0,
            "documents_skipped_same_content": 0, "quarantine": [{"key": "a/secret-name.pdf", "code": "malformed_pdf"}],
            "pages_by_backend": {"text_layer": 10, "ppocr": 3},
            "documents": [{"key": "x.pdf", "status": "indexed", "searchable_seconds": 45.0},
                          {"key": "y.pdf", "status": "indexed", "searchable_seconds": 4000.0},
                          {"key": "z.pdf", "status": "quarantined", "searchable_seconds": None}],
            "ocr": {"pages": 3, "device_seconds": 36.0, "gpu_cost_per_hour": 2.0},
            "finished_at": "2026-12-01T10:00:00+00:00"}
    return {**base, **over}


def test_run_summaries_add_up_to_the_counters_and_the_last_success():
    t = RunTotals.of([_summary(), _summary(documents_failed=1, finished_at="2026-12-01T11:00:00+00:00",
                                           quarantine=[{"code": "A message with spaces, not a code"}])])
    assert t.runs == {"success": 1, "failed": 1}
    assert t.documents["indexed"] == 4 and t.documents["quarantined"] == 2 and t.documents["failed"] == 1
    # a key never becomes a label value; free text is folded into "other"
    assert t.quarantined == {"malformed_pdf": 1, "other": 1}
    assert t.pages == {"text_layer": 20, "ppocr": 6}
    assert (t.landing_count, t.landing_sum) == (4, 8090.0)
    assert t.landing_buckets[:2] == [0, 2] and t.landing_buckets[-1] == 4  # 30 s: none; 60 s: two; 86400 s: all
    assert t.ocr_device_seconds == 72.0 and t.ocr_cost == pytest.approx(2 * 36.0 / 3600 * 2.0)
    assert t.last_success == pytest.approx(1796119200.0)  # 10:00, the run that failed nothing
    assert t.last_run > t.last_success
    t.add(_summary(), sign=-1)  # a run's summary taken out again (its report ran again)
    assert t.documents["indexed"] == 2 and t.landing_count == 2 and t.runs == {"success": 0, "failed": 1}


def test_label_values_are_short_identifiers_or_other():
    assert bounded("too_many_pages") == "too_many_pages"
    assert bounded(None) == "unknown"
    assert bounded("inbox/customer-42/contract.pdf") == "other"


def test_the_bridge_maps_airflow_statsd_names_by_the_compose_mapping_file():
    series = StatsdSeries(load_mappings(ExporterSettings().statsd_mapping))
    for sample in parse("airflow.ti.finish.kb_ingest.extract.success:1|c\n"
                        "airflow.ti.finish.kb_ingest.extract.success:1|c|@0.5\n"
                        "airflow.ti.finish:1|c|#dag_id:kb_ingest\n"  # the new, tagged name: dropped
                        "airflow.pool.open_slots.gpu_ocr:2|g\nairflow.pool.open_slots.gpu_ocr:-1|g\n"
                        "airflow.dagrun.duration.success.kb_ingest:1500|ms\n"
                        "airflow.something.unmapped:1|c\nnot a statsd line\n"):
        series.record(sample)
    registry = CollectorRegistry()
    registry.register(series)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
    assert samples[("airflow_ti_finish_total", (("dag_id", "kb_ingest"), ("state", "success"),
                                                ("task_id", "extract")))] == 3.0
    assert samples[("airflow_pool_open_slots", (("pool", "gpu_ocr"),))] == 1.0
    assert samples[("airflow_dagrun_duration_seconds_sum", (("dag_id", "kb_ingest"), ("state", "success")))] == 1.5
    assert not any("unmapped" in name or name == "airflow_ti_finish" for name, _ in samples)


def test_the_bridge_receives_udp_on_loopback():
    series = StatsdSeries(load_mappings(ExporterSettings().statsd_mapping))
    stop, port = threading.Event(), free_ports(1)[0]
    listen(series, "127.0.0.1", port, stop)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"airflow.scheduler_heartbeat:1|c", ("127.0.0.1", port))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not series._counters:
            time.sleep(0.05)
        registry = CollectorRegistry()
        registry.register(series)
        assert b"airflow_scheduler_heartbeat_total 1.0" in generate_latest(registry)
    finally:
        stop.set()


def test_the_exporter_answers_metrics_and_healthz_only():
    from kb.observe.cli import serve

    registry, port = CollectorRegistry(), free_ports(1)[0]
    threading.Thread(target=serve, args=(registry, "127.0.0.1", port), daemon=True).start()
    deadline = time.monotonic() + 5
    while True:
        try:
            assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/admin").status_code == 404
