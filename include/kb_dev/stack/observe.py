"""Local observability, started by ``kb up`` beside the stack (``--no-observe`` leaves it out).

- the pipeline exporter (``kb-exporter serve``, job ``kb-exporter``) and the StatsD bridge
  that turns Airflow's StatsD metrics into the job ``airflow`` (compose runs statsd_exporter
  with the same mapping file);
- a mail sink (``kb_dev.stack.mailsink``) that the stack's alerts go to: Airflow's connection
  ``kb_alerts_smtp`` points at it, and so does Alertmanager;
- Debian's Prometheus and Alertmanager when installed (``apt-get install prometheus
  prometheus-alertmanager``), with the rules of ``include/config/prometheus/rules``.

Everything binds to loopback; Prometheus and Alertmanager keep their data in the state folder.
"""

from __future__ import annotations

import email
import email.policy
import html
import json
import os
import re
import shutil
import socket
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import httpx
import yaml

from kb_dev import REPO_ROOT
from kb_dev.settings import StackSettings
from kb_dev.stack.process import check_ports_free, part_pid, start_process, stop_parts, wait_until
from kb_dev.stack.secrets import write_private

RULES = REPO_ROOT / "include" / "config" / "prometheus" / "rules"
# Started in this order, stopped in the reverse one.
PARTS = ("mail", "exporter", "statsd", "alertmanager", "prometheus")
ALERT_TO = "ops@localhost"


def ports(s: StackSettings) -> dict[str, int]:
    return {"mail sink": s.mail_port, "exporter": s.exporter_port, "StatsD bridge (HTTP)": s.statsd_http_port,
            "Alertmanager": s.alertmanager_port, "Prometheus": s.prometheus_port}


def _binary(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)


