"""The pipeline's alert rules and their promtool cases, rendered from ``Thresholds``
(``kb_dev.observe.thresholds``: the settings that own each number).

Prometheus reads plain rule files, so ``include/config/prometheus/{rules,tests}/pipeline*.yml``
are rendered from ``include/config/prometheus/templates/`` and committed; a test fails when
they differ from a fresh rendering at the settings' defaults. The promtool cases are rendered
too: each alert gets input series on both sides of its threshold, so a changed threshold moves
its test with it. After changing a threshold for a deployment::

    KB_ALERT_QUARANTINE_SHARE=0.3 python -m kb_dev.observe.alert_rules      # the two files
    KB_ALERT_QUARANTINE_SHARE=0.3 python -m kb_dev.observe.dashboards include/config/grafana/dashboards
    python -m kb_dev.observe.alert_rules --check     # exit 1 when they differ from the environment's
"""

from __future__ import annotations

import argparse
import math
import string
import sys
from pathlib import Path

from kb.observe.exporter import LANDING_BUCKETS
from kb_dev.observe.thresholds import Thresholds

PROMETHEUS = Path(__file__).resolve().parents[2] / "config" / "prometheus"
# template -> where its rendering goes, both under PROMETHEUS
RENDERED = {"pipeline.yml": "rules/pipeline.yml", "pipeline_test.yml": "tests/pipeline_test.yml"}
# the promtool cases count documents in twentieths: a share threshold moves in steps of 0.05
SHARE_STEPS = 20
DOCS_PER_MINUTE = 10  # the landing-time cases


class _Template(string.Template):
    # rule files use `$value` and `{{ }}` themselves
    delimiter = "@@"


def humanize_duration(seconds: float) -> str:
    """Prometheus's ``humanizeDuration`` for values of a second or more (its template function)."""
    whole = int(seconds)
    days, hours, minutes, secs = whole // 86400, whole // 3600 % 24, whole // 60 % 60, whole % 60
    if days:
        return f"{days}d {hours}h {minutes}m {secs}s"
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{seconds:.4g}s"


def _series(le: float | str, values: str) -> str:
    bucket = "+Inf" if le == "+Inf" else f"{le:g}"
    return (f"      - series: 'kb_pipeline_landing_to_searchable_seconds_bucket"
            f"{{job=\"kb-exporter\", instance=\"e:8096\", le=\"{bucket}\"}}'\n        values: '{values}'")


def _one_bucket(lo: float, hi: float) -> tuple[str, float]:
    """Input series putting every document in (lo, hi], and the p95 Prometheus interpolates."""
    lines = [_series(lo, "0x90")] if lo > 0 else []
    lines += [_series(hi, f"0+{DOCS_PER_MINUTE}x90"), _series("+Inf", f"0+{DOCS_PER_MINUTE}x90")]
    return "\n".join(lines), lo + 0.95 * (hi - lo)


def _landing_cases(promise_s: float) -> dict[str, str]:
    edges = [0, *LANDING_BUCKETS]
    above = [i for i, le in enumerate(edges) if le >= promise_s and i + 1 < len(edges)]
    below = [i for i, le in enumerate(edges) if 0 < le <= promise_s]
    if not above or not below:
        raise ValueError(f"the promise {promise_s:g} s must lie within the landing histogram's buckets "
                         f"{LANDING_BUCKETS[0]}..{LANDING_BUCKETS[-2]} s (kb.observe.exporter.LANDING_BUCKETS)")
    fire_lo, fire_hi = edges[above[0]], edges[above[0] + 1]
    quiet_lo, quiet_hi = edges[below[-1] - 1], edges[below[-1]]
    fire_buckets, fire_p95 = _one_bucket(fire_lo, fire_hi)
    quiet_buckets, quiet_p95 = _one_bucket(quiet_lo, quiet_hi)
    return {"fire_lo": f"{fire_lo:g}", "fire_hi": f"{fire_hi:g}", "fire_p95": f"{fire_p95:g}",
            "fire_p95_human": humanize_duration(fire_p95), "fire_buckets": fire_buckets,
            "quiet_lo": f"{quiet_lo:g}", "quiet_hi": f"{quiet_hi:g}", "quiet_p95": f"{quiet_p95:g}",
            "quiet_buckets": quiet_buckets}


