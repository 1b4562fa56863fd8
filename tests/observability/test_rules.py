"""Prometheus's alert and recording rules (include/config/prometheus/rules) and their unit
tests (include/config/prometheus/tests), run through Debian's promtool (`make test` installs
the `prometheus` package), plus the coverage promtool does not check itself: every alert has
a test that fires it and one where it stays silent, and every rule file is tested."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kb_dev.observe import dashboards
from kb_dev.observe.alert_rules import render, stale
from kb_dev.observe.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "include" / "config" / "prometheus"
RULE_FILES = sorted((PROMETHEUS / "rules").glob("*.yml"))
TEST_FILES = sorted((PROMETHEUS / "tests").glob("*.yml"))


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is not on PATH: install Debian's prometheus package (make prometheus-packages)"
    return found


def run_promtool(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def alert_names(rule_file: Path) -> set[str]:
    groups = yaml.safe_load(rule_file.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def record_names(rule_file: Path) -> set[str]:
    groups = yaml.safe_load(rule_file.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def alert_cases(test_file: Path) -> list[tuple[str, bool]]:
    """(alert name, fires) for every alert_rule_test case of a promtool test file."""
    cases = []
    for test in yaml.safe_load(test_file.read_text())["tests"]:
        for case in test.get("alert_rule_test") or []:
            cases.append((case["alertname"], bool(case.get("exp_alerts"))))
    return cases


def rule_files_under_test() -> set[Path]:
    files = set()
    for test_file in TEST_FILES:
        for name in yaml.safe_load(test_file.read_text())["rule_files"]:
            files.add((test_file.parent / name).resolve())
    return files


def test_the_rule_and_test_folders_are_not_empty():
    assert RULE_FILES and TEST_FILES


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_promtool_accepts_every_rule_file(rule_file):
    result = run_promtool("check", "rules", rule_file, cwd=rule_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_every_promtool_unit_test_passes(test_file):
    result = run_promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "FAILED" not in result.stdout


def test_every_rule_file_is_loaded_by_some_test_file():
    untested = {p.name for p in RULE_FILES if p.resolve() not in rule_files_under_test()}
    assert not untested, f"rule files no promtool test loads: {sorted(untested)}"


def test_every_alert_has_a_case_that_fires_it_and_one_that_does_not():
    alerts = set().union(*(alert_names(p) for p in RULE_FILES))
    assert alerts
    cases = [case for test_file in TEST_FILES for case in alert_cases(test_file)]
    firing = {name for name, fires in cases if fires}
    silent = {name for name, fires in cases if not fires}
    assert alerts - firing == set(), f"alerts no test fires: {sorted(alerts - firing)}"
    assert alerts - silent == set(), f"alerts no test shows silent: {sorted(alerts - silent)}"
    assert (firing | silent) - alerts == set(), f"tests of alerts that do not exist: {sorted((firing | silent) - alerts)}"


def test_every_recording_rule_has_its_value_tested():
    records = set().union(*(record_names(p) for p in RULE_FILES))
    exprs = [case["expr"] for test_file in TEST_FILES for test in yaml.safe_load(test_file.read_text())["tests"]
             for case in test.get("promql_expr_test") or []]
    # a rule read inside an expr counts: round(kb:quarantine_share:rate1h, 0.0001) checks its value
    tested = {name for name in records for expr in exprs if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr)}
    assert records - tested == set(), f"recording rules whose value no test checks: {sorted(records - tested)}"


def test_every_alert_goes_to_ops_with_a_severity_a_summary_and_a_description():
    for rule_file in RULE_FILES:
        for group in yaml.safe_load(rule_file.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                assert rule["labels"]["team"] == "ops", rule["alert"]
                assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
                assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def test_each_rule_file_lists_its_recording_rules_in_its_header():
    """The dashboards read the header; a recording rule missing from it is one they miss."""
    for rule_file in RULE_FILES:
        header = rule_file.read_text().split("\ngroups:", 1)[0]
        for name in record_names(rule_file):
            assert f"#   {name} " in header, (rule_file.name, name)


def test_promtool_fails_a_test_whose_alert_does_not_fire_as_expected(tmp_path):
    """The unit tests can fail: a copy of a test file that expects silence where the alert
    fires is refused."""
    source = PROMETHEUS / "tests" / "availability_test.yml"
    document = yaml.safe_load(source.read_text())
    document["rule_files"] = [str(PROMETHEUS / "rules" / "availability.yml")]
    for test in document["tests"]:
        for case in test.get("alert_rule_test") or []:
            case["exp_alerts"] = []
    broken = tmp_path / "broken_test.yml"
    broken.write_text(yaml.safe_dump(document))
    result = run_promtool("test", "rules", broken.name, cwd=tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def mapped_airflow_series() -> set[str]:
    """The series names include/config/statsd-mapping.yml produces (a summary's _sum and _count too)."""
    mappings = yaml.safe_load((REPO / "include" / "config" / "statsd-mapping.yml").read_text())["mappings"]
    names = set()
    for mapping in mappings:
        if mapping.get("action") == "drop":
            continue
        names.add(mapping["name"])
        if mapping.get("timer_type") == "summary":
            names |= {mapping["name"] + "_sum", mapping["name"] + "_count"}
    return names


def test_every_airflow_series_the_rules_use_comes_from_the_statsd_mapping():
    used = set()
    for rule_file in RULE_FILES:
        for group in yaml.safe_load(rule_file.read_text())["groups"]:
            for rule in group["rules"]:
                used |= set(re.findall(r"\b(airflow_[a-z_]+)\b", rule["expr"]))
    assert used, "the rules use no Airflow series"
    assert used - mapped_airflow_series() == set(), sorted(used - mapped_airflow_series())


# --- Alertmanager -------------------------------------------------------------------------------

ALERTMANAGER = REPO / "include" / "config" / "alertmanager.yml"
RENDER = REPO / "include" / "config" / "alertmanager-render.sh"
ALERT_VARIABLES = ("SMTP_HOST", "SMTP_PORT", "SMTP_USER", "SMTP_PASSWORD", "ALERT_FROM", "ALERT_EMAIL_TO",
                   "ALERT_WEBHOOK_BASE", "ALERT_WEBHOOK_PATH")


def example_alert_env() -> dict[str, str]:
    """The alert settings of .env.example, as compose would pass them."""
    values = {}
    for line in (REPO / ".env.example").read_text().splitlines():
        m = re.fullmatch(r"([A-Z_]+)=(.*)", line)
        if m and m.group(1) in ALERT_VARIABLES:
            values[m.group(1)] = m.group(2).strip("'")
    assert set(values) == set(ALERT_VARIABLES)
    return values


def amtool() -> str:
    found = shutil.which("amtool")
    assert found, "amtool is not on PATH: install Debian's prometheus-alertmanager package (make prometheus-packages)"
    return found


@pytest.fixture
def rendered(tmp_path):
    env = {"PATH": "/usr/bin:/bin", **example_alert_env(), "ALERT_EMAIL_TO": '["ops@example.org", "oncall@example.org"]'}
    config, secrets = tmp_path / "alertmanager.yml", tmp_path / "secrets"
    subprocess.run(["sh", str(RENDER), str(ALERTMANAGER), str(config), str(secrets)], env=env, check=True,
                   timeout=30)
    return config, secrets, env


def test_the_rendered_alertmanager_config_passes_amtool(rendered):
    config, _, _ = rendered
    result = subprocess.run([amtool(), "check-config", str(config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_the_config_holds_no_secret_and_the_secret_files_are_private(rendered):
    config, secrets, env = rendered
    text = config.read_text()
    assert env["SMTP_PASSWORD"] not in text and env["ALERT_WEBHOOK_PATH"] not in text
    assert (secrets / "smtp_password").read_text() == env["SMTP_PASSWORD"]
    assert (secrets / "webhook_url").read_text() == f"{env['ALERT_WEBHOOK_BASE']}/{env['ALERT_WEBHOOK_PATH']}"
    for secret in secrets.iterdir():
        assert secret.stat().st_mode & 0o077 == 0, secret
    document = yaml.safe_load(text)
    assert document["global"]["smtp_smarthost"] == f"{env['SMTP_HOST']}:{env['SMTP_PORT']}"
    assert document["receivers"][0]["email_configs"][0]["to"] == "ops@example.org,oncall@example.org"


def test_rendering_refuses_a_missing_setting(tmp_path):
    env = {"PATH": "/usr/bin:/bin", **example_alert_env()}
    del env["SMTP_PASSWORD"]
    result = subprocess.run(["sh", str(RENDER), str(ALERTMANAGER), str(tmp_path / "a.yml"), str(tmp_path / "s")],
                            env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0 and "SMTP_PASSWORD" in result.stderr


def test_every_alert_routes_to_ops_mail_and_webhook(rendered):
    config, _, _ = rendered
    document = yaml.safe_load(config.read_text())
    receiver = {r["name"]: r for r in document["receivers"]}
    for rule_file in RULE_FILES:
        for name in alert_names(rule_file):
            result = subprocess.run([amtool(), "config", "routes", "test", f"--config.file={config}", "team=ops",
                                     f"alertname={name}"], capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stdout + result.stderr
            target = result.stdout.strip()
            assert receiver[target].get("email_configs") and receiver[target].get("slack_configs"), (name, target)


# --- the compose scrape config ------------------------------------------------------------------

JOBS = {"ocr-service", "kb-search", "kb-exporter", "airflow"}


def test_the_compose_prometheus_config_passes_promtool_and_loads_every_rule_file(tmp_path):
    """The compose file mounts the rules at /etc/prometheus/rules; here they are read in place."""
    config = (PROMETHEUS.parent / "prometheus.yml").read_text()
    assert "/etc/prometheus/rules/*.yml" in config
    local = tmp_path / "prometheus.yml"
    local.write_text(config.replace("/etc/prometheus/rules/", f"{PROMETHEUS / 'rules'}/"))
    result = run_promtool("check", "config", local, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in result.stdout + result.stderr


def test_the_compose_prometheus_config_scrapes_exactly_the_jobs_the_rules_watch():
    document = yaml.safe_load((PROMETHEUS.parent / "prometheus.yml").read_text())
    assert {job["job_name"] for job in document["scrape_configs"]} == JOBS
    assert document["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    watched = set(re.findall(r'job=~"([^"]+)"', (PROMETHEUS / "rules" / "availability.yml").read_text())[0].split("|"))
    assert watched == JOBS


# --- one owner for each threshold (kb_dev.observe.thresholds) ---------------------------------

def _rule(rules: dict, name: str) -> dict:
    return next(rule for group in rules["groups"] for rule in group["rules"] if rule.get("alert") == name)


def test_the_committed_pipeline_rules_and_cases_are_rendered_from_the_settings_defaults():
    assert stale(Thresholds.defaults()) == [], "run python -m kb_dev.observe.alert_rules"


def test_a_threshold_changed_in_its_setting_moves_the_rule_its_promtool_cases_and_the_dashboard(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_ALERT_QUARANTINE_SHARE", "0.35")
    monkeypatch.setenv("KB_SEARCHABLE_WITHIN_S", "7200")
    changed = Thresholds.from_environment()
    assert changed == Thresholds(0.35, 7200.0)
    for path, text in render(changed).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)

    rules = yaml.safe_load((tmp_path / "rules" / "pipeline.yml").read_text())
    assert _rule(rules, "KBQuarantineShareHigh")["expr"] == "kb:quarantine_share:rate1h > 0.35"
    assert _rule(rules, "KBLandingToSearchableSlow")["expr"] == "kb:landing_to_searchable_seconds:p95_1h > 7200"
    no_success = _rule(rules, "KBPipelineNoSuccessfulRun")  # half the promise, as the `for` too
    assert "kb:pipeline_last_success:age_seconds > 3600" in no_success["expr"] and no_success["for"] == "60m"
    assert "35%" in _rule(rules, "KBQuarantineShareHigh")["annotations"]["summary"]

    # the rendered cases pass against the rendered rules ...
    result = run_promtool("test", "rules", "pipeline_test.yml", cwd=tmp_path / "tests")
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    # ... and the committed (default) cases fail against them: the cases follow the threshold
    stale_cases = tmp_path / "tests" / "pipeline_test.yml"
    stale_cases.write_text((PROMETHEUS / "tests" / "pipeline_test.yml").read_text())
    result = run_promtool("test", "rules", "pipeline_test.yml", cwd=tmp_path / "tests")
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr

    drawn = json.loads(dashboards.render_json(dashboards.build(changed)["kb-ingestion"]))
    panels = {panel["title"]: panel for panel in drawn["panels"]}
    share_steps = panels["Quarantine share (past hour)"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [step["value"] for step in share_steps] == [None, 0.35]
    promise = panels["Landing to searchable p50 / p95 vs the promise"]
    assert "vector(7200)" in [target["expr"] for target in promise["targets"]]
    assert stale(changed) == ["rules/pipeline.yml", "tests/pipeline_test.yml"]


@pytest.mark.parametrize(("share", "promise_s", "refusal"), [
    (1.0, 3600, "leaves no twentieth"),
    (0.2, 90, "even number of minutes"),
    (0.2, 86400, "landing histogram's buckets"),
])
def test_a_threshold_the_cases_cannot_straddle_is_refused_with_what_to_change(share, promise_s, refusal):
    with pytest.raises(ValueError, match=refusal):
        render(Thresholds(share, promise_s))
