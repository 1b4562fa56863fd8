"""docker-compose.yaml against the Compose Specification's own JSON schema, and the rules an
operator relies on: healthchecks, restart policies, pinned images, dependencies that wait for
health, and a `.env.example` that names exactly the variables the file reads.

No Docker engine runs here, so the file is checked, not started. The schema is vendored
(tests/schemas/SOURCES.md says where it came from).
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from jsonschema.validators import validator_for

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "tests" / "schemas" / "compose-spec.json"
OUR_IMAGE = "kb-pipeline-airflow"
ONE_SHOT = {"minio-init", "airflow-init"}
WAITING_CONDITIONS = {"service_healthy", "service_completed_successfully"}


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def services() -> dict[str, dict]:
    return compose()["services"]


def schema() -> dict:
    return json.loads(SCHEMA.read_text())


def validator_class(spec: dict):
    """The validator of the draft the schema's `$schema` names.

    jsonschema knows drafts up to 7 by their `http://json-schema.org/...` URIs; the compose
    schema writes `https://`. Looked up under the canonical form, never silently replaced
    by the latest draft (jsonschema's fallback for a URI it does not know)."""
    named = spec["$schema"]
    canonical = re.sub(r"^https://json-schema\.org/draft-0([4-7])/", r"http://json-schema.org/draft-0\1/", named)
    cls = validator_for({"$schema": canonical}, default=None)
    assert cls is not None, f"jsonschema has no validator for {named!r}"
    return cls


def schema_errors(document: dict) -> list[str]:
    spec = schema()
    validator = validator_class(spec)(spec)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))]


def interpolated(value) -> set[str]:
    """Names compose interpolates in a value: `${NAME...}` and `$NAME`, but not `$$` (a literal $)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            found |= interpolated(k) | interpolated(v)
    elif isinstance(value, list):
        for v in value:
            found |= interpolated(v)
    elif isinstance(value, str):
        for m in re.finditer(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)|\$([A-Za-z_][A-Za-z0-9_]*)", value):
            if m.group(0) != "$$":
                found.add(m.group(1) or m.group(2))
    return found


def env_example() -> dict[str, tuple[str, str]]:
    """`.env.example` as {name: (value, the comment line right above it)}."""
    entries: dict[str, tuple[str, str]] = {}
    previous = ""
    for line in (REPO / ".env.example").read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
        if m:
            assert m.group(1) not in entries, f"{m.group(1)} is listed twice"
            entries[m.group(1)] = (m.group(2), previous)
        previous = line
    return entries


def image_tag(image: str) -> str | None:
    """The tag of an image reference (a registry's port is not a tag); None when untagged."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


# --- the schema -----------------------------------------------------------------------------


def test_the_validator_is_the_draft_the_schema_names_and_the_schema_is_well_formed():
    spec = schema()
    cls = validator_class(spec)
    assert cls.__name__ == "Draft7Validator"
    cls.check_schema(spec)  # raises SchemaError on a malformed schema


def test_the_compose_file_is_valid_under_the_compose_specification():
    errors = schema_errors(compose())
    assert not errors, "docker-compose.yaml breaks the Compose specification:\n" + "\n".join(errors)


@pytest.mark.parametrize("service, key, broken", [
    ("airflow-scheduler", "depends_on", {"postgres": {"condition": "sometimes"}}),  # not a condition
    ("redis", "healthcheck", {"test": ["CMD", "redis-cli", "ping"], "intervall": "10s"}),  # a typo
    ("redis", "deploy", {"resources": {"reservations": {"devices": [{"capabilities": "gpu"}]}}}),  # not a list
])
def test_the_schema_rejects_a_broken_variant(service, key, broken):
    document = copy.deepcopy(compose())
    document["services"][service][key] = broken
    errors = schema_errors(document)
    assert errors and all(e.startswith(f"services/{service}/{key}") for e in errors), errors


# --- what an operator relies on ---------------------------------------------------------------


def test_every_long_running_service_has_a_healthcheck_and_restarts_unless_stopped():
    for name, service in services().items():
        if name in ONE_SHOT:
            continue
        assert service.get("restart") == "unless-stopped", name
        check = service.get("healthcheck") or {}
        assert not check.get("disable"), name
        assert isinstance(check.get("test"), list) and check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert len(check["test"]) > 1, name


def test_one_shot_services_restart_only_on_failure_and_are_waited_for_until_they_complete():
    found = {name for name, s in services().items() if str(s.get("restart", "")).startswith("on-failure")}
    assert found == ONE_SHOT
    for name in ONE_SHOT:
        assert re.fullmatch(r"on-failure(:\d+)?", services()[name]["restart"]), name
        assert "healthcheck" not in services()[name], name
    waiters = 0
    for name, service in services().items():
        for dependency, how in (service.get("depends_on") or {}).items():
            if dependency in ONE_SHOT:
                assert how["condition"] == "service_completed_successfully", (name, dependency)
                waiters += 1
    assert waiters >= len(ONE_SHOT)


def test_every_depends_on_is_long_form_and_waits_for_health_or_completion():
    all_services = services()
    for name, service in all_services.items():
        depends = service.get("depends_on")
        if depends is None:
            continue
        assert isinstance(depends, dict), f"{name}: depends_on must be the long form"
        for dependency, how in depends.items():
            assert dependency in all_services, (name, dependency)
            condition = how["condition"]
            assert condition in WAITING_CONDITIONS, (name, dependency, condition)
            if condition == "service_healthy":
                assert "healthcheck" in all_services[dependency], (name, dependency)
            else:
                assert dependency in ONE_SHOT, (name, dependency)


def test_every_image_is_pinned_and_ours_carries_the_project_version():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for name, service in services().items():
        image = service.get("image")
        assert image or service.get("build"), name
        if image is None:
            continue
        tag = image_tag(image)
        assert tag and tag != "latest", (name, image)
        if image.split(":", 1)[0] == OUR_IMAGE:
            assert tag == version, (name, image, version)
            assert service.get("build") == ".", name


def test_image_tags_are_read_as_tags():
    assert image_tag("postgres") is None
    assert image_tag("localhost:5000/kb") is None
    assert image_tag("quay.io/minio/mc:RELEASE.2025-08-13T08-35-41Z") == "RELEASE.2025-08-13T08-35-41Z"
    assert image_tag("redis:latest") == "latest"


# --- .env.example -------------------------------------------------------------------------------


def test_env_example_lists_exactly_the_variables_compose_reads():
    read = interpolated(compose())
    listed = set(env_example())
    assert read - listed == set(), f"read by docker-compose.yaml, missing from .env.example: {sorted(read - listed)}"
    assert listed - read == set(), f"in .env.example, read by nothing: {sorted(listed - read)}"


def test_every_example_variable_is_explained_and_no_secret_has_a_real_looking_value():
    for name, (value, comment) in env_example().items():
        assert comment.startswith("# ") and len(comment) > 5, f"{name} has no comment line above it"
        if re.search(r"PASSWORD|SECRET|API_KEY|ACCESS_KEY|WEBHOOK_PATH", name):
            assert value.startswith("change-me-"), (name, value)


def test_interpolation_skips_literal_dollars():
    assert interpolated("$$HOSTNAME ${A:?x} $B ${C:-$$D}") == {"A", "B", "C"}
