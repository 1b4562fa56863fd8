"""`kb bench ingest` times each side after the same untimed warm-up pass."""

from __future__ import annotations

import time

from kb_dev.bench.ingest import warm_then_time


def test_the_warm_up_pass_runs_first_and_is_not_in_the_timed_seconds():
    calls: list[str] = []

    def warm_up():
        calls.append("warm-up")
        time.sleep(0.3)  # a cold start: imports, a model load from disk

    def timed():
        calls.append("timed")
        time.sleep(0.05)
        return {"pages": 20}

    got = warm_then_time(warm_up, timed)
    assert calls == ["warm-up", "timed"]
    assert got.result == {"pages": 20}
    assert 0.05 <= got.seconds < 0.25  # the warm-up's 0.3 s is not charged to the timed pass
    assert got.warm_up_s >= 0.3
