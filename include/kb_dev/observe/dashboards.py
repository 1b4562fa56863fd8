"""The Grafana dashboards, as code (grafanalib): "KB ingestion" and "KB serving".

The JSON under ``include/config/grafana/dashboards/`` is generated from this module and committed,
so compose provisions it without Python; a test fails when the two differ. Regenerate with::

    python -m kb_dev.observe.dashboards include/config/grafana/dashboards

Every query selects by metric name and ``job``-free labels only (never ``instance``), uses only
the metric catalogue of issue 22 (the services' own metrics, the pipeline exporter's, Airflow's
through the StatsD mapping) or a recording rule of ``include/config/prometheus/rules`` (where an
alert watches a quantity, the panel shows the rule the alert evaluates), and reads the provisioned
Prometheus datasource by its fixed uid.

Pipeline counters move in bursts (one run at a time), so their panels count per hour
(``increase(...[1h])``); the services serve a steady stream, so theirs are rates over Grafana's
``$__rate_interval``. ``all_queries()`` gives every panel query with Grafana's variables made
concrete, for the live test that runs each against a real Prometheus.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from grafanalib.core import (
    Dashboard,
    GridPos,
    RowPanel,
    Stat,
    Target,
    Time,
    TimeSeries,
)
from grafanalib._gen import DashboardEncoder

from kb_dev.observe.thresholds import Thresholds

# the datasource provisioned by include/config/grafana/provisioning/datasources/prometheus.yml
DATASOURCE_UID = "kb-prometheus"
DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}
# Grafana 11/12 read this schema without migrating panels; grafanalib's default (12) predates gridPos
SCHEMA_VERSION = 39
GPU_POOL = "gpu_ocr"
_WIDTH = 24  # Grafana's grid columns


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    # None: as its panel's data_expected
    data_expected: bool | None = None


@dataclass(frozen=True)
class PanelSpec:
    """One panel: its queries and how to draw them.

    ``data_expected``: whether a healthy run with real traffic produces series for every query
    (a task-failure or 429 panel is valid but empty on a clean run)."""

    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    stat: bool = False
    width: int = 8
    thresholds: tuple[tuple[str, float | None], ...] = ()
    data_expected: bool = True


@dataclass(frozen=True)
class RowSpec:
    title: str
    panels: tuple[PanelSpec, ...] = field(default_factory=tuple)


class PanelQuery(NamedTuple):
    dashboard: str
    panel: str
    expr: str
    data_expected: bool


def _p(title: str, *queries: Query | str, **kw) -> PanelSpec:
    return PanelSpec(title, tuple(q if isinstance(q, Query) else Query(q) for q in queries), **kw)


def _ingestion_rows(thresholds: Thresholds) -> tuple[RowSpec, ...]:
    promise, share = f"{thresholds.promise_s:g}", thresholds.quarantine_share
    return (
        RowSpec("Outcomes", (
            _p("Documents per hour by outcome",
               Query("sum by (outcome) (increase(kb_pipeline_documents_total[1h]))", "{{outcome}}"),
               description="Document versions the pipeline finished, by outcome, over the past hour."),
            _p("Quarantine share (past hour)",
               Query("kb:quarantine_share:rate1h", "quarantined / decided"),
               unit="percentunit",
               thresholds=(("green", None), ("red", share)),
               description="Quarantined over indexed + quarantined + failed, the recording rule "
                           f"KBQuarantineShareHigh watches; it fires above {share:g}."),
            _p("Quarantine reasons per hour",
               Query("sum by (code) (increase(kb_pipeline_quarantined_total[1h]))", "{{code}}"),
               description="Quarantined versions by quarantine code.", data_expected=False),
            _p("Pages indexed per hour by backend",
               Query("sum by (backend) (increase(kb_pipeline_pages_total[1h]))", "{{backend}}"),
               width=12),
            _p("Pipeline runs per hour by result",
               Query("sum by (result) (increase(kb_pipeline_runs_total[1h]))", "{{result}}"),
               width=12),
        )),
        RowSpec("Landing to searchable", (
            _p("Landing to searchable p50 / p95 vs the promise",
               Query("histogram_quantile(0.5, sum by (le) "
                     "(rate(kb_pipeline_landing_to_searchable_seconds_bucket[1h])))", "p50"),
               Query("kb:landing_to_searchable_seconds:p95_1h", "p95"),
               Query(f"vector({promise})", "promise"),
               unit="s", width=12, thresholds=(("green", None), ("red", float(promise))),
               description="From the object's Last-Modified in the inbox to the end of its index task, "
                           "per indexed version, over the past hour. The promise line is "
                           f"KB_SEARCHABLE_WITHIN_S ({promise} s)."),
            _p("Age of the last successful run",
               Query("kb:pipeline_last_success:age_seconds", "since last success"),
               Query("time() - max(kb_pipeline_last_run_timestamp_seconds)", "since last run"),
               unit="s", stat=True, width=6,
               description="A successful run is one that failed no document."),
            _p("Inbox pending",
               Query("max(kb_inbox_pending_documents)", "pending"),
               stat=True, width=6,
               description="Inbox objects whose current version is not yet indexed, quarantined or "
                           "backing off: the next run's work."),
        )),
        RowSpec("OCR cost", (
            _p("OCR device seconds per hour",
               Query("sum(increase(kb_pipeline_ocr_device_seconds_total[1h]))", "device seconds"),
               unit="s", width=8),
            _p("OCR pages per hour",
               Query("sum(increase(kb_pipeline_ocr_pages_total[1h]))", "OCR pages"),
               width=8),
            _p("OCR cost per 1,000 pages",
               # empty in an hour without OCR pages (a text-layer-only corpus)
               Query("kb:ocr_cost_per_1000_pages:1h", "pipeline (past hour)", data_expected=False),
               Query("max(ocr_cost_per_1000_pages)", "OCR service"),
               width=8,
               description="In the currency of KB_GPU_COST_PER_HOUR (0 when unset)."),
        )),
        RowSpec("Ledger and review", (
            _p("Ledger documents by status",
               Query("max by (status) (kb_ledger_documents)", "{{status}}"), width=8),
            _p("Review queue pending",
               Query("max(kb_review_pending_documents)", "pending"), stat=True, width=8,
               description="Quarantined versions with no review decision yet (kb review)."),
            _p("Reread backlog",
               Query("max by (why) (kb_reread_pending_documents)", "{{why}}"), width=8,
               description="Indexed documents a reread run would take up: some pages read by older reading "
                           "rules or another OCR model than the newest run's, or indexed before entries "
                           "recorded it. After an upgrade or a model switch, it falls as folders are reread."),
        )),
        RowSpec("Airflow", (
            _p("DAG run mean duration",
               Query("sum by (dag_id, state) (rate(airflow_dagrun_duration_seconds_sum[1h]))"
                     " / sum by (dag_id, state) (rate(airflow_dagrun_duration_seconds_count[1h]))",
                     "{{dag_id}} {{state}}"),
               unit="s", width=12),
            _p("Task failures per hour",
               Query('sum by (dag_id, task_id) (increase(airflow_ti_finish_total{state="failed"}[1h]))',
                     "{{dag_id}}.{{task_id}}"),
               width=12, data_expected=False),
            _p("Task finishes per hour by state",
               Query("sum by (dag_id, state) (increase(airflow_ti_finish_total[1h]))", "{{dag_id}} {{state}}"),
               width=12),
            _p(f"GPU pool ({GPU_POOL}) slots",
               Query(f'max(airflow_pool_open_slots{{pool="{GPU_POOL}"}})', "open"),
               Query(f'max(airflow_pool_queued_slots{{pool="{GPU_POOL}"}})', "queued"),
               Query(f'max(airflow_pool_running_slots{{pool="{GPU_POOL}"}})', "running"),
               width=12),
            _p("Scheduler heartbeats per second",
               Query("sum(rate(airflow_scheduler_heartbeat_total[$__rate_interval]))", "heartbeats"),
               width=12),
            _p("DAG import errors",
               Query("max(airflow_dag_processing_import_errors)", "import errors"),
               stat=True, width=12, thresholds=(("green", None), ("red", 1.0))),
        )),
    )


def _serving_rows() -> tuple[RowSpec, ...]:
    rate = "[$__rate_interval]"
    return (
        RowSpec("Search", (
            _p("Search requests per second by status",
               Query(f"sum by (status) (rate(kb_search_requests_total{rate}))", "{{status}}")),
            _p("Search latency p50 / p99 by mode",
               Query(f"histogram_quantile(0.5, sum by (le, mode) (rate(kb_search_query_seconds_bucket{rate})))",
                     "p50 {{mode}}"),
               Query(f"histogram_quantile(0.99, sum by (le, mode) (rate(kb_search_query_seconds_bucket{rate})))",
                     "p99 {{mode}}"),
               unit="s"),
            _p("Search errors per second by code",
               Query(f"sum by (code) (rate(kb_search_errors_total{rate}))", "{{code}}"),
               data_expected=False),
            _p("Search 5xx share",
               Query("kb_search:requests_5xx_share:rate5m", "5xx / all"),
               unit="percentunit", width=12,
               description="The recording rule KBSearchErrors watches (5 minutes)."),
            _p("Search store lag",
               Query("max(kb_search_store_lag_rows)", "log rows not applied"),
               stat=True, width=12,
               description="Rows of the embedded store's write log that no copy has applied yet "
                           "(0 when every write is searchable; a Qdrant server has no log)."),
        )),
        RowSpec("OCR service", (
            _p("OCR requests per second by route and status",
               Query(f"sum by (route, status) (rate(ocr_requests_total{rate}))", "{{route}} {{status}}"),
               width=12),
            _p("OCR 429s per second",
               Query(f'sum(rate(ocr_requests_total{{status="429"}}{rate}))', "429"),
               width=12, data_expected=False,
               description="Requests refused because the admission queue was full."),
            _p("OCR in flight and queue depth",
               Query("sum(ocr_requests_in_flight)", "in flight"),
               Query("sum(ocr_admission_queue_depth)", "queue depth"),
               Query("sum(ocr_kv_waiting_requests)", "waiting for KV budget")),
            _p("OCR request latency p95 by route",
               Query(f"histogram_quantile(0.95, sum by (le, route) (rate(ocr_request_seconds_bucket{rate})))",
                     "{{route}}"),
               unit="s"),
            _p("OCR pages per second by backend and status",
               Query(f"sum by (backend, status) (rate(ocr_pages_total{rate}))", "{{backend}} {{status}}")),
        )),
        RowSpec("Targets", (
            _p("Targets up per job",
               Query("job:up:min", "{{job}}"),
               stat=True, width=16, thresholds=(("red", None), ("green", 1.0)),
               description="1 when every target of the job answers its scrape."),
            _p("OCR engine backend",
               Query("count by (backend, model_version) (ocr_engine_info)", "{{backend}} {{model_version}}"),
               stat=True, width=8),
        )),
    )


def _panel(spec: PanelSpec, panel_id: int, pos: GridPos):
    targets = [Target(expr=q.expr, legendFormat=q.legend, refId=chr(ord("A") + i), datasource=DATASOURCE)
               for i, q in enumerate(spec.queries)]
    steps = [{"color": color, "value": value} for color, value in spec.thresholds] or [{"color": "green",
                                                                                        "value": None}]
    common = dict(title=spec.title, id=panel_id, gridPos=pos, dataSource=DATASOURCE, targets=targets,
                  description=spec.description or None, thresholds=steps)
    if spec.stat:
        return Stat(**common, format=spec.unit, reduceCalc="lastNotNull", graphMode="area", noValue="no data")
    return TimeSeries(**common, unit=spec.unit, legendDisplayMode="list",
                      thresholdsStyleMode="line" if spec.thresholds else "off", tooltipMode="multi")


def _dashboard(title: str, uid: str, description: str, rows: tuple[RowSpec, ...]) -> Dashboard:
    """Lay the rows out top to bottom, panels left to right; ids follow that order, so the JSON
    is the same on every generation."""
    panels, y, next_id = [], 0, 1
    for row in rows:
        panels.append(RowPanel(title=row.title, id=next_id, gridPos=GridPos(h=1, w=_WIDTH, x=0, y=y)))
        next_id, y, x, line_h = next_id + 1, y + 1, 0, 0
        for spec in row.panels:
            h = 5 if spec.stat else 8
            if x + spec.width > _WIDTH:
                x, y, line_h = 0, y + line_h, 0
            panels.append(_panel(spec, next_id, GridPos(h=h, w=spec.width, x=x, y=y)))
            next_id, x, line_h = next_id + 1, x + spec.width, max(line_h, h)
        y += line_h
    return Dashboard(title=title, uid=uid, description=description, panels=panels, tags=["kb"],
                     editable=False, graphTooltip=1, refresh="30s", time=Time("now-6h", "now"),
                     timezone="utc", schemaVersion=SCHEMA_VERSION, version=1)


def _specs(thresholds: Thresholds) -> dict[str, tuple[str, str, tuple[RowSpec, ...]]]:
    return {
        "kb-ingestion": ("KB ingestion", "The pipeline: outcomes, quarantine, pages, the landing-to-searchable "
                         "promise, OCR cost, backlog, review queue and Airflow.", _ingestion_rows(thresholds)),
        "kb-serving": ("KB serving", "The search and OCR services: traffic, latency, errors, saturation and "
                       "scrape health.", _serving_rows()),
    }


def _build(specs: dict[str, tuple[str, str, tuple[RowSpec, ...]]]) -> dict[str, Dashboard]:
    return {slug: _dashboard(title, slug, desc, rows) for slug, (title, desc, rows) in specs.items()}


def build(thresholds: Thresholds) -> dict[str, Dashboard]:
    """slug (file name and dashboard uid) -> dashboard, drawn at ``thresholds``."""
    return _build(_specs(thresholds))


# the committed dashboards: the settings' defaults
_SPECS = _specs(Thresholds.defaults())
DASHBOARDS: dict[str, Dashboard] = _build(_SPECS)


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, expr) for every target of every panel, with Grafana's
    variables as written."""
    return [(q.dashboard, q.panel, q.expr) for q in _queries()]


