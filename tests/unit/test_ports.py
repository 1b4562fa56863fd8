"""The test stacks' port chooser: outside the ephemeral range, and never a port that another
live process has chosen (the test workers choose at the same time)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from kb_dev import ports


def test_ports_lie_outside_the_ephemeral_range_and_weed_twins_too():
    lo, hi = ports._ephemeral_range()
    chosen = ports.free_ports(20)
    weed = list(ports.weed_port_set().values())
    assert len(set(chosen + weed)) == 24
    for port in chosen + weed + [p + 10000 for p in weed]:
        assert not lo <= port <= hi and 1024 < port < 65536, port
        assert ports._free(port), f"{port} is bound already"


def test_a_port_another_live_process_chose_is_not_chosen_until_that_process_ends():
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys
            from kb_dev import ports
            print(ports.free_ports(1)[0], flush=True)
            sys.stdin.read()  # hold the port until the parent closes stdin
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        theirs = int(child.stdout.readline())
        assert ports._free(theirs)  # chosen, not yet bound: only the record keeps it theirs
        assert not ports._reserve([theirs])
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    # atexit released it; a record left by a killed process would be judged stale by its pid
    assert ports._reserve([theirs])
    ports._release(theirs)


def test_a_record_left_by_a_dead_process_does_not_hold_its_port():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    port = ports.free_ports(1)[0]
    ports._release(port)
    (ports._records() / str(port)).write_text(dead.stdout.strip())
    assert ports._reserve([port])
    ports._release(port)
