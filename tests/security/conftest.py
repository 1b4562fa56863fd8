"""One live local stack (``kb up``) for the whole security suite: each test probes it from
outside, as a user or an attacker would, on loopback only.

The stack is ``tests/live.py``'s, started once per session and shared with the observability
suite; tests isolate their data by inbox prefix (``security/<test>/``)."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.security)
