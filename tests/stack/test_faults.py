"""Nothing lost under faults and size, on the session's live stack (``tests/live.py``: its
retry delays are short and its failpoints folder is armed by these tests only).

A clean run of the reference documents under ``clean/`` comes first; every fault then runs
the same bytes under a prefix of its own, and its end state must equal the clean one: the
same point ids and chunk texts in Qdrant, a ledger that says indexed at that content with no
error, and no alert for a document that got in whole. These tests stop and kill parts of the
stack (each brings them back), so they run last.
"""

from __future__ import annotations

import time
from contextlib import closing
from typing import Callable

import httpx
import pytest

from kb import failpoints
from kb.artifacts import ArtifactKeys
from kb_airflow.names import INGEST_DAG_ID
from kb_dev.stack import ocr, s3
from kb_dev.stack.airflow_local import PART, SCHEDULER_PART, restart_scheduler
from kb_dev.stack.process import environment, kill_part, part_pid, processes
from tests.pdfs import (broken_xref_pdf, claims_longer_stream_pdf, claims_more_pages_pdf, coded_pages,
                        deep_page_tree_pdf, deeply_nested_pdf, empty_password_pdf, giant_page_pdf, jpeg_named_pdf,
                        make_pdf, recursive_page_tree_pdf, scanned_copy)
from tests.stack.faultkit import ARTIFACTS, FaultStack, RunEnded

pytestmark = [pytest.mark.stack, pytest.mark.faults]

# made once: the clean run and every fault run upload exactly these bytes
DOCS = {
    "manual.pdf": make_pdf(coded_pages("manual", 8)),
    "scan.pdf": scanned_copy(make_pdf(coded_pages("scan", 3)), dpi=100),
}
MANUAL_V2 = make_pdf(coded_pages("revised", 8))
HOSTILE = {  # name -> (bytes, the quarantine code)
    "recursive.pdf": (recursive_page_tree_pdf(), "malformed_pdf"),
    "nested.pdf": (deeply_nested_pdf(), "malformed_pdf"),
    "deep-tree.pdf": (deep_page_tree_pdf(), "malformed_pdf"),
    "giant-page.pdf": (giant_page_pdf(), "page_too_large"),
    "photo.pdf": (jpeg_named_pdf(), "not_pdf"),
    "claims-pages.pdf": (claims_more_pages_pdf(), "claims_exceed_file"),
    "claims-stream.pdf": (claims_longer_stream_pdf(), "claims_exceed_file"),
}
ODD = {
    "empty-password.pdf": empty_password_pdf(coded_pages("unlocked", 2)),
    "broken-xref.pdf": broken_xref_pdf(coded_pages("repaired", 2)),
}
GB = 1024


@pytest.fixture(scope="module")
def stack(live) -> FaultStack:
    return live.runs


@pytest.fixture(scope="module")
def clean(stack):
    """The reference run: the documents, a second version of the manual, the hostile and the
    odd files, all in one run."""
    stack.upload("clean/", {**DOCS, "manual-v2.pdf": MANUAL_V2, **ODD})
    stack.upload("clean/hostile/", {name: data for name, (data, _) in HOSTILE.items()})
    state, summary = stack.run("clean/")
    assert state == "success", summary
    return summary


def _until_indexed(stack: FaultStack, prefix: str, run_id: str, timeout_s: float = 600) -> list[str]:
    """The run's end, and one more run if it failed: the states, in order."""
    states = [stack.wait(run_id, timeout_s)]
    if states[-1] != "success":
        states.append(stack.run(prefix, timeout_s)[0])
    return states


def _while_running(stack: FaultStack, run_id: str, prefix: str, task: str) -> str:
    """``run_id`` once ``task`` runs in it; or, when the run ended first, the next run's. The
    extract fault can fail a run for good (three tries within S3's downtime) before its index
    task starts, or leave index so little to do that it finishes between two polls (seen in CI)."""
    try:
        stack.wait_for_task(run_id, task, timeout_s=600)
        return run_id
    except RunEnded:
        run_id = stack.trigger(prefix)
        stack.wait_for_task(run_id, task, timeout_s=600)
        return run_id


