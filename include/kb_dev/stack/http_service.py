"""What the project's two HTTP services (the OCR service and the search service) share as
parts of the stack: ``<command> serve`` from the venv, ready once ``/ready`` answers 200."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx

from kb_dev.settings import StackSettings
from kb_dev.stack.process import part_pid, start_process, wait_until


def start(s: StackSettings, name: str, command: str, env: dict[str, str], base_url: str) -> None:
    pid = start_process(s, name, [str(Path(sys.executable).parent / command), "serve"], env, s.state_dir)

    def ready() -> bool:
        return httpx.get(f"{base_url}/ready", timeout=5).status_code == 200

    wait_until(s, name, pid, ready, f"the {name} service answering /ready on {base_url}")


def status(s: StackSettings, name: str, base_url: str) -> dict[str, Any]:
    pid = part_pid(s, name)
    out: dict[str, Any] = {"running": bool(pid), "pid": pid, "url": base_url, "healthy": False}
    if pid:
        try:
            out["healthy"] = httpx.get(f"{base_url}/ready", timeout=5).status_code == 200
        except httpx.HTTPError as exc:
            out["error"] = str(exc)
    return out
