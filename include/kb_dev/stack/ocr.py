"""The OCR service part (``ocr-engine serve`` on the CPU): one on the local stack, several
replicas on the distributed one. The replicas' names and ports are decided here only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from kb_dev.settings import StackSettings
from kb_dev.stack import http_service
from kb_dev.stack.process import check_ports_free, part_pid, recorded_parts, stop_parts
from kb_dev.stack.secrets import read_secrets

PART = "ocr"


@dataclass(frozen=True)
class Replica:
    part: str  # its part name: ``ocr`` for the first (as on a stack of one), ``ocr-2``, ...
    port: int
    url: str


def _replica_part(index: int) -> str:
    return PART if index == 0 else f"{PART}-{index + 1}"


def _is_replica_part(name: str) -> bool:
    return name == PART or (name.startswith(f"{PART}-") and name[len(PART) + 1:].isdigit())


def replicas(s: StackSettings, distributed: bool) -> list[Replica]:
    """The OCR services a stack runs: the first on ``ocr_port``; when distributed, up to
    ``ocr_replicas`` of them, the others on ``ocr_replica_ports``."""
    ports = [s.ocr_port, *s.ocr_replica_ports][: s.ocr_replicas] if distributed else [s.ocr_port]
    return [Replica(_replica_part(i), port, f"http://{s.host}:{port}") for i, port in enumerate(ports)]


def api_key(s: StackSettings) -> str | None:
    return read_secrets(s.state_dir).get("KB_OCR_API_KEY")


def start(s: StackSettings, secrets_: dict[str, str], replica: Replica, extra_env: dict[str, str] | None = None) -> None:
    if part_pid(s, replica.part):
        return
    check_ports_free(s.host, {f"OCR service ({replica.part})": replica.port})
    env = dict(os.environ)
    env.update({
        "OCR_SERVICE_HOST": s.host, "OCR_SERVICE_PORT": str(replica.port),
        "OCR_SERVICE_API_KEYS": secrets_["KB_OCR_API_KEY"],
        "OCR_SERVICE_S3_ENDPOINT": f"{s.host}:{s.s3_port}",
        "OCR_SERVICE_S3_ACCESS_KEY": secrets_["KB_OCR_S3_ACCESS_KEY"],
        "OCR_SERVICE_S3_SECRET_KEY": secrets_["KB_OCR_S3_SECRET_KEY"],
        "OCR_DEVICE": env.get("OCR_DEVICE", "cpu"),
        **(extra_env or {}),
    })
    http_service.start(s, replica.part, "ocr-engine", env, replica.url)


def stop(s: StackSettings) -> bool:
    """Every replica ``up`` recorded, whatever the settings say now."""
    return any(stop_parts(s, dict.fromkeys(name for name in recorded_parts(s) if _is_replica_part(name))).values())


def status(s: StackSettings, replica: Replica) -> dict[str, Any]:
    return http_service.status(s, replica.part, replica.url)
