"""The write log's promise to writers: when ``wait_applied`` says a row is applied, every
copy the search service may ask has it (a delete is not read back from a copy a tenth of a
second behind)."""

import threading
import time

from kb.store.oplog import OpLog


def _log_with_a_row(tmp_path) -> tuple[OpLog, int]:
    log = OpLog(tmp_path)
    seq = log.append([{"op": "delete_document", "doc_id": "d"}])
    return log, seq


def test_a_row_is_applied_only_when_every_answering_copy_has_it(tmp_path):
    log, seq = _log_with_a_row(tmp_path)
    try:
        log.report("replica-0", seq)  # one copy has the delete ...
        log.report("replica-1", seq - 1)  # ... the other, which the service may ask next, not yet
        assert log.wait_applied(seq, timeout_s=0.3) is False

        def catch_up():
            time.sleep(0.3)
            log.report("replica-1", seq)

        started = time.monotonic()
        threading.Thread(target=catch_up).start()
        assert log.wait_applied(seq, timeout_s=5) is True
        assert time.monotonic() - started >= 0.25, "returned before the second copy had the row"
    finally:
        log.close()


def test_a_copy_building_its_index_or_stopped_is_not_waited_for(tmp_path):
    log, seq = _log_with_a_row(tmp_path)
    try:
        log.report("replica-0", seq, optimizing=False)
        log.report("replica-1", 0, optimizing=True)  # not asked while it builds; catches up before it answers
        started = time.monotonic()
        assert log.wait_applied(seq, timeout_s=5) is True
        assert time.monotonic() - started < 2
        log.report("replica-1", 0, optimizing=False)
        log.gone("replica-1")  # a stopped copy
        assert log.wait_applied(seq, timeout_s=5) is True
        log.gone("replica-0")
        assert log.wait_applied(seq, timeout_s=5) is False, "no copy runs: the row waits in the log"
    finally:
        log.close()
