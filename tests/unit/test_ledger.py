from kb.ledger import DELETED, FAILED, INDEXED, QUARANTINED, LedgerEntry, doc_id_for, pending_work
from kb.objectstore import ObjectInfo


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
