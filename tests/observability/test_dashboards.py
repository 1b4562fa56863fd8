"""The Grafana dashboards as code (kb_dev.observe.dashboards): the committed JSON is what the module
generates, every panel queries the provisioned Prometheus, every query is PromQL that promtool
parses, and every metric it reads is in issue 22's catalogue or a recording rule in the repo.

Grafana itself does not run here (no Debian package); the live test runs each query against a
Prometheus scraping a real stack (``kb_dev.observe.dashboards.all_queries``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kb_dev.observe import dashboards
from kb_dev.observe.dashboards import DASHBOARDS, DATASOURCE_UID, all_queries, concrete, panel_queries, write_all

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "include/config/grafana/dashboards"
RULES = ROOT / "include/config/prometheus/rules"
PROVISIONING = ROOT / "include/config/grafana/provisioning"

# Issue 22's metric catalogue, as Prometheus stores the series (a histogram's _bucket/_sum/_count,
# a counter's _total). The services' names are checked against their registries below; the
# exporter's (job kb-exporter) and Airflow's (job airflow, include/config/statsd-mapping.yml) are
# the contract their owners build to.
OCR_SERVICE = {
    "ocr_requests_total", "ocr_request_seconds_bucket", "ocr_request_seconds_sum", "ocr_request_seconds_count",
    "ocr_pages_total", "ocr_admission_queue_depth", "ocr_requests_in_flight", "ocr_device_seconds_total",
    "ocr_cost_per_1000_pages", "ocr_kv_waiting_requests", "ocr_engine_info",
}
SEARCH_SERVICE = {
    "kb_search_requests_total", "kb_search_query_seconds_bucket", "kb_search_query_seconds_sum",
    "kb_search_query_seconds_count", "kb_search_errors_total", "kb_search_store_lag_rows",
}
EXPORTER = {
    "kb_pipeline_documents_total", "kb_pipeline_quarantined_total", "kb_pipeline_pages_total",
    "kb_pipeline_landing_to_searchable_seconds_bucket", "kb_pipeline_landing_to_searchable_seconds_sum",
    "kb_pipeline_landing_to_searchable_seconds_count", "kb_pipeline_ocr_pages_total",
    "kb_pipeline_ocr_device_seconds_total", "kb_pipeline_ocr_cost_total", "kb_pipeline_runs_total",
    "kb_pipeline_last_success_timestamp_seconds", "kb_pipeline_last_run_timestamp_seconds",
    "kb_inbox_pending_documents", "kb_ledger_documents", "kb_review_pending_documents",
    "kb_reread_pending_documents",
}
AIRFLOW = {
    "airflow_dagrun_duration_seconds_sum", "airflow_dagrun_duration_seconds_count", "airflow_ti_finish_total",
    "airflow_pool_open_slots", "airflow_pool_queued_slots", "airflow_pool_running_slots",
    "airflow_scheduler_heartbeat_total", "airflow_dag_processing_import_errors",
}
PROMETHEUS = {"up"}  # written by Prometheus itself for every target
CATALOGUE = OCR_SERVICE | SEARCH_SERVICE | EXPORTER | AIRFLOW | PROMETHEUS

# Words in an expr that are not metric names: binary operators and aggregation modifiers (label
# lists after by/without/on/ignoring/group_* are removed before identifiers are read).
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
             "offset", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])[A-Za-z_:][\w:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expr reads: identifiers that are not a function (followed by ``(``),
    a keyword, a label (inside ``{...}`` or a by/without/on list) or a duration (``[...]``)."""
    s = _STRING.sub('""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = _LABEL_LIST.sub(" ", s)
    names = set()
    for m in _IDENTIFIER.finditer(s):
        if s[m.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if m.group() not in _KEYWORDS:
            names.add(m.group())
    return names


def recording_rules() -> set[str]:
    names = set()
    for path in sorted(RULES.glob("*.yml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            names |= {rule["record"] for rule in group.get("rules", []) if "record" in rule}
    return names


def _json_panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _generated() -> dict[str, dict]:
    return {slug: json.loads(dashboards.render_json(d)) for slug, d in DASHBOARDS.items()}


def _promtool_check(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("Debian's prometheus package (promtool) is not installed: make prometheus-packages")
    rules = {"groups": [{"name": "dashboard-queries",
                         "rules": [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_the_committed_json_is_what_the_module_generates(tmp_path):
    written = write_all(tmp_path)
    assert sorted(p.name for p in COMMITTED.glob("*.json")) == sorted(p.name for p in written), (
        "stale or missing dashboard files: python -m kb_dev.observe.dashboards include/config/grafana/dashboards")
    for path in written:
        assert (COMMITTED / path.name).read_text() == path.read_text(), (
            f"{path.name} differs from the generated one: edit kb_dev/observe/dashboards.py, then "
            "python -m kb_dev.observe.dashboards include/config/grafana/dashboards")


def test_the_ingestion_and_serving_dashboards_have_stable_unique_ids():
    generated = _generated()
    assert {d["title"] for d in generated.values()} >= {"KB ingestion", "KB serving"}
    assert [d["uid"] for d in generated.values()] == list(generated)  # uid is the file's slug
    for d in generated.values():
        ids = [p["id"] for p in _json_panels(d)]
        assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), d["title"]
        assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in _json_panels(d)), d["title"]
    # generating twice gives the same bytes (no ids or timestamps drawn at generation)
    assert {s: dashboards.render_json(d) for s, d in DASHBOARDS.items()} == {
        s: dashboards.render_json(d) for s, d in DASHBOARDS.items()}


def test_every_panel_queries_the_provisioned_prometheus():
    provisioned = yaml.safe_load((PROVISIONING / "datasources/prometheus.yml").read_text())["datasources"]
    assert [d["uid"] for d in provisioned] == [DATASOURCE_UID]
    provider = yaml.safe_load((PROVISIONING / "dashboards/kb.yml").read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"]
    for d in _generated().values():
        for panel in _json_panels(d):
            if panel["type"] == "row":
                continue
            assert panel["targets"], f"{d['title']} / {panel['title']}: no query"
            for target in panel["targets"]:
                assert target["expr"].strip(), f"{d['title']} / {panel['title']}"
                assert target["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}
            assert panel["datasource"]["uid"] == DATASOURCE_UID


def test_every_query_is_promql_that_promtool_parses(tmp_path):
    queries = all_queries()
    assert len(queries) == len(panel_queries()) > 0
    assert not [q for q in queries if "$" in q.expr], "a Grafana variable concrete() does not replace"
    result = _promtool_check([q.expr for q in queries], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_refuses_a_query_that_is_not_promql(tmp_path):
    # the check above can fail: an unbalanced parenthesis is refused, with the rule named
    result = _promtool_check(["sum(rate(kb_search_requests_total[5m])", "up"], tmp_path)
    assert result.returncode != 0 and "dashboard:query_0" in result.stdout + result.stderr


def test_concrete_replaces_grafana_interval_variables():
    assert concrete("rate(x[$__rate_interval]) + rate(y[${__interval}])") == "rate(x[5m]) + rate(y[5m])"
    assert concrete("increase(x[$__range])", "1h") == "increase(x[1h])"


def test_metric_names_reads_only_metric_names():
    expr = ('histogram_quantile(0.95, sum by (le, route) (rate(ocr_request_seconds_bucket{status="429", '
            'route=~"a|b"}[5m] offset 1m))) / on (job) group_left (x) job:up:min > bool 1e3 '
            'and time() - max without (instance) (kb_pipeline_last_run_timestamp_seconds)')
    assert metric_names(expr) == {"ocr_request_seconds_bucket", "job:up:min", "kb_pipeline_last_run_timestamp_seconds"}
    assert metric_names('vector(3600)') == set()


def test_every_metric_is_in_the_catalogue_or_a_recording_rule():
    known = CATALOGUE | recording_rules()
    unknown = {(title, panel, name) for title, panel, expr in panel_queries()
               for name in metric_names(expr) if name not in known}
    assert not unknown, sorted(unknown)


def test_the_services_publish_the_catalogued_names():
    # a rename in the OCR or search service fails here, not on a blank dashboard
    from kb.search.app import Metrics as SearchMetrics
    from ocr_engine.service.metrics import Metrics as OcrMetrics

    def published(registry) -> set[str]:
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""],
                    "info": ["_info"], "summary": ["_sum", "_count"]}
        return {family.name + suffix for family in registry.collect() for suffix in suffixes[family.type]}

    assert OCR_SERVICE <= published(OcrMetrics().registry)
    assert SEARCH_SERVICE <= published(SearchMetrics().registry)
