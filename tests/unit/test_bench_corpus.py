"""`kb bench corpus` counts the pages the ledger says were indexed, not the pages the corpus lists."""

from __future__ import annotations

from kb_dev.bench.corpus import indexed_pages
from kb.ledger import LedgerEntry, Status

SHA = "a" * 64


def entry(status: Status, pages: int | None, failed: int = 0, sha: str | None = SHA) -> LedgerEntry:
    return LedgerEntry(doc_id="d", bucket="inbox", key="corpus/x.pdf", etag="e", version_id=None, size=1,
                       status=status, sha256=sha, pages=pages, indexed_sha256=sha,
                       failed_pages=[{"page": p + 1, "reason": "ocr_failed"} for p in range(failed)] or None)


def test_an_indexed_document_counts_its_ledger_pages_less_the_failed_ones():
    assert indexed_pages(entry(Status.INDEXED, 114), SHA) == 114
    assert indexed_pages(entry(Status.INDEXED, 114, failed=3), SHA) == 111


def test_a_document_not_indexed_at_the_uploaded_content_counts_nothing():
    assert indexed_pages(None, SHA) == 0
    assert indexed_pages(entry(Status.QUARANTINED, 12), SHA) == 0
    assert indexed_pages(entry(Status.FAILED, 12), SHA) == 0
    assert indexed_pages(entry(Status.INDEXED, 12, sha="b" * 64), SHA) == 0  # an earlier version's pages
