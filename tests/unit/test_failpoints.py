"""``kb.failpoints.hold``: a task process held at a failpoint goes on when the test releases
it, or when the failpoint's ``max_s`` has passed; unarmed, it does not wait at all."""

from __future__ import annotations

import threading
import time

from kb import failpoints


def _held(name: str) -> threading.Thread:
    thread = threading.Thread(target=failpoints.hold, args=(name,), daemon=True)
    thread.start()
    return thread


def test_a_held_process_waits_until_it_is_released(tmp_path, monkeypatch):
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    failpoints.arm(tmp_path, failpoints.INDEX_HOLD)
    thread = _held(failpoints.INDEX_HOLD)
    time.sleep(0.5)
    assert thread.is_alive(), "hold returned before it was released"
    assert failpoints.fired(tmp_path, failpoints.INDEX_HOLD)  # claimed: the test can see it is held
    failpoints.release(tmp_path, failpoints.INDEX_HOLD)
    thread.join(timeout=5)
    assert not thread.is_alive(), "hold did not return after release"


def test_a_hold_nobody_releases_ends_after_max_s_and_an_unarmed_one_does_not_wait(tmp_path, monkeypatch):
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    failpoints.arm(tmp_path, failpoints.INDEX_HOLD, max_s=0.3)
    thread = _held(failpoints.INDEX_HOLD)
    thread.join(timeout=5)
    assert not thread.is_alive(), "hold outlived its max_s"
    thread = _held(failpoints.INDEX_HOLD)  # claimed once already: no longer armed
    thread.join(timeout=5)
    assert not thread.is_alive()
