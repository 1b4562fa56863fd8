"""The search service part (``kb-search serve``), with its own read-only S3 identity."""

from __future__ import annotations

import os
from typing import Any

from kb.search.client import SearchClient
from kb_dev.settings import StackSettings
from kb_dev.stack import http_service
from kb_dev.stack.process import check_ports_free, part_pid, stop_part
from kb_dev.stack.secrets import read_secrets

PART = "search"


def base_url(s: StackSettings) -> str:
    return f"http://{s.host}:{s.search_port}"


def start(s: StackSettings, secrets_: dict[str, str], extra_env: dict[str, str] | None = None) -> None:
    if part_pid(s, PART):
        return
    check_ports_free(s.host, {"search service": s.search_port})
    env = dict(os.environ)
    env.update({
        "KB_SEARCH_HOST": s.host, "KB_SEARCH_PORT": str(s.search_port),
        "KB_SEARCH_API_KEY": secrets_["KB_SEARCH_API_KEY"],
        "KB_SEARCH_S3_ACCESS_KEY": secrets_["KB_SEARCH_S3_ACCESS_KEY"],
        "KB_SEARCH_S3_SECRET_KEY": secrets_["KB_SEARCH_S3_SECRET_KEY"],
        "KB_S3_ENDPOINT": f"{s.host}:{s.s3_port}",
        "KB_STATE_DIR": str(s.state_dir),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(extra_env or {}),
    })
    for name in ("KB_S3_ACCESS_KEY", "KB_S3_SECRET_KEY"):  # it has an identity of its own
        env.pop(name, None)
    http_service.start(s, PART, "kb-search", env, base_url(s))


def stop(s: StackSettings) -> bool:
    return stop_part(s, PART)


def status(s: StackSettings) -> dict[str, Any]:
    return http_service.status(s, PART, base_url(s))


def client(s: StackSettings) -> SearchClient | None:
    """A client of the running stack's search service, or None when it is not up."""
    if not part_pid(s, PART):
        return None
    found = SearchClient(base_url(s), read_secrets(s.state_dir).get("KB_SEARCH_API_KEY"))
    if found.healthy():
        return found
    found.close()
    return None