def airflow_env(s: StackSettings, secrets_: dict[str, str]) -> dict[str, str]:
    """What Airflow needs to be observed: StatsD to the bridge, alerts to the mail sink."""
    return {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": s.host,
        "AIRFLOW__METRICS__STATSD_PORT": str(s.statsd_port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        "AIRFLOW_CONN_KB_ALERTS_SMTP": json.dumps({
            "conn_type": "smtp", "host": s.host, "port": s.mail_port, "login": "kb",
            "password": secrets_["KB_MAIL_SINK_PASSWORD"],
            "extra": {"from_email": "kb@localhost", "disable_tls": True, "disable_ssl": True, "retry_limit": 1},
        }),
        "KB_ALERT_EMAIL_TO": json.dumps([ALERT_TO]),
    }


def prometheus_config(s: StackSettings) -> dict[str, Any]:
    """Scrape every part of the stack under the job names the rules and dashboards use."""
    jobs = {"ocr-service": s.ocr_port, "kb-search": s.search_port, "kb-exporter": s.exporter_port,
            "airflow": s.statsd_http_port}
    return {
        "global": {"scrape_interval": f"{s.scrape_interval_s}s", "evaluation_interval": f"{s.scrape_interval_s}s"},
        "rule_files": [str(RULES / "*.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"{s.host}:{s.alertmanager_port}"]}]}]},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"{s.host}:{port}"]}]}
                           for job, port in jobs.items()],
    }


def alertmanager_config(s: StackSettings, secrets_: dict[str, str]) -> dict[str, Any]:
    """Every alert to the mail sink (compose routes to the ops team's mail and webhook:
    include/config/alertmanager.yml)."""
    return {
        "route": {"receiver": "mail-sink", "group_by": ["alertname"], "group_wait": "10s",
                  "group_interval": "1m", "repeat_interval": "4h"},
        "receivers": [{"name": "mail-sink", "email_configs": [{
            "to": ALERT_TO, "from": "alertmanager@localhost", "smarthost": f"{s.host}:{s.mail_port}",
            "auth_username": "kb", "auth_password": secrets_["KB_MAIL_SINK_PASSWORD"], "require_tls": False,
            "send_resolved": True}]}],
    }


def _http_ready(url: str) -> Callable[[], bool]:
    return lambda: httpx.get(url, timeout=3).status_code == 200


def _listening(host: str, port: int) -> Callable[[], bool]:
    def ready() -> bool:
        with socket.create_connection((host, port), timeout=2):
            return True
    return ready


def start(s: StackSettings, secrets_: dict[str, str], pipeline_env: dict[str, str],
          echo: Callable[[str], None] = print) -> None:
    """``pipeline_env``: where the exporter finds the ledger (``KB_LEDGER_URL`` when it is not
    the state folder's SQLite file)."""
    wanted = {label: port for label, port in ports(s).items()
              if label not in ("Alertmanager", "Prometheus") or _binary("prometheus")}
    if not any(part_pid(s, p) for p in PARTS):
        check_ports_free(s.host, wanted)
    python, venv = sys.executable, Path(sys.executable).parent
    base = dict(os.environ)
    if not part_pid(s, "mail"):
        env = {**base, "KB_MAIL_SINK_PASSWORD": secrets_["KB_MAIL_SINK_PASSWORD"]}
        pid = start_process(s, "mail", [python, "-m", "kb_dev.stack.mailsink", "--host", s.host, "--port", str(s.mail_port),
                                        "--folder", str(mail_folder(s))], env, s.state_dir)
        wait_until(s, "mail", pid, _listening(s.host, s.mail_port), f"SMTP on {s.host}:{s.mail_port}")
    if not part_pid(s, "exporter"):
        env = {**base, **pipeline_env, "KB_EXPORTER_HOST": s.host, "KB_EXPORTER_PORT": str(s.exporter_port),
               # the search service's read-only identity: it lists the inbox and reads run summaries
               "KB_EXPORTER_S3_ACCESS_KEY": secrets_["KB_SEARCH_S3_ACCESS_KEY"],
               "KB_EXPORTER_S3_SECRET_KEY": secrets_["KB_SEARCH_S3_SECRET_KEY"],
               "KB_S3_ENDPOINT": f"{s.host}:{s.s3_port}", "KB_STATE_DIR": str(s.state_dir)}
        for name in ("KB_S3_ACCESS_KEY", "KB_S3_SECRET_KEY"):
            env.pop(name, None)
        pid = start_process(s, "exporter", [str(venv / "kb-exporter"), "serve"], env, s.state_dir)
        wait_until(s, "exporter", pid, _http_ready(f"http://{s.host}:{s.exporter_port}/healthz"), "/healthz")
    if not part_pid(s, "statsd"):
        env = {**base, "KB_EXPORTER_HOST": s.host, "KB_EXPORTER_STATSD_PORT": str(s.statsd_port),
               "KB_EXPORTER_STATSD_HTTP_PORT": str(s.statsd_http_port)}
        pid = start_process(s, "statsd", [str(venv / "kb-exporter"), "statsd-bridge"], env, s.state_dir)
        wait_until(s, "statsd", pid, _http_ready(f"http://{s.host}:{s.statsd_http_port}/healthz"), "/healthz")
    prometheus, alertmanager = _binary("prometheus"), _binary("prometheus-alertmanager")
    if not prometheus:
        echo("Prometheus is not installed (apt-get install prometheus prometheus-alertmanager): "
             "the exporter and the mail sink run without it")
        return
    folder = s.state_dir / "observe"
    if alertmanager and not part_pid(s, "alertmanager"):
        config = folder / "alertmanager.yml"
        write_private(config, yaml.safe_dump(alertmanager_config(s, secrets_), sort_keys=False))
        pid = start_process(s, "alertmanager", [
            alertmanager, f"--config.file={config}", f"--storage.path={folder / 'alertmanager'}",
            f"--web.listen-address={s.host}:{s.alertmanager_port}", "--cluster.listen-address="],
            dict(base), folder)
        wait_until(s, "alertmanager", pid, _http_ready(f"http://{s.host}:{s.alertmanager_port}/-/ready"), "/-/ready")
    if not part_pid(s, "prometheus"):
        config = folder / "prometheus.yml"
        write_private(config, yaml.safe_dump(prometheus_config(s), sort_keys=False))
        pid = start_process(s, "prometheus", [
            prometheus, f"--config.file={config}", f"--storage.tsdb.path={folder / 'prometheus'}",
            f"--web.listen-address={s.host}:{s.prometheus_port}", "--storage.tsdb.retention.time=7d"],
            dict(base), folder)
        wait_until(s, "prometheus", pid, _http_ready(f"http://{s.host}:{s.prometheus_port}/-/ready"), "/-/ready")


def stop(s: StackSettings) -> dict[str, bool]:
    return stop_parts(s, dict.fromkeys(reversed(PARTS)))


def status(s: StackSettings) -> dict[str, Any]:
    urls = {"mail": f"smtp://{s.host}:{s.mail_port}", "exporter": f"http://{s.host}:{s.exporter_port}",
            "statsd": f"http://{s.host}:{s.statsd_http_port}", "alertmanager": f"http://{s.host}:{s.alertmanager_port}",
            "prometheus": f"http://{s.host}:{s.prometheus_port}"}
    return {part: {"running": bool(part_pid(s, part)), "pid": part_pid(s, part), "url": urls[part]} for part in PARTS}


# --- what the stack sent -----------------------------------------------------------------


def mail_folder(s: StackSettings) -> Path:
    return s.state_dir / "mail"


@dataclass(frozen=True)
class SentAlert:
    received: str  # the file's name orders them: nanoseconds since the epoch
    sender: str
    to: str
    subject: str
    text: str  # the body as text, HTML tags removed

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _text(message: email.message.EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    body = part.get_content() if part is not None else ""
    if part is not None and part.get_content_type() == "text/html":
        body = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"(?i)<br\s*/?>|</p>|</li>|</tr>", "\n", body)))
    return "\n".join(line.strip() for line in body.splitlines() if line.strip())


def sent_alerts(s: StackSettings, limit: int | None = None) -> list[SentAlert]:
    """The messages the mail sink received, oldest first (the last ``limit``)."""
    files = sorted(mail_folder(s).glob("*.eml"), key=lambda p: int(p.name.split("-")[0]))
    out = []
    for path in files[-limit:] if limit else files:
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        received = datetime.fromtimestamp(int(path.name.split("-")[0]) / 1e9, timezone.utc)
        out.append(SentAlert(received.isoformat(timespec="seconds"), str(message.get("From", "")),
                             str(message.get("To", "")), str(message.get("Subject", "")), _text(message)))
    return out
