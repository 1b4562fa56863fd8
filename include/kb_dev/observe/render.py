"""Draw each dashboard as a PNG from a live Prometheus: the stand-in for Grafana screenshots where
Grafana cannot run (no Debian package, no image registry).

Each panel is placed as its ``gridPos`` places it in Grafana; a time series panel draws every
query's series (``query_range``, legends from the panel's ``legendFormat``), a stat panel prints
each series' last value. The queries are the dashboards' own (``kb_dev.observe.dashboards``), with
Grafana's interval variables made concrete::

    python -m kb_dev.observe.render --prometheus http://127.0.0.1:9090 --minutes 30 OUT_FOLDER
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx

from kb_dev.observe.dashboards import DASHBOARDS, concrete, render_json

_CELL_IN = 0.55  # inches per grid unit (Grafana's 24 columns; a row unit is 30 px there)


class PrometheusQueryError(RuntimeError):
    """Prometheus refused a query or could not be reached."""


@dataclass(frozen=True)
class Series:
    legend: str
    times: list[datetime]
    values: list[float]


def _legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat (``{{label}}``); the label set where that leaves nothing."""
    legend = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()
    return legend or ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"


def query_range(client: httpx.Client, expr: str, start: float, end: float, step: float) -> list[dict]:
    try:
        response = client.get("/api/v1/query_range", params={"query": expr, "start": start, "end": end,
                                                              "step": step})
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise PrometheusQueryError(f"{expr}: {exc}") from exc
    if response.status_code != 200 or body.get("status") != "success":
        raise PrometheusQueryError(f"{expr}: {response.status_code} {body.get('error', '')}")
    return body["data"]["result"]


def panel_series(client: httpx.Client, panel: dict, start: float, end: float, step: float,
                 rate_interval: str) -> list[Series]:
    out = []
    for target in panel["targets"]:
        for result in query_range(client, concrete(target["expr"], rate_interval), start, end, step):
            points = [(float(t), float(v)) for t, v in result["values"]]
            out.append(Series(_legend(target.get("legendFormat", ""), result["metric"]),
                              [datetime.fromtimestamp(t, timezone.utc) for t, _ in points],
                              [v for _, v in points]))
    return out


def _last(series: Series) -> float | None:
    finite = [v for v in series.values if math.isfinite(v)]
    return finite[-1] if finite else None


def render_dashboard(client: httpx.Client, dashboard: dict, path: Path, start: float, end: float,
                     step: float, rate_interval: str) -> Path:
    # a Figure of its own (no pyplot): no global backend or figure state in the caller's process
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    panels = dashboard["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) + 2  # + the figure's title
    fig = Figure(figsize=(24 * _CELL_IN, height * _CELL_IN))
    # a panel's box in figure fractions, as Grafana's grid places it (y grows downwards there)
    pad_x, pad_top, pad_bottom = 0.06 / 24, 0.9 / height, 0.7 / height
    span = f"{datetime.fromtimestamp(start, timezone.utc):%Y-%m-%d %H:%M} – " \
           f"{datetime.fromtimestamp(end, timezone.utc):%H:%M} UTC"
    fig.suptitle(f"{dashboard['title']}  ({span}; rendered from Prometheus, not Grafana)", fontsize=14,
                 y=1 - 0.6 / height)
    time_format = "%H:%M:%S" if end - start < 600 else "%H:%M"
    for panel in panels:
        g = panel["gridPos"]
        left, bottom = g["x"] / 24 + 2 * pad_x, 1 - (g["y"] + 2 + g["h"]) / height + pad_bottom
        if panel["type"] == "row":
            ax = fig.add_axes((left, bottom, g["w"] / 24 - 4 * pad_x, g["h"] / height))
            ax.axis("off")
            ax.text(0, 0.5, panel["title"], fontsize=13, fontweight="bold", va="center")
            continue
        ax = fig.add_axes((left + 0.03, bottom, g["w"] / 24 - 4 * pad_x - 0.03,
                           g["h"] / height - pad_top - pad_bottom))
        ax.set_title(panel["title"], fontsize=10, loc="left")
        series = panel_series(client, panel, start, end, step, rate_interval)
        unit = panel["fieldConfig"]["defaults"].get("unit") or ""
        if panel["type"] == "stat":
            ax.axis("off")
            lines = [f"{s.legend}: {_fmt(_last(s), unit)}" for s in series] or ["no data"]
            ax.text(0.5, 0.45, "\n".join(lines), ha="center", va="center", fontsize=12 if len(lines) < 3 else 9,
                    transform=ax.transAxes)
            continue
        for s in series:
            ax.plot(s.times, s.values, label=s.legend, linewidth=1.2)
        if not series:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", color="grey", transform=ax.transAxes)
        elif len(series) <= 8:
            ax.legend(fontsize=7, loc="upper left")
        ax.set_xlim(datetime.fromtimestamp(start, timezone.utc), datetime.fromtimestamp(end, timezone.utc))
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=6))
        ax.xaxis.set_major_formatter(mdates.DateFormatter(time_format))
        ax.tick_params(labelsize=7)
        if unit == "percentunit":
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        elif unit not in ("", "short"):
            ax.set_ylabel(unit, fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    return path


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "no data"
    if unit == "percentunit":
        return f"{value:.1%}"
    if unit == "s":
        return f"{value:,.0f} s" if value >= 10 else f"{value:.2f} s"
    return f"{value:,.4g}"


def render_all(prometheus_url: str, folder: str | Path, minutes: float = 30, rate_interval: str = "1m",
               end: float | None = None) -> list[Path]:
    """One PNG per dashboard (``<slug>.png``) over the last ``minutes``; return the paths."""
    end = time.time() if end is None else end
    start = end - minutes * 60
    step = max(15.0, minutes * 60 / 240)
    with httpx.Client(base_url=prometheus_url, timeout=30) as client:
        return [render_dashboard(client, json.loads(render_json(d)), Path(folder) / f"{slug}.png",
                                 start, end, step, rate_interval)
                for slug, d in DASHBOARDS.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kb_dev.observe.render", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate-interval", default="1m", help="what $__rate_interval becomes (default 1m)")
    args = parser.parse_args(argv)
    for path in render_all(args.prometheus, args.folder, args.minutes, args.rate_interval):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
