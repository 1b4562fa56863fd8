"""`python -m kb_dev.bench.ocr admission` runs the engine's own device_capacity; on a CPU it says it measured nothing."""

from __future__ import annotations

import json

from kb_dev.bench.ocr import main
from ocr_engine.settings import EngineSettings


def test_on_a_cpu_the_admission_bench_reports_the_configured_budget_as_not_measured(capsys):
    assert main(["admission", "--device", "cpu", "--layers", "1", "--vocab", "64", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["measured"] is False
    assert report["capacity_bytes"] == EngineSettings().cpu_kv_budget_bytes
    assert report["how"] == {"cpu_kv_budget_bytes": report["capacity_bytes"]}
    # the longest range from the engine's TokenBudget: floor((32,768 - 10) / (273 + 1,200)) = 22 pages
    assert report["longest_range_pages"] == 22
    assert report["longest_range_kv_bytes"] == (10 + 22 * 273 + 128) * report["bytes_per_token"]
    assert report["capacity_sequences_longest_range"] == report["capacity_bytes"] // report["longest_range_kv_bytes"]
    assert "benchmark decoder" in report["model"]

