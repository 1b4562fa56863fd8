"""docker-compose.yaml against the Compose Specification's own JSON schema, and the rules an
operator relies on: healthchecks, restart policies, pinned images, dependencies that wait for
health, a `.env.example` that names exactly the variables the file reads, and least
privilege: each secret reaches only the services that use it, and none starts before the
secrets are checked.

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
ONE_SHOT = {"secrets-check", "minio-init", "airflow-init"}
SECRETS_CHECK = "secrets-check"
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
    found = {name for name, s in services().items() if s.get("restart") != "unless-stopped"}
    assert found == ONE_SHOT
    for name in ONE_SHOT:
        # the secrets check fails the same way every time: it is never restarted
        assert re.fullmatch(r"no|on-failure(:\d+)?", services()[name]["restart"]), name
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


# --- least privilege --------------------------------------------------------------------------

AIRFLOW = {"airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
           "airflow-worker", "airflow-worker-gpu"}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|API_KEY|ACCESS_KEY|WEBHOOK_PATH|ROOT_USER|SMTP_USER")

# Which services may hold each secret (besides secrets-check, which checks them all).
HOLDERS = {
    "POSTGRES_PASSWORD": {"postgres"},  # the superuser: no service connects with it
    "AIRFLOW_DB_PASSWORD": {"postgres"} | AIRFLOW,
    "KB_LEDGER_DB_PASSWORD": {"postgres"} | AIRFLOW,
    "KB_SEARCH_DB_PASSWORD": {"postgres", "search-service", "kb-exporter"},  # the ledger, read-only
    "REDIS_PASSWORD": {"redis"} | AIRFLOW,
    "AIRFLOW_JWT_SECRET": AIRFLOW,
    "MINIO_ROOT_USER": {"minio", "minio-init"},
    "MINIO_ROOT_PASSWORD": {"minio", "minio-init"},
    "AIRFLOW_S3_ACCESS_KEY": {"minio-init"} | AIRFLOW,
    "AIRFLOW_S3_SECRET_KEY": {"minio-init"} | AIRFLOW,
    "OCR_S3_ACCESS_KEY": {"minio-init", "ocr-service"},
    "OCR_S3_SECRET_KEY": {"minio-init", "ocr-service"},
    "SEARCH_S3_ACCESS_KEY": {"minio-init", "search-service"},  # read-only policy
    "SEARCH_S3_SECRET_KEY": {"minio-init", "search-service"},
    "EXPORTER_S3_ACCESS_KEY": {"minio-init", "kb-exporter"},  # its own read-only policy
    "EXPORTER_S3_SECRET_KEY": {"minio-init", "kb-exporter"},
    "QDRANT_API_KEY": {"qdrant"} | AIRFLOW,
    "QDRANT_READ_ONLY_API_KEY": {"qdrant", "search-service"},
    "OCR_SERVICE_API_KEY": {"ocr-service"} | AIRFLOW,
    "KB_SEARCH_API_KEY": {"search-service"},
    "SMTP_USER": AIRFLOW | {"alertmanager"},  # the ops alerts: per document (Airflow), rules (Alertmanager)
    "SMTP_PASSWORD": AIRFLOW | {"alertmanager"},
    "ALERT_WEBHOOK_PATH": AIRFLOW | {"alertmanager"},
    "GRAFANA_ADMIN_PASSWORD": {"grafana"},
}


def holders(variable: str) -> set[str]:
    return {name for name, service in services().items() if variable in interpolated(service)} - {SECRETS_CHECK}


def test_every_secret_reaches_only_the_services_that_use_it():
    secrets = {name for name in env_example() if SECRET_NAME.search(name)}
    assert secrets == set(HOLDERS), "a secret in .env.example has no entry in HOLDERS (or the other way round)"
    wrong = {name: sorted(holders(name) ^ HOLDERS[name]) for name in secrets if holders(name) != HOLDERS[name]}
    assert not wrong, f"services that hold a secret they should not, or lack one they need: {wrong}"


def test_nothing_starts_before_the_secrets_check_has_passed_and_it_sees_every_secret():
    check = services()[SECRETS_CHECK]
    assert check["entrypoint"][-1].endswith("/check-secrets.sh") and check["restart"] == "no"
    for name, service in services().items():
        if name != SECRETS_CHECK:
            assert service["depends_on"][SECRETS_CHECK] == {"condition": "service_completed_successfully"}, name
    placeholders = {name for name, (value, _) in env_example().items() if value.startswith("change-me-")}
    assert placeholders <= set(HOLDERS)
    for name in HOLDERS:
        assert check["environment"][name] == f"${{{name}:?set in .env}}", name


def _url(value: str) -> re.Match:
    m = re.fullmatch(r"(?:db\+)?(?P<scheme>[\w+]+)://(?P<user>[\w]*):\$\{(?P<var>\w+):\?[^}]*\}@(?P<host>[\w-]+)"
                     r"(?::\d+)?/(?P<db>\w+)", value)
    assert m, value
    return m


def test_each_database_has_a_role_of_its_own_and_search_reads_the_ledger_as_kb_search():
    all_services = services()
    assert all_services["postgres"]["environment"]["POSTGRES_USER"] == "postgres"
    for name in AIRFLOW:
        env = all_services[name]["environment"]
        for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__RESULT_BACKEND"):
            url = _url(env[key])
            assert (url["user"], url["var"], url["db"]) == ("airflow", "AIRFLOW_DB_PASSWORD", "airflow"), (name, key)
        url = _url(env["KB_LEDGER_URL"])
        assert (url["user"], url["var"], url["db"]) == ("kb_ledger", "KB_LEDGER_DB_PASSWORD", "kb_ledger"), name
    search = all_services["search-service"]
    url = _url(search["environment"]["KB_LEDGER_URL"])  # without it every page image is a 404
    assert (url["scheme"], url["user"], url["var"], url["host"], url["db"]) == \
        ("postgresql+psycopg2", "kb_search", "KB_SEARCH_DB_PASSWORD", "postgres", "kb_ledger")
    assert search["depends_on"]["postgres"] == {"condition": "service_healthy"}
    init = REPO / "include" / "config" / "postgres-init"
    assert sorted(p.name for p in init.glob("*.sh")) == ["00-airflow-db.sh", "01-kb-ledger.sh", "02-kb-search-role.sh"]


def test_redis_takes_a_password_and_airflow_sends_it():
    redis = services()["redis"]
    command = " ".join(redis["command"])
    assert "requirepass" in command and "$$REDIS_PASSWORD" in command and "redis-server -" in command
    assert "docker-entrypoint.sh" in command  # the image's entrypoint still drops root
    health = " ".join(redis["healthcheck"]["test"])
    assert "REDISCLI_AUTH" in health and "grep -q PONG" in health  # redis-cli exits 0 on NOAUTH too
    for name in AIRFLOW:
        broker = services()[name]["environment"]["AIRFLOW__CELERY__BROKER_URL"]
        assert broker == "redis://:${REDIS_PASSWORD:?set in .env}@redis:6379/0", name


POLICIES = REPO / "include" / "config" / "minio-init"
READ_ACTIONS = {"s3:GetBucketLocation", "s3:GetBucketVersioning", "s3:ListBucket", "s3:ListBucketVersions",
                "s3:GetObject", "s3:GetObjectVersion"}


def policy(name: str) -> dict[str, set[str]]:
    """A MinIO policy file as {resource: actions allowed on it}."""
    allowed: dict[str, set[str]] = {}
    for statement in json.loads((POLICIES / f"{name}.json").read_text())["Statement"]:
        assert statement["Effect"] == "Allow"
        for resource in statement["Resource"]:
            allowed.setdefault(resource, set()).update(statement["Action"])
    return allowed


def test_each_service_has_its_own_object_store_user_and_a_policy_that_fits_it():
    all_services = services()
    airflow_conn = json.loads(all_services["airflow-worker"]["environment"]["AIRFLOW_CONN_KB_S3"])
    assert (airflow_conn["login"], airflow_conn["password"]) == \
        ("${AIRFLOW_S3_ACCESS_KEY:?set in .env}", "${AIRFLOW_S3_SECRET_KEY:?set in .env}")
    ocr = all_services["ocr-service"]["environment"]
    assert ocr["OCR_SERVICE_S3_ACCESS_KEY"].startswith("${OCR_S3_ACCESS_KEY:")
    search = all_services["search-service"]["environment"]
    assert search["KB_SEARCH_S3_ACCESS_KEY"].startswith("${SEARCH_S3_ACCESS_KEY:")

    script = (POLICIES / "init.sh").read_text()
    made = dict(re.findall(r'^service_user \S+ "\$(\w+)" "\$\w+" ([\w-]+)$', script, flags=re.MULTILINE))
    assert made == {"AIRFLOW_S3_ACCESS_KEY": "kb-pipeline", "OCR_S3_ACCESS_KEY": "kb-ocr-read",
                    "SEARCH_S3_ACCESS_KEY": "kb-search-read", "EXPORTER_S3_ACCESS_KEY": "kb-exporter-read"}
    exporter = all_services["kb-exporter"]["environment"]
    assert exporter["KB_EXPORTER_S3_ACCESS_KEY"].startswith("${EXPORTER_S3_ACCESS_KEY:")
    assert all_services["minio-init"]["entrypoint"] == ["/bin/sh", "/kb-minio-init/init.sh"]

    pipeline = policy("kb-pipeline")  # reads the inbox, owns the artifacts
    # in the inbox: reads, and the retention sweep removes old versions (never writes or hides one)
    assert pipeline["arn:aws:s3:::inbox"] | pipeline["arn:aws:s3:::inbox/*"] <= READ_ACTIONS | {"s3:DeleteObjectVersion"}
    assert {"s3:PutObject", "s3:DeleteObject"} <= pipeline["arn:aws:s3:::kb-artifacts/*"]
    assert policy("kb-ocr-read") == {"arn:aws:s3:::inbox": {"s3:GetBucketLocation"},
                                     "arn:aws:s3:::inbox/*": {"s3:GetObject", "s3:GetObjectVersion"}}
    search_policy = policy("kb-search-read")
    assert set().union(*search_policy.values()) <= READ_ACTIONS
    assert set(search_policy) == {"arn:aws:s3:::inbox", "arn:aws:s3:::inbox/*"}  # the page images' documents
    assert set().union(*policy("kb-exporter-read").values()) <= READ_ACTIONS
    for name in ("kb-pipeline", "kb-ocr-read", "kb-search-read", "kb-exporter-read"):
        assert not any("*" in action for actions in policy(name).values() for action in actions), name


def test_the_search_service_sends_qdrants_read_only_key():
    all_services = services()
    assert all_services["qdrant"]["environment"]["QDRANT__SERVICE__READ_ONLY_API_KEY"] == \
        "${QDRANT_READ_ONLY_API_KEY:?set in .env}"
    assert all_services["search-service"]["environment"]["KB_QDRANT_API_KEY"] == \
        "${QDRANT_READ_ONLY_API_KEY:?set in .env}"
