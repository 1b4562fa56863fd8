"""Review decisions in the SQL ledger (SQLite): the queue, what a decision reopens, the record."""

from __future__ import annotations

import pytest

from kb.errors import AlreadyDecided, NotUnderReview, ReviewedAnotherVersion
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


def test_a_second_decision_about_one_version_is_refused_and_the_first_stands(ledger):
    """Two kb_review runs for one key: the second's act is refused, so kb_ingest is not
    triggered twice and the record holds one decision."""
    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    first = ledger.decide(doc_id, Decision.DROP, decided_by="alice", review_run_id="run-1")
    with pytest.raises(AlreadyDecided, match=r"drop by alice .*run-1"):
        ledger.decide(doc_id, Decision.ACCEPT, decided_by="bob", review_run_id="run-2")
    assert ledger.decide(doc_id, Decision.DROP, decided_by="alice", review_run_id="run-1") == first, \
        "the same run's act again: the decision it recorded, not a second one"
    assert [d.decision for d in ledger.decisions(doc_id)] == [Decision.DROP]
    assert ledger.get(doc_id).current_review.decision == Decision.DROP


def test_a_version_sent_back_and_quarantined_again_takes_a_new_decision(ledger):
    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    ledger.decide(doc_id, Decision.REEXTRACT_OCR, decided_by="alice", review_run_id="run-1")
    ledger.review_applied(doc_id, "ingest-1")  # the run that took it up quarantined it again
    ledger.decide(doc_id, Decision.DROP, decided_by="bob", review_run_id="run-2")
    assert [d.decision for d in ledger.decisions(doc_id)] == [Decision.REEXTRACT_OCR, Decision.DROP]


def test_a_decision_given_before_airflow_hears_of_it_is_read_back_and_applied_once(ledger):
    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    params = {"quality": {"max_empty_page_share": 0.9}, "version": "e1"}
    given = ledger.give(doc_id, "reextract-limits", "alice", "run-1", params=params, version="e1")
    assert ledger.given("run-1") == given and ledger.given_for(doc_id) == [given]
    assert (given.decision, given.decided_by, given.params, given.version) == (
        Decision.REEXTRACT_LIMITS, "alice", params, ("e1", "v1"))
    assert ledger.pending_review_count() == 1, "given, not applied: the entry is unchanged"

    ledger.decide(doc_id, given.decision, given.decided_by, params=params, review_run_id="run-1", version="e1")
    assert ledger.given("run-1") is None, "applied: the given row goes in the same transaction"
    assert [d.review_run_id for d in ledger.decisions(doc_id)] == ["run-1"]


def test_a_second_given_decision_about_one_version_is_refused_until_the_first_is_withdrawn(ledger):
    ledger.put(quarantined("a.pdf"))
    doc_id = doc_id_for("inbox", "a.pdf")
    ledger.give(doc_id, Decision.ACCEPT, "alice", "run-1")
    with pytest.raises(AlreadyDecided, match=r"alice .*run-1"):
        ledger.give(doc_id, Decision.DROP, "bob", "run-2")
    again = ledger.give(doc_id, Decision.DROP, "alice", "run-1")  # the same run: the reviewer changed her mind
    assert ledger.given_for(doc_id) == [again]
    assert ledger.withdraw("run-1") and not ledger.withdraw("run-1")
    assert ledger.give(doc_id, Decision.DROP, "bob", "run-2").review_run_id == "run-2"

    ledger.decide(doc_id, Decision.DROP, "bob", review_run_id="run-2")
    with pytest.raises(AlreadyDecided, match="drop by bob"):
        ledger.give(doc_id, Decision.ACCEPT, "carol", "run-3")


def test_a_given_decision_is_refused_like_an_applied_one(ledger):
    ledger.put(quarantined("a.pdf"))
    with pytest.raises(ReviewedAnotherVersion):
        ledger.give(doc_id_for("inbox", "a.pdf"), Decision.ACCEPT, "alice", "run-1", version="e0")
    with pytest.raises(NotUnderReview):
        ledger.give(doc_id_for("inbox", "never-seen.pdf"), Decision.ACCEPT, "alice", "run-1")
    assert ledger.given("run-1") is None


def test_of_two_reviewers_giving_at_once_exactly_one_is_refused(ledger):
    """The entry's row is the lock: both read it, one write lands, the other reads again and
    finds the first's decision."""
    import threading

    for n in range(20):
        key = f"race-{n}.pdf"
        ledger.put(quarantined(key))
        barrier, outcomes = threading.Barrier(2), []

        def give(run: str) -> None:
            barrier.wait()
            try:
                ledger.give(doc_id_for("inbox", key), Decision.ACCEPT, run, f"{key}-{run}")
                outcomes.append("given")
            except AlreadyDecided:
                outcomes.append("refused")

        threads = [threading.Thread(target=give, args=(who,)) for who in ("alice", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["given", "refused"], (n, outcomes)
        assert len(ledger.given_for(doc_id_for("inbox", key))) == 1