def _queries() -> list[PanelQuery]:
    return [PanelQuery(title, spec.title, q.expr, spec.data_expected if q.data_expected is None else q.data_expected)
            for title, _desc, rows in _SPECS.values()
            for row in rows for spec in row.panels for q in spec.queries]


_GRAFANA_VARIABLE = re.compile(r"\$(?:\{__(?:rate_interval|interval|range)\}|__(?:rate_interval|interval|range)\b)")


def concrete(expr: str, interval: str = "5m") -> str:
    """The expr Prometheus itself would accept: Grafana's interval variables become ``interval``."""
    return _GRAFANA_VARIABLE.sub(interval, expr)


def all_queries(interval: str = "5m") -> list[PanelQuery]:
    """Every panel query, concrete (see ``concrete``), with whether a healthy run gives it data."""
    return [q._replace(expr=concrete(q.expr, interval)) for q in _queries()]


def render_json(dashboard: Dashboard) -> str:
    return json.dumps(dashboard.to_json_data(), cls=DashboardEncoder, sort_keys=True, indent=2) + "\n"


def write_all(folder: str | Path, thresholds: Thresholds | None = None) -> list[Path]:
    """Write ``<slug>.json`` for every dashboard into ``folder``; return the paths written."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for slug, dashboard in (build(thresholds) if thresholds else DASHBOARDS).items():
        path = out / f"{slug}.json"
        path.write_text(render_json(dashboard), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kb_dev.observe.dashboards FOLDER", file=sys.stderr)
        return 2
    # this deployment's thresholds, as kb_dev.observe.alert_rules renders the rules
    for path in write_all(args[0], Thresholds.from_environment()):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
