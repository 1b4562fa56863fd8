"""The review queue on the live local stack: a document the data-quality gate quarantined is
decided through `kb review` (Airflow's human-in-the-loop task, answered over the REST API),
and the pipeline does what was decided; the decision and its author are in the ledger."""

from __future__ import annotations

import json
import uuid

from kb.decisions import Decision
from kb.ledger import Status, doc_id_for
from kb.ledger_db import Ledger
from tests.pdfs import coded_pages, make_pdf
from tests.stack.faultkit import INBOX


def _mostly_blank(name: str) -> bytes:
    """One page of text and two blank ones: OCR finds nothing on the blank pages, so the
    empty-page share (2/3) is over the gate's 0.5 and the version is quarantined."""
    return make_pdf(coded_pages(name, 1) + ["", ""])


def _queue(live) -> dict[str, dict]:
    done = live.kb("review", "list", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {row["key"]: row for row in json.loads(done.stdout)}


def _quarantined(live, name: str) -> str:
    prefix = f"review-{uuid.uuid4().hex[:8]}/"
    key = prefix + f"{name}.pdf"
    state, summary = live.ingest(prefix, {f"{name}.pdf": _mostly_blank(name)})
    entry = live.runs.ledger(key)
    assert entry is not None and entry.status == Status.QUARANTINED, (state, summary, entry)
    assert entry.error["code"] == "validation_failed", entry.error
    return key


def test_accept_through_kb_review_indexes_the_pages_that_passed_and_records_who_decided(live):
    key = _quarantined(live, "acceptme")
    runs = live.runs
    queue = _queue(live)
    assert key in queue and queue[key]["code"] == "validation_failed", queue

    done = live.kb("review", "decide", key, "accept", "--wait", timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr

    entry = runs.ledger(key)
    assert entry.status == Status.INDEXED, (entry.status, entry.error)
    chunks = runs.chunks(key)
    assert chunks and all(c.sha256 == entry.indexed_sha256 for c in chunks)
    assert any("ACCEPTME-001" in c.text for c in chunks), [c.text for c in chunks]
    [decision] = Ledger.for_settings(runs.pipeline).decisions(doc_id_for(INBOX, key))
    assert decision.decision == Decision.ACCEPT and decision.quarantine_code == "validation_failed"
    assert decision.decided_by == runs.settings.airflow_user, decision  # the REST user who answered
    assert decision.review_run_id and decision.decided_at
    assert key not in _queue(live)
    hits = live.kb("search", "ACCEPTME-001 maintenance code", "--json")
    assert hits.returncode == 0 and key in {h["key"] for h in json.loads(hits.stdout)}, hits.stdout + hits.stderr


def test_drop_keeps_a_document_out_of_the_index_and_takes_it_off_the_queue(live):
    key = _quarantined(live, "dropme")
    runs = live.runs
    assert key in _queue(live)

    done = live.kb("review", "decide", key, "drop", "--wait", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    assert key not in _queue(live)
    [decision] = Ledger.for_settings(runs.pipeline).decisions(doc_id_for(INBOX, key))
    assert decision.decision == Decision.DROP and decision.decided_by == runs.settings.airflow_user
    # a later run leaves it where it is: quarantined, out of the index, not back in the queue
    state, summary = runs.run(key.rsplit("/", 1)[0] + "/")
    assert runs.ledger(key).status == Status.QUARANTINED and runs.chunks(key) == []
    assert summary is None or not summary.get("documents_quarantined"), summary
    assert key not in _queue(live)


def test_reextract_limits_indexes_with_the_reviewers_threshold_and_records_it(live):
    key = _quarantined(live, "relaxme")
    other = _quarantined(live, "stillbad")
    runs = live.runs

    done = live.kb("review", "decide", key, "reextract-limits", "--param", "max_empty_page_share=0.9", "--wait",
                   timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert runs.ledger(key).status == Status.INDEXED and runs.chunks(key)
    [decision] = Ledger.for_settings(runs.pipeline).decisions(doc_id_for(INBOX, key))
    assert decision.params == {"quality": {"max_empty_page_share": 0.9}}, decision
    # a decision about one document leaves another one where it was: quarantined, in the queue
    state, _ = runs.run(other.rsplit("/", 1)[0] + "/")
    assert runs.ledger(other).status == Status.QUARANTINED and other in _queue(live)

    # an indexed document has nothing to decide: the review run says so, and nothing is recorded
    again = live.kb("review", "decide", key, "drop", timeout=600)
    assert again.returncode == 2 and "not_under_review" in again.stderr, again.stdout + again.stderr
    assert len(Ledger.for_settings(runs.pipeline).decisions(doc_id_for(INBOX, key))) == 1


def test_a_decision_about_a_version_that_was_replaced_is_refused_and_the_new_one_waits(live):
    key = _quarantined(live, "replaced")
    runs = live.runs
    seen = _queue(live)[key]["version"]  # what the reviewer looked at
    prefix, name = key.rsplit("/", 1)
    live.ingest(prefix + "/", {name: make_pdf(coded_pages("replaced-v2", 1) + ["", "", ""])})
    now = _queue(live)[key]["version"]
    assert now != seen and runs.ledger(key).status == Status.QUARANTINED

    done = live.kb("review", "decide", key, "accept", "--version", seen, timeout=600)
    assert done.returncode == 2 and "reviewed_another_version" in done.stderr, done.stdout + done.stderr
    assert now in done.stderr
    assert key in _queue(live) and _queue(live)[key]["version"] == now
    assert Ledger.for_settings(runs.pipeline).decisions(doc_id_for(INBOX, key)) == []


def test_an_unanswered_review_fails_saying_the_document_stays_quarantined():
    """The answer timeout's end (what the scheduler's sweep resumes the task with)."""
    from datetime import timedelta

    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    from kb_airflow.review import ReviewDecisionOperator

    task = ReviewDecisionOperator(task_id="decide", subject="s", options=["accept", "drop"],
                                  response_timeout=timedelta(hours=72))
    assert task.retries == 1  # a lost answer is asked again; a timeout is not (below)
    with pytest.raises(AirflowFailException, match=r"no decision within 3 days.*'scans/x\.pdf' stays quarantined"):
        task.execute_complete({"params": {"key": "scans/x.pdf"}},
                              {"error": "The Human-in-the-loop response timeout has passed", "error_type": "timeout"})
