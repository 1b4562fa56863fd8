"""docker-compose.yaml cannot be started here (no Docker engine); its wiring is checked instead."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def test_compose_has_every_production_part():
    services = compose()["services"]
    for name in ("postgres", "redis", "minio", "minio-init", "qdrant", "airflow-apiserver", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-triggerer", "airflow-worker", "airflow-worker-gpu",
                 "ocr-service", "search-service", "prometheus", "grafana"):
        assert name in services, name


def test_the_gpu_worker_serves_queue_gpu_and_reserves_a_gpu():
    gpu = compose()["services"]["airflow-worker-gpu"]
    assert "--queues gpu" in gpu["command"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert "gpu_ocr" in compose()["services"]["airflow-init"]["command"][-1]


def test_no_secret_is_written_into_the_compose_file():
    text = (REPO / "docker-compose.yaml").read_text()
    found = re.findall(r"^\s*\w*(?:PASSWORD|SECRET|API_KEY)\w*:\s*(\S+)", text, flags=re.MULTILINE)
    assert found
    for value in found:
        assert value.startswith("${"), value
    assert "minioadmin" not in text


def test_published_ports_bind_to_loopback_only():
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_the_ocr_service_runs_on_a_gpu_and_airflow_reaches_it_through_its_connection():
    services = compose()["services"]
    ocr = services["ocr-service"]
    assert ocr["entrypoint"] == ["ocr-engine", "serve"]
    assert ocr["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    env = services["airflow-scheduler"]["environment"]
    assert '"host": "ocr-service"' in env["AIRFLOW_CONN_OCR_SERVICE"] and env["KB_OCR_MODE"] == "service"
    for template in ("dev.env", "test.env", "prod.env"):
        assert (REPO / "include" / "config" / template).is_file()


def test_the_search_service_reads_the_qdrant_server_and_has_its_own_key():
    search = compose()["services"]["search-service"]
    assert search["entrypoint"] == ["kb-search", "serve"]
    env = search["environment"]
    assert env["KB_QDRANT_URL"] == "http://qdrant:6333" and env["KB_SEARCH_API_KEY"].startswith("${")
    assert "/ready" in " ".join(search["healthcheck"]["test"])
