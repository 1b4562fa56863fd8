"""The bench's memory limit (kb_dev.bench.memory_limit) is the kernel's: a process that maps a
file larger than its limit runs on, the kernel dropping clean pages; one whose own memory
outgrows the limit is killed. Where no cgroup can be made here, the bench says so (and so
does this test, by skipping)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kb_dev.bench.memory_limit import MemoryLimit, evict_from_page_cache

LIMIT = 96 * 2**20
CHILD = {
    # reads every page of a mapped file twice the limit's size
    "maps": "import mmap, sys; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); "
            "sys.stdin.readline(); print(sum(m[i] for i in range(0, len(m), 4096)))",
    # holds twice the limit in its own memory
    "holds": "import sys; sys.stdin.readline(); b = bytearray(2 * %d); b[::4096] = b'x' * len(b[::4096]); print(len(b))"
             % LIMIT,
}


@pytest.fixture
def limit():
    made = MemoryLimit.create(f"kb-test-{os.getpid()}", LIMIT)
    if made is None:
        pytest.skip("no memory cgroup can be made here (not root, or a read-only cgroup tree)")
    yield made
    made.remove()


def _run_limited(limit: MemoryLimit, code: str, *args: str) -> subprocess.CompletedProcess:
    child = subprocess.Popen(limit.command([sys.executable, "-c", code, *args]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    out, _ = child.communicate("go\n", timeout=120)
    return subprocess.CompletedProcess(child.args, child.returncode, out)


def test_a_mapped_file_over_the_limit_is_read_within_it(limit, tmp_path):
    data = tmp_path / "vectors.bin"
    data.write_bytes(os.urandom(2 * LIMIT))
    assert evict_from_page_cache(tmp_path) == 2 * LIMIT  # else its pages would be free to the child
    done = _run_limited(limit, CHILD["maps"], str(data))
    report = limit.report()
    assert done.returncode == 0 and done.stdout.strip(), done
    assert report["oom_kills"] == 0 and report["peak_mb"] <= LIMIT / 2**20, report
    assert report["reclaims"] > 0, report  # the kernel dropped pages to keep it under


def test_own_memory_over_the_limit_is_killed(limit):
    done = _run_limited(limit, CHILD["holds"])
    assert done.returncode == -9, done
    assert limit.report()["oom_kills"] == 1
