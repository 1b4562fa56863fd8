"""Two minutes of uploads and searches on a local stack (``kb bench soak``): every upload
indexed, no error, and no long-lived process growing or leaking descriptors.

The soak waits more than it computes (an upload every 6 s, one small run at a time), and it
times no limit, so it runs in make test's first pass on a stack of its own, beside the tests
that need no stack, instead of holding the shared live stack for its two minutes. The stack
has the observability parts on, so the exporter and the StatsD bridge are held to it too.
"""

from __future__ import annotations

import json

import pytest

from tests.stack.kbcli import kb, stack_env, stack_up

pytestmark = [pytest.mark.own_stack]


@pytest.fixture(scope="module")
def soak_stack(tmp_path_factory, embed_cache) -> dict[str, str]:
    env = stack_env(tmp_path_factory.mktemp("soak-stack"), KB_OBSERVE="true", KB_EMBED_CACHE_DIR=str(embed_cache))
    with stack_up(env):
        yield env


def test_soak_for_two_minutes_processes_every_upload_without_errors_or_growth(soak_stack, capsys):
    done = kb(soak_stack, "bench", "soak", "--minutes", "2", "--interval", "6", "--json", timeout=1200)
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    with capsys.disabled():
        print("\n" + result["table"])
    assert result["error_count"] == 0, result["errors"]
    assert result["uploads"] >= 10 and result["documents_indexed"] == result["documents"]
    parts = {p["part"] for p in result["processes"]}
    assert {"s3", "ocr", "search", "airflow", "exporter"} <= parts, parts
    # a long-lived process that died is in the table and counted as an error, not left out
    assert result["errors"]["processes_died"] == [], result["errors"]["processes_died"]
    for p in result["processes"]:
        assert p["alive"], p
        assert p["fds_end"] <= p["fds_start"] + 20, p  # nothing leaks descriptors per run
        # Our processes and Airflow's stay flat. weed, Prometheus and Alertmanager (Go binaries,
        # not ours) are reported but not held to it: over 30 minutes weed grew 115 -> 414 MB,
        # and a fresh start on the same data took 242 MB (docs/benchmarks/soak.md); Prometheus
        # grows with the series it keeps.
        if p["part"] not in ("s3", "prometheus", "alertmanager"):
            assert p["rss_growth_pct"] < 10, p
