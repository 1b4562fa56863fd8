"""Review decisions in the SQL ledger (SQLite): the queue, what a decision reopens, the record."""

from __future__ import annotations

import pytest

from kb.errors import NotUnderReview
from kb.decisions import Decision
from kb.ledger import LedgerEntry, Status, doc_id_for
from kb.ledger_db import Ledger, sqlite_url
from kb.objectstore import ObjectInfo


def obj(key, etag="e1", version="v1"):
    return ObjectInfo("inbox", key, etag, 10, version)


def quarantined(key, etag="e1", version="v1", code="validation_failed"):
    return LedgerEntry(doc_id_for("inbox", key), "inbox", key, etag, version, 10, Status.QUARANTINED,
                       error={"code": code, "message": "2 of 3 pages are empty"})


@pytest.fixture
def ledger(tmp_path):
    return Ledger(sqlite_url(tmp_path / "ledger.db"))


def _queue(ledger):
    return [e.key for e in ledger.pending_reviews("inbox")]


def test_the_queue_holds_quarantined_versions_without_a_decision(ledger):
    ledger.put_many([quarantined("a.pdf"), quarantined("b.pdf"),
                     LedgerEntry(doc_id_for("inbox", "ok.pdf"), "inbox", "ok.pdf", "e1", "v1", 10, Status.INDEXED)])
    assert sorted(_queue(ledger)) == ["a.pdf", "b.pdf"] and ledger.pending_review_count() == 2
    ledger.decide(doc_id_for("inbox", "b.pdf"), Decision.DROP, decided_by="alice")
    assert _queue(ledger) == ["a.pdf"] and ledger.pending_review_count("inbox") == 1
    assert ledger.pending_review_count("other-bucket") == 0


def test_a_decision_is_recorded_with_its_author_and_only_about_a_quarantined_version(ledger):
    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    row = ledger.decide(doc_id, "reextract-limits", decided_by="alice", decided_at="2026-12-01T10:00:00+00:00",
                        params={"quality": {"max_empty_page_share": 0.9}}, review_run_id="manual__1")
    [stored] = ledger.decisions(doc_id)
    assert stored == row
    assert (stored.decision, stored.decided_by, stored.decided_at) == (Decision.REEXTRACT_LIMITS, "alice",
                                                                        "2026-12-01T10:00:00+00:00")
    assert stored.params == {"quality": {"max_empty_page_share": 0.9}} and stored.quarantine_code == "validation_failed"
    assert (stored.etag, stored.version_id, stored.review_run_id) == ("e1", "v1", "manual__1")
    review = ledger.get(doc_id).current_review
    assert review.decision == Decision.REEXTRACT_LIMITS and review.quality == {"max_empty_page_share": 0.9}

    entry = ledger.get(doc_id)
    entry.status = Status.INDEXED
    ledger.put(entry)
    with pytest.raises(NotUnderReview):
        ledger.decide(doc_id, Decision.ACCEPT, decided_by="bob")
    with pytest.raises(NotUnderReview):
        ledger.decide(doc_id_for("inbox", "never-seen.pdf"), Decision.ACCEPT, decided_by="bob")
    assert len(ledger.decisions()) == 1


@pytest.mark.parametrize("decision", [d for d in Decision if d.reopens])
def test_a_reopening_decision_makes_the_version_due_once(ledger, decision):
    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    assert ledger.changes("inbox", "", [obj("a.pdf")], max_attempts=3).todo == []  # sticky without a decision

    ledger.decide(doc_id, decision, decided_by="alice")
    work = ledger.changes("inbox", "", [obj("a.pdf")], max_attempts=3)
    assert [o.key for o in work.retry] == ["a.pdf"], "the decision reopens the quarantined version"
    assert ledger.pending_review_count() == 0, "decided, waiting for its run: not in the queue"

    ledger.review_applied(doc_id, "run-2")  # the run that took it up quarantined it again
    assert ledger.changes("inbox", "", [obj("a.pdf")], max_attempts=3).todo == [], "taken up once, not looped"
    assert _queue(ledger) == ["a.pdf"], "a decision that did not fix it puts it back in the queue"


def test_drop_reopens_nothing_and_leaves_the_queue(ledger):
    ledger.put(quarantined("a.pdf"))
    ledger.decide(doc_id_for("inbox", "a.pdf"), Decision.DROP, decided_by="alice")
    work = ledger.changes("inbox", "", [obj("a.pdf")], max_attempts=3)
    assert work.todo == [] and [o.key for o in work.unchanged] == ["a.pdf"]
    assert _queue(ledger) == []


def test_a_decision_is_about_one_version(ledger):
    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    ledger.decide(doc_id, Decision.DROP, decided_by="alice")
    # a new version arrives and is quarantined too (the pipeline's record() clears the review;
    # an entry that kept it would still not apply it to another version)
    entry = ledger.get(doc_id)
    entry.etag, entry.version_id = "e2", "v2"
    ledger.put(entry)
    assert ledger.get(doc_id).current_review is None
    assert not ledger.get(doc_id).reopened
    work = ledger.changes("inbox", "", [obj("a.pdf", "e2", "v2")], max_attempts=3)
    assert work.todo == []


def test_a_new_version_recorded_by_the_pipeline_is_undecided_and_back_in_the_queue(ledger):
    from types import SimpleNamespace

    from kb.pipeline.records import record

    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    ledger.decide(doc_id, Decision.DROP, decided_by="alice")
    assert _queue(ledger) == []
    record(SimpleNamespace(ledger=ledger), ledger.get(doc_id), obj("a.pdf", "e2", "v2"), status=Status.QUARANTINED)
    assert ledger.get(doc_id).review is None and _queue(ledger) == ["a.pdf"]
