"""Local observability on the live stack (``kb up`` with the exporter, the StatsD bridge, a mail
sink, Debian's Prometheus and Alertmanager): after a real ingest with one hostile file,
``kb alerts`` shows the quarantine alert the ops team would get, every dashboard panel's
query returns series, and every rule evaluates."""

from __future__ import annotations

import json
import time

import httpx

from kb_dev.observe.dashboards import all_queries
from tests.pdfs import coded_pages, make_pdf, truncated_pdf

PREFIX = "observe/"
# 4 scrapes of the local stack's 5 s interval: what Grafana's $__rate_interval would be
RATE_INTERVAL = "20s"


def _query(prometheus: str, expr: str) -> list:
    body = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=30).json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _empty_panels(prometheus: str) -> list[tuple[str, str]]:
    return [(q.panel, q.expr) for q in all_queries(RATE_INTERVAL) if q.data_expected and not _query(prometheus, q.expr)]


def _wait(what: str, check, timeout_s: float = 120.0, every_s: float = 3.0):
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(every_s)


def test_a_hostile_file_is_a_quarantine_alert_in_kb_alerts_and_every_panel_has_data(live):
    state, summary = live.ingest(PREFIX, {"manual.pdf": make_pdf(coded_pages("observe", 3)),
                                          "hostile.pdf": truncated_pdf()})
    assert state == "success" and summary["documents_quarantined"] >= 1, summary

    # the ops team's mail, as `kb alerts` shows it
    def quarantine_alert():
        done = live.kb("alerts", "--json", "--last", "0")
        assert done.returncode == 0, done.stderr
        return [a for a in json.loads(done.stdout) if f"quarantined {PREFIX}hostile.pdf" in a["subject"]]

    [alert] = _wait("the quarantine alert", quarantine_alert, 60)
    assert "corrupt_pdf" in alert["subject"] and "ops@localhost" in alert["to"], alert
    assert "Why:" in alert["text"] and "manual.pdf" not in alert["text"], alert  # one alert per document
    text = live.kb("alerts").stdout
    assert f"quarantined {PREFIX}hostile.pdf" in text, text

    # traffic for the serving panels
    with httpx.Client(timeout=60, headers=live.headers("search")) as client:
        for query in ("OBSERVE-001", "maintenance code", "observe page"):
            assert client.post(f"{live.search_url}/v1/search", json={"query": query}).status_code == 200

    prometheus = live.url("prometheus")
    # the exporter's view of the run reaches Prometheus (scraped every 5 s, cached 10 s)
    assert _wait("the run in Prometheus", lambda: _query(
        prometheus, 'kb_pipeline_quarantined_total{code="corrupt_pdf"} >= 1')), "the exporter's counters never came"
    empty = _wait("every panel", lambda: not _empty_panels(prometheus), 120)
    assert empty, _empty_panels(prometheus)
    # a hostile file was quarantined: its reason is on the dashboard, labelled by code, not by key
    reasons = _query(prometheus, "kb_pipeline_quarantined_total")
    assert {r["metric"]["code"] for r in reasons} >= {"corrupt_pdf"}
    assert not any("hostile" in json.dumps(r["metric"]) for r in reasons)


def test_every_rule_evaluates_without_error_on_the_live_series(live):
    prometheus = live.url("prometheus")

    def rules():
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=30).json()["data"]["groups"]
        found = [r for g in groups for r in g["rules"]]
        return found if found and all(r["health"] != "unknown" for r in found) else None

    found = _wait("rules evaluated", rules, 60)
    assert found, "Prometheus loaded no rules, or never evaluated them"
    assert [(r["name"], r.get("lastError")) for r in found if r["health"] != "ok"] == []
    # every job of the stack is scraped and up
    targets = httpx.get(f"{prometheus}/api/v1/targets", timeout=30).json()["data"]["activeTargets"]
    assert {t["labels"]["job"]: t["health"] for t in targets} == {
        "ocr-service": "up", "kb-search": "up", "kb-exporter": "up", "airflow": "up"}


def test_prometheus_alerts_reach_kb_alerts_through_alertmanager(live):
    prometheus, alertmanager = live.url("prometheus"), live.url("alertmanager")
    active = httpx.get(f"{prometheus}/api/v1/alertmanagers", timeout=30).json()["data"]["activeAlertmanagers"]
    assert [a["url"] for a in active] == [f"{alertmanager}/api/v2/alerts"]
    # an alert as Prometheus posts one; Alertmanager groups it (10 s) and mails the sink
    name = f"KbRouteCheck{int(time.time())}"
    resp = httpx.post(f"{alertmanager}/api/v2/alerts", timeout=30, json=[{
        "labels": {"alertname": name, "severity": "warning", "team": "ops"},
        "annotations": {"summary": "a route check from the observability suite"}}])
    assert resp.status_code == 200, resp.text

    def mailed():
        done = live.kb("alerts", "--json", "--last", "0")
        return [a for a in json.loads(done.stdout) if name in a["subject"]]

    [alert] = _wait("the alert mail", mailed, 90)
    assert "alertmanager@localhost" in alert["sender"] and "route check" in alert["text"], alert
