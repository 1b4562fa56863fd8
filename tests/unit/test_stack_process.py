"""The supervisor's word when a part dies while starting: its fatal line, even when a
goroutine dump after it fills the log's tail (weed's did, in CI)."""

from __future__ import annotations

import sys

import pytest

from kb_dev.errors import ServiceDidNotStart
from kb_dev.settings import StackSettings
from kb_dev.stack.process import start_process, wait_until

DIES_LIKE_WEED = """
print("I1202 10:28:07.1 s3.go:400 starting", flush=True)
print("F1202 10:28:07.2 s3.go:434 S3 API Server listener on 127.0.0.1:42744 error: "
      "listen tcp 127.0.0.1:42744: bind: address already in use", flush=True)
for i in range(40):
    print(f"goroutine {i} [running]:", flush=True)
raise SystemExit(255)
"""


def test_a_part_that_dies_while_starting_is_reported_with_its_fatal_line(tmp_path):
    s = StackSettings(state_dir=tmp_path)
    pid = start_process(s, "dies", [sys.executable, "-c", DIES_LIKE_WEED], {}, tmp_path)
    with pytest.raises(ServiceDidNotStart) as raised:
        wait_until(s, "dies", pid, lambda: False, "never")
    message = str(raised.value)
    assert "dies exited while starting; it said: F1202" in message
    assert "bind: address already in use" in message
    assert message.rstrip().endswith("goroutine 39 [running]:")
