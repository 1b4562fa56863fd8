"""The local stack's secrets: generated once into ``<state_dir>/secrets.env`` (mode 0600)
unless the environment provides them, and read back by every command that reaches the stack."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRET_NAMES = ("KB_S3_ACCESS_KEY", "KB_S3_SECRET_KEY", "KB_AIRFLOW_PASSWORD", "KB_AIRFLOW_JWT_SECRET",
                "KB_OCR_API_KEY", "KB_OCR_S3_ACCESS_KEY", "KB_OCR_S3_SECRET_KEY", "KB_SEARCH_API_KEY",
                "KB_SEARCH_S3_ACCESS_KEY", "KB_SEARCH_S3_SECRET_KEY",
                # the distributed stack's Postgres roles and Redis
                "KB_PG_AIRFLOW_PASSWORD", "KB_PG_LEDGER_PASSWORD", "KB_REDIS_PASSWORD",
                # the local mail sink's login (kb_dev.stack.observe)
                "KB_MAIL_SINK_PASSWORD")
# S3 access keys are conventionally short identifiers; generated ones are cut to this.
ACCESS_KEY_CHARS = 20


def secrets_path(state_dir: Path) -> Path:
    return state_dir / "secrets.env"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner may read (created so, never widened)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def read_env_file(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def read_secrets(state_dir: Path) -> dict[str, str]:
    """The secrets a stack under ``state_dir`` was started with (empty before its first ``kb up``)."""
    return read_env_file(secrets_path(state_dir))


def ensure_secrets(state_dir: Path) -> dict[str, str]:
    """The stack's secrets: from the environment first, else the state folder, else new."""
    stored = read_secrets(state_dir)
    values = {}
    for name in SECRET_NAMES:
        values[name] = os.environ.get(name) or stored.get(name) or secrets.token_urlsafe(24 if "KEY" in name else 32)
    for name in ("KB_S3_ACCESS_KEY", "KB_OCR_S3_ACCESS_KEY", "KB_SEARCH_S3_ACCESS_KEY"):
        values[name] = values[name][:ACCESS_KEY_CHARS]
    if values != {k: stored.get(k) for k in SECRET_NAMES}:
        write_private(secrets_path(state_dir), "".join(f"{k}={v}\n" for k, v in values.items()))
    return values
