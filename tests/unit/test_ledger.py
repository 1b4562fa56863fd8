from kb.ledger import LedgerEntry, Status, doc_id_for, pending_work
from kb.objectstore import ObjectInfo

DELETED, FAILED, INDEXED, QUARANTINED = Status.DELETED, Status.FAILED, Status.INDEXED, Status.QUARANTINED


def obj(key, etag="e1", version="v1"):
    return ObjectInfo("inbox", key, etag, 10, version)


def entry(key, status, etag="e1", version="v1", attempts=0):
    return LedgerEntry(doc_id_for("inbox", key), "inbox", key, etag, version, 10, status, attempts=attempts)


def test_new_changed_unchanged_and_deleted_are_told_apart():
    entries = {e.doc_id: e for e in [
        entry("same.pdf", INDEXED), entry("edited.pdf", INDEXED), entry("gone.pdf", INDEXED),
        entry("bad.pdf", QUARANTINED), entry("other-bucket.pdf", INDEXED),
    ]}
    entries[doc_id_for("inbox", "other-bucket.pdf")].bucket = "elsewhere"
    work = pending_work("inbox", [obj("same.pdf"), obj("edited.pdf", etag="e2", version="v2"), obj("new.pdf"),
                                  obj("bad.pdf")], entries, max_attempts=3)
    assert [o.key for o in work.new] == ["new.pdf"]
    assert [o.key for o in work.changed] == ["edited.pdf"]
    assert sorted(o.key for o in work.unchanged) == ["bad.pdf", "same.pdf"]  # quarantine is not retried
    assert [e.key for e in work.deleted] == ["gone.pdf"]


def test_failures_are_retried_only_up_to_the_limit():
    entries = {e.doc_id: e for e in [entry("flaky.pdf", FAILED, attempts=1), entry("stuck.pdf", FAILED, attempts=3)]}
    work = pending_work("inbox", [obj("flaky.pdf"), obj("stuck.pdf")], entries, max_attempts=3)
    assert [o.key for o in work.retry] == ["flaky.pdf"]
    assert [o.key for o in work.unchanged] == ["stuck.pdf"]


def test_a_deleted_document_that_returns_is_new_again():
    e = entry("back.pdf", DELETED)
    work = pending_work("inbox", [obj("back.pdf")], {e.doc_id: e}, max_attempts=3)
    assert [o.key for o in work.new] == ["back.pdf"]


def test_doc_ids_are_stable_and_distinct():
    assert doc_id_for("inbox", "a.pdf") == doc_id_for("inbox", "a.pdf")
    assert doc_id_for("inbox", "a.pdf") != doc_id_for("inbox", "b.pdf")
    assert doc_id_for("inbox", "a.pdf") != doc_id_for("other", "a.pdf")


def test_a_failed_version_is_retried_only_once_its_backoff_has_passed():
    from datetime import datetime, timedelta, timezone

    from kb.ledger import backoff_delay, next_attempt_iso

    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    waiting, due = entry("waiting.pdf", FAILED, attempts=1), entry("due.pdf", FAILED, attempts=2)
    waiting.next_attempt_at = next_attempt_iso(1, 600, 3600, at=now)
    due.next_attempt_at = (now - timedelta(seconds=1)).isoformat()
    work = pending_work("inbox", [obj("waiting.pdf"), obj("due.pdf")], {e.doc_id: e for e in (waiting, due)},
                        max_attempts=3, at=now)
    assert [o.key for o in work.retry] == ["due.pdf"] and [o.key for o in work.backing_off] == ["waiting.pdf"]
    later = pending_work("inbox", [obj("waiting.pdf")], {waiting.doc_id: waiting}, max_attempts=3,
                         at=now + timedelta(seconds=601))
    assert [o.key for o in later.retry] == ["waiting.pdf"]
    assert [backoff_delay(n, 600, 3600) for n in (1, 2, 3, 4, 5)] == [600, 1200, 2400, 3600, 3600]


def test_ledger_entries_written_before_backoff_existed_still_load():
    old = {"doc_id": "d", "bucket": "inbox", "key": "a.pdf", "etag": "e", "version_id": None, "size": 1,
           "status": "failed", "attempts": 1, "some_future_field": 1}
    e = LedgerEntry.from_dict(old)
    assert e.status == FAILED and e.next_attempt_at is None and e.due(datetime_now())


def datetime_now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)
