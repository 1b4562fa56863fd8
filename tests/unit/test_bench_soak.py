"""The soak's report keeps every long-lived process, the ones that died too."""

from __future__ import annotations

from kb_dev.bench.soak import long_lived, table


def proc(part: str, pid: int, command: str, rss_mb: float = 100.0, fds: int = 10) -> dict:
    return {"part": part, "pid": pid, "command": command, "rss_mb": rss_mb, "peak_rss_mb": rss_mb, "fds": fds}


BEFORE = [proc("ocr", 11, "python ocr-engine serve"), proc("search", 12, "python kb-search serve"),
          proc("airflow", 13, "airflow worker -- LocalExecutor: idle"), proc("airflow", 14, "airflow scheduler")]
# after the warm-up run: a task process of that run is still there, and a worker took a job
START = [*BEFORE[:2], proc("airflow", 13, "airflow worker -- LocalExecutor: 1f2e"), BEFORE[3],
         proc("airflow", 99, "airflow task runner")]


def report(rows: list[dict]) -> dict:
    died = [p for p in rows if not p["alive"]]
    return {"minutes": 1, "prefix": "soak/x/", "uploads": 3, "documents": 2, "new_versions": 1, "documents_indexed": 2,
            "runs": 2, "searches": 5, "search_p50_ms": 1.0, "search_p99_ms": 2.0, "error_count": len(died),
            "errors": {"failed_runs": [], "search_error_count": 0, "not_indexed": [], "processes_died": died},
            "processes": rows}


def test_a_long_lived_process_that_died_during_the_soak_is_reported_not_dropped():
    end = [proc("ocr", 11, "python ocr-engine serve", rss_mb=110.0, fds=12), BEFORE[2], BEFORE[3]]  # search: gone
    rows = {p["pid"]: p for p in long_lived(BEFORE, START, end)}

    assert sorted(rows) == [11, 12, 13, 14]  # the warm-up's task process (99) is not long-lived
    assert rows[12]["alive"] is False and rows[12]["part"] == "search"
    assert rows[12]["rss_end_mb"] is None and rows[12]["fds_end"] is None
    assert rows[11]["alive"] and rows[11]["rss_growth_pct"] == 10.0 and rows[11]["fds_end"] == 12
    assert rows[13]["alive"] and rows[13]["command"] == "airflow worker"  # a job's title is not a restart
    text = table(report(list(rows.values())))
    assert "1 long-lived processes died" in text
    assert any("search" in line and "DIED" in line for line in text.splitlines())


def test_a_pid_that_now_runs_another_program_counts_as_died():
    end = [*BEFORE[:3], proc("airflow", 14, "python something-else")]
    rows = {p["pid"]: p for p in long_lived(BEFORE, START, end)}
    assert rows[14]["alive"] is False and [p for p in rows.values() if not p["alive"]] == [rows[14]]