def _share_cases(share: float) -> dict[str, str]:
    # any share strictly between 0 and 1 has a whole count of twentieths on each side of it
    if not 0 < share < 1:
        raise ValueError(f"the quarantine share {share:g} leaves no twentieth on both sides of it")
    fire = math.floor(share * SHARE_STEPS) + 1  # quarantined of every 20: just above the share
    quiet = math.ceil(share * SHARE_STEPS) - 1  # just below it
    fire_share = fire / SHARE_STEPS
    return {"fire_quarantined": str(fire), "fire_indexed": str(SHARE_STEPS - fire),
            "fire_share": repr(fire_share), "fire_share_pct": f"{fire_share * 100:.4g}",
            "fire_quarantined_rate": repr(round(fire / 60, 4)),
            "fire_indexed_rate": repr(round((SHARE_STEPS - fire) / 60, 4)),
            "quiet_quarantined": str(quiet), "quiet_indexed": str(SHARE_STEPS - quiet),
            "quiet_quarantined_total": str(60 * quiet), "quiet_indexed_total": str(60 * (SHARE_STEPS - quiet)),
            "quiet_share": repr(quiet / SHARE_STEPS)}


def _promise_cases(promise_s: float) -> dict[str, str]:
    half_s = promise_s / 2
    if half_s % 60:
        raise ValueError(f"the promise {promise_s:g} s must be an even number of minutes (its half is a whole number of minutes)")
    half_m = int(half_s // 60)
    span_m = 3 * half_m  # every series outlives the alert's firing
    return {"half_s": f"{half_s:g}", "half_minutes": str(half_m), "half_for": f"{half_m}m",
            "span_m": str(span_m), "pending_m": str(half_m + half_m // 2),
            # two minutes past the boundary: see the comment at the case
            "firing_m": str(2 * half_m + 2), "age_m": str(2 * half_m + 1), "age_s": f"{promise_s + 60:g}",
            "never_span_m": str(2 * half_m), "never_quiet_m": str(half_m * 2 // 3),
            "never_firing_m": str(half_m + 5)}


def values(thresholds: Thresholds) -> dict[str, str]:
    return {"quarantine_share": f"{thresholds.quarantine_share:g}",
            "quarantine_share_pct": f"{thresholds.quarantine_share * 100:g}",
            "promise_s": f"{thresholds.promise_s:g}",
            **_share_cases(thresholds.quarantine_share), **_promise_cases(thresholds.promise_s),
            **_landing_cases(thresholds.promise_s)}


def render(thresholds: Thresholds) -> dict[str, str]:
    """Relative path under PROMETHEUS -> the text it must hold."""
    found = values(thresholds)
    out = {}
    for template, target in RENDERED.items():
        text = _Template((PROMETHEUS / "templates" / template).read_text()).substitute(found)
        out[target] = f"# Rendered from ../templates/{template} by `python -m kb_dev.observe.alert_rules`: edit that.\n{text}"
    return out


def stale(thresholds: Thresholds, root: Path = PROMETHEUS) -> list[str]:
    return [path for path, text in render(thresholds).items()
            if not (root / path).exists() or (root / path).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kb_dev.observe.alert_rules", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a rendered file is stale; write nothing")
    parser.add_argument("--dest", type=Path, default=PROMETHEUS, help="the folder holding rules/ and tests/")
    args = parser.parse_args(argv)
    thresholds = Thresholds.from_environment()
    if args.check:
        old = stale(thresholds, args.dest)
        for path in old:
            print(f"stale: {path} (python -m kb_dev.observe.alert_rules)", file=sys.stderr)
        return 1 if old else 0
    for path, text in render(thresholds).items():
        (args.dest / path).parent.mkdir(parents=True, exist_ok=True)
        (args.dest / path).write_text(text)
        print(f"wrote {args.dest / path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
