"""The local stand-in for statsd_exporter: Airflow's StatsD metrics in over UDP on loopback,
Prometheus series out, named by the same mapping file compose's statsd_exporter reads
(``include/config/statsd-mapping.yml``).

statsd_exporter is a Go binary that no package here ships; ``kb up --observe`` runs this
instead so that the job ``airflow`` has the same series locally. It reads the subset of the
mapping format the file keeps to (glob ``match``, ``name``, ``labels`` with ``$n``,
``match_metric_type``, ``timer_type``, ``action: drop``) and, unlike statsd_exporter, exports
nothing it has no mapping for: the mapping file is the list of what Airflow series exist.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import yaml
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("kb.observe.statsd")

# StatsD types by the mapping's match_metric_type
_TYPES = {"c": "counter", "g": "gauge", "ms": "observer", "h": "observer", "d": "observer"}
MAX_PACKET = 65535


@dataclass(frozen=True)
class Mapping:
    pattern: re.Pattern
    metric_type: str | None  # counter | gauge | observer | None (any)
    name: str
    labels: dict[str, str]
    drop: bool

    @classmethod
    def of(cls, rule: dict) -> "Mapping":
        # a glob's `*` stands for one dot-separated part (Airflow writes a dot in an id as `__`)
        parts = [re.escape(p).replace(r"\*", "([^.]+)") for p in rule["match"].split(".")]
        return cls(re.compile("^" + r"\.".join(parts) + "$"), rule.get("match_metric_type"), rule["name"],
                   {k: str(v) for k, v in (rule.get("labels") or {}).items()}, rule.get("action") == "drop")

    def apply(self, name: str, kind: str) -> tuple[str, dict[str, str]] | None:
        if self.metric_type not in (None, kind):
            return None
        found = self.pattern.match(name)
        if found is None:
            return None
        labels = {k: re.sub(r"\$(\d+)", lambda m: found.group(int(m.group(1))), v) for k, v in self.labels.items()}
        return self.name, labels


def load_mappings(path: Path) -> list[Mapping]:
    return [Mapping.of(rule) for rule in (yaml.safe_load(path.read_text()) or {}).get("mappings", [])]


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    kind: str  # counter | gauge | observer
    relative: bool = False  # a gauge's "+n" / "-n"


def parse(packet: str) -> Iterator[Sample]:
    """The samples of one StatsD packet (lines of ``name:value|type[|@rate][|#tags]``);
    a malformed line is skipped, as statsd_exporter does."""
    for line in packet.splitlines():
        name, _, rest = line.strip().partition(":")
        fields = rest.split("|")
        if not name or len(fields) < 2 or fields[1] not in _TYPES:
            continue
        try:
            value = float(fields[0])
            rate = next((float(f[1:]) for f in fields[2:] if f.startswith("@")), 1.0)
        except ValueError:
            continue
        kind = _TYPES[fields[1]]
        if kind == "counter" and 0 < rate < 1:
            value /= rate
        yield Sample(name, value, kind, relative=kind == "gauge" and fields[0][:1] in "+-")


class StatsdSeries(Collector):
    """What the samples add up to, by mapped name and labels."""

    def __init__(self, mappings: list[Mapping]) -> None:
        self.mappings = mappings
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple], float] = {}
        self._gauges: dict[tuple[str, tuple], float] = {}
        self._observed: dict[tuple[str, tuple], tuple[int, float]] = {}

    def record(self, sample: Sample) -> None:
        mapped = next((m for m in self.mappings if m.apply(sample.name, sample.kind) is not None), None)
        if mapped is None or mapped.drop:
            return
        name, labels = mapped.apply(sample.name, sample.kind)
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            if sample.kind == "counter":
                self._counters[key] = self._counters.get(key, 0.0) + sample.value
            elif sample.kind == "gauge":
                self._gauges[key] = (self._gauges.get(key, 0.0) if sample.relative else 0.0) + sample.value
            else:  # timers are milliseconds; Prometheus wants seconds, as statsd_exporter gives
                count, total = self._observed.get(key, (0, 0.0))
                self._observed[key] = (count + 1, total + sample.value / 1000.0)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counters, gauges, observed = dict(self._counters), dict(self._gauges), dict(self._observed)
        yield from _families(counters, lambda n, keys: CounterMetricFamily(n.removesuffix("_total"), n, labels=keys),
                             lambda f, values, v: f.add_metric(values, v))
        yield from _families(gauges, lambda n, keys: GaugeMetricFamily(n, n, labels=keys),
                             lambda f, values, v: f.add_metric(values, v))
        yield from _families(observed, lambda n, keys: SummaryMetricFamily(n, n, labels=keys),
                             lambda f, values, v: f.add_metric(values, count_value=v[0], sum_value=v[1]))


def _families(series, make, add) -> Iterator[Metric]:
    by_name: dict[str, list] = {}
    for (name, labels), value in sorted(series.items()):
        by_name.setdefault(name, []).append((labels, value))
    for name, rows in by_name.items():
        keys = [k for k, _ in rows[0][0]]
        family = make(name, keys)
        for labels, value in rows:
            if [k for k, _ in labels] == keys:  # one label set per name, as Prometheus requires
                add(family, [v for _, v in labels], value)
        yield family


def listen(series: StatsdSeries, host: str, port: int, stop: threading.Event) -> threading.Thread:
    """Receive StatsD packets on UDP ``host:port`` in a daemon thread until ``stop`` is set."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    sock.settimeout(0.5)

    def run() -> None:
        with sock:
            while not stop.is_set():
                try:
                    data = sock.recv(MAX_PACKET)
                except socket.timeout:
                    continue
                for sample in parse(data.decode("utf-8", "replace")):
                    series.record(sample)

    thread = threading.Thread(target=run, name="statsd", daemon=True)
    thread.start()
    return thread