def _ocr(stack: FaultStack) -> ocr.Replica:
    [replica] = ocr.replicas(stack.settings, distributed=False)
    return replica


def _ocr_requests_in_flight(stack: FaultStack) -> float:
    """The OCR service's ``ocr_requests_in_flight`` gauge; 0 when the service does not answer."""
    key = ocr.api_key(stack.settings)
    try:
        text = httpx.get(f"{_ocr(stack).url}/metrics", timeout=5,
                         headers={"Authorization": f"Bearer {key}"} if key else {}).text
    except httpx.HTTPError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("ocr_requests_in_flight "))


def _until(done: Callable[[], bool], timeout_s: float, every_s: float, failure: str) -> None:
    """Back once ``done()``, asked every ``every_s``; fails with ``failure`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, failure
        time.sleep(every_s)


def _until_ocr_is_reading(stack: FaultStack, timeout_s: float = 120) -> None:
    """Back once the OCR service is answering a request, so a kill drops that request."""
    _until(lambda: _ocr_requests_in_flight(stack) >= 1, timeout_s, 0.1,
           f"no OCR request was in flight within {timeout_s:.0f}s")


def _until_no_try_is_running(stack: FaultStack, run_id: str, task: str, timeout_s: float = 300) -> None:
    """Back once no try of ``task`` runs in ``run_id``: with S3 down, the task has met the outage
    (a try failed, or it recorded its documents' failures) instead of missing it. With a fixed
    10 s downtime, index was seen to finish its only try and the run to succeed: it never met it."""
    _until(lambda: not stack.task_states(run_id).get(task, {}).get("running", 0), timeout_s, 0.3,
           f"{task} still running {timeout_s:.0f}s into the S3 outage")


def _failed_a_try(stack: FaultStack, run_id: str, task: str) -> None:
    """The fault took effect: a try of ``task`` in ``run_id`` failed, so Airflow ran another
    (a task that failed for good has used every retry)."""
    tries = stack.tries(run_id, task)
    assert tries and max(tries) >= 2, (f"no try of {task} failed in run {run_id}: the fault did not take effect",
                                       tries, stack.task_states(run_id))


def _took_effect(stack: FaultStack, run_id: str, task: str) -> None:
    """The outage reached ``task`` in ``run_id``: a try of it failed, or it recorded a document's
    failure (index does, for a page result it could not read), which fails the run."""
    tries = stack.tries(run_id, task)
    if tries and max(tries) >= 2:
        return
    with closing(stack.client()) as client:
        state = client.progress(INGEST_DAG_ID, run_id).state
    assert state == "failed", (f"no try of {task} failed and run {run_id} ended {state}: the fault did not take "
                               "effect", tries, stack.task_states(run_id))


def _expect_documents_as_clean(stack: FaultStack, prefix: str) -> None:
    for name, data in DOCS.items():
        stack.expect_same_as_clean(prefix + name, "clean/" + name, data)


def test_hostile_files_are_quarantined_once_with_a_typed_code_and_odd_ones_are_read(stack, clean):
    assert clean["documents_quarantined"] == len(HOSTILE), clean["quarantine"]
    assert clean["documents_indexed"] == len(DOCS) + 1 + len(ODD) and clean["documents_failed"] == 0
    store = stack.store
    for name, (_, code) in HOSTILE.items():
        key = f"clean/hostile/{name}"
        entry = stack.ledger(key)
        assert entry.status == "quarantined" and entry.error["code"] == code, (key, entry.error)
        record = store.get_json(ARTIFACTS, entry.error["record"])
        assert record["code"] == code and record["key"] == key
        assert len(stack.alerts(key)) == 1, (key, stack.alerts(key))
        assert stack.chunks(key) == []
    for name, label in (("empty-password.pdf", "UNLOCKED"), ("broken-xref.pdf", "REPAIRED")):
        chunks = stack.chunks(f"clean/{name}")
        assert chunks and any(f"{label}-002" in c.text for c in chunks), name
    # the next run finds nothing new: no second alert, no second record
    state, summary = stack.run("clean/")
    assert state == "success" and summary["documents_quarantined"] == 0
    for name in HOSTILE:
        assert len(stack.alerts(f"clean/hostile/{name}")) == 1


def test_ocr_service_killed_mid_run_and_back_30s_later_loses_nothing(stack, clean):
    prefix = "fault-ocr/"
    stack.upload(prefix, DOCS)
    run_id = stack.trigger(prefix)
    stack.wait_for_task(run_id, "extract")
    _until_ocr_is_reading(stack)  # killed between two requests, the client's own retries could hide it
    before = part_pid(stack.settings, _ocr(stack).part)
    assert kill_part(stack.settings, _ocr(stack).part)
    time.sleep(30)
    stack.up()  # starts what is not running: the OCR service
    assert part_pid(stack.settings, _ocr(stack).part) not in (None, before)
    states = _until_indexed(stack, prefix, run_id)
    assert states[-1] == "success", states
    _failed_a_try(stack, run_id, "extract")  # the dropped request failed an extract try
    _expect_documents_as_clean(stack, prefix)


def _until_held(stack: FaultStack, name: str, timeout_s: float = 120) -> None:
    """Back once a task process has claimed the hold failpoint ``name`` and waits in it."""
    _until(lambda: bool(failpoints.fired(stack.failpoints, name)), timeout_s, 0.2,
           f"no task reached the failpoint {name} within {timeout_s:.0f}s")


def test_s3_server_stopped_during_extract_and_during_index_loses_nothing(stack, clean):
    prefix = "fault-s3/"
    stack.upload(prefix, DOCS)
    # index reads S3 only at its start: held there until S3 is down, or the stop can come after
    # its last read and the outage miss it (seen with the machine loaded)
    failpoints.arm(stack.failpoints, failpoints.INDEX_HOLD)
    run_id = stack.trigger(prefix)
    stopped = []  # (run, task) of each stop
    for task in ("extract", "index"):
        run_id = _while_running(stack, run_id, prefix, task)
        if task == "index":
            _until_held(stack, failpoints.INDEX_HOLD)
        assert s3.stop(stack.settings)
        stopped.append((run_id, task))
        if task == "index":
            failpoints.release(stack.failpoints, failpoints.INDEX_HOLD)
        # The outage lasts until no try is running (the condition that matters); the 3 s floor
        # only keeps S3 down while a try that just met it is being failed and recorded.
        time.sleep(3)
        _until_no_try_is_running(stack, run_id, task)
        stack.up()
    states = _until_indexed(stack, prefix, run_id)
    assert states[-1] == "success", states
    for stopped_run, task in stopped:
        _took_effect(stack, stopped_run, task)
    _expect_documents_as_clean(stack, prefix)


def test_vector_store_write_failing_mid_upsert_keeps_the_old_version_whole(stack, clean):
    key = "fault-qdrant/manual.pdf"
    stack.upload("fault-qdrant/", {"manual.pdf": DOCS["manual.pdf"]})
    assert stack.run("fault-qdrant/")[0] == "success"
    old = stack.chunks(key)
    stack.upload("fault-qdrant/", {"manual.pdf": MANUAL_V2})
    failpoints.arm(stack.failpoints, failpoints.QDRANT_UPSERT, after_points=3)
    state, summary = stack.run("fault-qdrant/")
    assert failpoints.fired(stack.failpoints, failpoints.QDRANT_UPSERT), "the write never failed"
    assert state == "failed" and summary["documents_failed"] == 1, summary
    # the three points of the new version that got in were withdrawn: the old version, whole
    assert stack.chunks(key) == old
    entry = stack.ledger(key)
    assert entry.status == "failed" and entry.error["code"] == "store_write_failed", entry.error
    assert entry.indexed_sha256 == old[0].sha256
    # the retry writes the new version, and only it
    assert stack.run("fault-qdrant/")[0] == "success"
    stack.expect_same_as_clean(key, "clean/manual-v2.pdf", MANUAL_V2)


def test_task_process_killed_mid_index_is_retried_to_the_same_result(stack, clean):
    prefix = "fault-kill/"
    stack.upload(prefix, DOCS)
    failpoints.arm(stack.failpoints, failpoints.INDEX_AFTER_UPSERT)
    run_id = stack.trigger(prefix)
    states = _until_indexed(stack, prefix, run_id)
    assert failpoints.fired(stack.failpoints, failpoints.INDEX_AFTER_UPSERT), "no index task was killed"
    assert max(stack.tries(run_id, "index")) >= 2, "the killed index task was not retried"
    assert states == ["success"], states  # the task's retry finished the same run
    _expect_documents_as_clean(stack, prefix)


def test_scheduler_restarted_mid_run_loses_nothing(stack, clean):
    prefix = "fault-scheduler/"
    stack.upload(prefix, DOCS)
    run_id = stack.trigger(prefix)
    stack.wait_for_task(run_id, "extract")
    new = restart_scheduler(stack.settings)
    states = _until_indexed(stack, prefix, run_id)
    assert states[-1] == "success", states
    assert part_pid(stack.settings, SCHEDULER_PART) == new  # the run was finished by the new scheduler
    # with the stack's settings (what `kb up` was given), not this process's environment; read
    # now, not at once: until the new process has exec'd, /proc shows the environment of its fork
    settings = [{k: v for k, v in environment(pid).items() if k.startswith("KB_")}
                for pid in (part_pid(stack.settings, PART), new)]
    assert settings[0].get("KB_RETRY_DELAY_S") == "5" and settings[1] == settings[0]
    _expect_documents_as_clean(stack, prefix)


def _long_documents() -> dict[str, bytes]:
    import pymupdf

    from kb_dev.samples import PAGE_H, PAGE_W, prose_pdf

    scanned = pymupdf.open()
    for i in range(200):
        page = scanned.new_page(width=PAGE_W, height=PAGE_H)
        page.insert_textbox(pymupdf.Rect(60, 60, PAGE_W - 60, 200),
                            f"Archive folio {i + 1}. Register of shipments, batch {1000 + i}, checked by the clerk.",
                            fontsize=14, fontname="helv")
    out = {"born-digital-1000.pdf": prose_pdf(1000, seed=11),
           "image-only-200.pdf": scanned_copy(scanned.tobytes(), dpi=100)}
    scanned.close()
    return out


def test_a_1000_page_and_a_200_page_image_only_document_ingest_within_1_5_gb(stack, clean, capsys):
    prefix = "size/"
    documents = _long_documents()
    stack.upload(prefix, documents)
    run_id = stack.trigger(prefix)
    assert stack.wait(run_id, timeout_s=1500) == "success", stack.task_states(run_id)
    entry = stack.ledger(prefix + "born-digital-1000.pdf")
    assert entry.status == "indexed" and entry.pages == 1000 and not entry.failed_pages
    entry = stack.ledger(prefix + "image-only-200.pdf")
    assert entry.status == "indexed" and entry.pages == 200 and not entry.failed_pages
    assert any("folio 137" in c.text.lower() for c in stack.chunks(prefix + "image-only-200.pdf"))

    store = stack.store
    usage = [store.get_json(ARTIFACTS, o.key) for o in store.list_latest(ARTIFACTS, ArtifactKeys.task_usage_prefix(run_id))]
    services = [p for p in processes(stack.settings) if p["part"] in ("ocr", "search")]
    lines = [f"peak RSS, run {run_id} (1,000 born-digital pages + 200 image-only pages):"]
    for u in sorted(usage, key=lambda u: (u["task_id"], u["map_index"] if u["map_index"] is not None else -1)):
        lines.append(f"  task {u['task_id']}[{u['map_index'] if u['map_index'] is not None else '-'}]: "
                     f"{u['peak_rss_mb']:.0f} MB")
    for p in services:
        lines.append(f"  {p['part']} service (pid {p['pid']}): {p['peak_rss_mb']:.0f} MB peak, {p['rss_mb']:.0f} MB now")
    with capsys.disabled():  # in the test output even when it passes
        print("\n" + "\n".join(lines))
    assert {"sense", "plan", "extract", "index"} <= {u["task_id"] for u in usage}
    assert len([u for u in usage if u["task_id"] == "extract"]) >= 1000 // 50
    over = [u for u in usage if u["peak_rss_mb"] > 1.5 * GB] + [p for p in services if p["peak_rss_mb"] > 1.5 * GB]
    assert not over, over

