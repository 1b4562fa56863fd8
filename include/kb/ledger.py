"""The durable record of what was indexed: one entry per document, and the rules that
turn a bucket listing plus the entries into a run's work.

The entries live in a SQL table (``kb.ledger_db``). A document is identified by bucket
and key; a version by its ETag/version id and, once downloaded, by the sha256 of its bytes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, Iterable

from kb.decisions import Decision
from kb.objectstore import ObjectInfo

DOC_NAMESPACE = uuid.UUID("0b7c4d1e-2f3a-5b6c-8d9e-0a1b2c3d4e5f")


class Status(StrEnum):
    INDEXED = "indexed"
    QUARANTINED = "quarantined"  # the version's own defect: only a new version, or a review decision, reopens it
    FAILED = "failed"  # a failure that may pass: tried again, after a backoff, until max_attempts
    DELETED = "deleted"


def doc_id_for(bucket: str, key: str) -> str:
    return str(uuid.uuid5(DOC_NAMESPACE, f"{bucket}/{key}"))


def now() -> datetime:
    return datetime.now(timezone.utc)


def now_iso() -> str:
    return now().isoformat(timespec="seconds")


def backoff_delay(attempts: int, base_s: float, max_s: float) -> float:
    """Seconds before try ``attempts + 1``: doubling from ``base_s``, capped at ``max_s``."""
    return min(max_s, base_s * 2 ** max(0, attempts - 1))


# ``LedgerEntry.outdated_reading``'s answers: a bounded vocabulary (the exporter's label values)
REREAD_READING_RULES, REREAD_OCR_MODEL, REREAD_NOT_RECORDED = "reading_rules", "ocr_model", "not_recorded"
REREAD_REASONS = (REREAD_READING_RULES, REREAD_OCR_MODEL, REREAD_NOT_RECORDED)


@dataclass
class LedgerEntry:
    doc_id: str
    bucket: str
    key: str
    etag: str
    version_id: str | None
    size: int
    status: Status
    sha256: str | None = None
    attempts: int = 0
    # After a failed attempt: not tried again before this time (ISO 8601, UTC).
    next_attempt_at: str | None = None
    error: dict[str, Any] | None = None
    pages: int | None = None
    chunks: int | None = None
    # Pages the indexed version is searchable without: [{"page", "reason"}].
    failed_pages: list[dict[str, Any]] | None = None
    # The version whose points are in Qdrant now. A later version that fails keeps
    # these, so the ledger never forgets what is searchable.
    indexed_sha256: str | None = None
    indexed_version_id: str | None = None
    indexed_chunks: int | None = None
    embedder: str | None = None
    # the embedder and the sparse scheme the indexed version was made with
    index_signature: str | None = None
    # the extraction versions that read the indexed version's pages (``PageResult.extraction_version``;
    # "" for pages that name none); None: indexed before entries kept them
    extraction_versions: list[str] | None = None
    # the OCR models that read them (``PageResult.ocr_model``; [] where none did); None: indexed
    # before entries kept them
    ocr_models: list[str] | None = None
    collection: str | None = None
    run_id: str | None = None
    updated_at: str = field(default_factory=now_iso)
    # A reviewer's decision on this version (``Review.as_dict()``); a new version clears it.
    review: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def current_review(self) -> "Review | None":
        """The decision on the version the entry is about now (None: no decision on it)."""
        if not self.review:
            return None
        review = Review.from_dict(self.review)
        return review if (review.etag, review.version_id) == (self.etag, self.version_id) else None

    @property
    def pending_decision(self) -> "Review | None":
        """The decision on the version the entry is about now that no run has taken up yet (a
        ``drop`` stays pending: no run takes it up). While there is one the version is out of
        the review queue, and another decision about it is refused (``AlreadyDecided``)."""
        review = self.current_review
        return review if review is not None and review.applied_run is None else None

    @property
    def reopened(self) -> bool:
        """A quarantined version a reviewer sent back into the pipeline, not taken up by a run yet."""
        review = self.pending_decision
        return self.status == Status.QUARANTINED and review is not None and review.decision.reopens

    def outdated_reading(self, extraction_version: str, ocr_model: str | None) -> str | None:
        """Why a ``reread`` run takes up this indexed version, given the reader's extraction
        version and OCR model now (``ocr_model`` None: not compared), or None where it need
        not: ``reading_rules`` (other rules read some pages), ``ocr_model`` (another model read
        some scanned ones), ``not_recorded`` (indexed before entries kept what read them: a
        reread fetches it once, and keeps it if none of its pages is read again)."""
        if self.extraction_versions is None or (ocr_model is not None and self.ocr_models is None):
            return REREAD_NOT_RECORDED
        if self.extraction_versions != [extraction_version]:
            return REREAD_READING_RULES
        if ocr_model is not None and set(self.ocr_models or []) - {ocr_model}:
            return REREAD_OCR_MODEL
        return None

    def same_version(self, obj: ObjectInfo) -> bool:
        return self.etag == obj.etag and self.version_id == obj.version_id

    def due(self, at: datetime) -> bool:
        """Whether a failed version's backoff has passed."""
        return self.next_attempt_at is None or datetime.fromisoformat(self.next_attempt_at) <= at

    @classmethod
    def new(cls, obj: ObjectInfo, status: Status) -> "LedgerEntry":
        return cls(doc_id=doc_id_for(obj.bucket, obj.key), bucket=obj.bucket, key=obj.key, etag=obj.etag,
                   version_id=obj.version_id, size=obj.size, status=status)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LedgerEntry":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Review:
    """A decision on one quarantined version, as the ledger entry carries it: what the
    pipeline does with the version (``decision``, ``quality`` overrides for it alone), who
    decided and when; ``applied_run`` is the run that took it up."""

    decision: Decision
    decided_by: str
    decided_at: str  # ISO 8601, UTC
    etag: str
    version_id: str | None
    quality: dict[str, Any] = field(default_factory=dict)
    review_run_id: str | None = None
    applied_run: str | None = None

    def __post_init__(self) -> None:
        self.decision = Decision(self.decision)

    def as_dict(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in self.__dataclass_fields__}, "decision": str(self.decision)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Review":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class Work:
    """What one run should do, decided by comparing the bucket with the ledger."""

    new: list[ObjectInfo] = field(default_factory=list)
    changed: list[ObjectInfo] = field(default_factory=list)
    retry: list[ObjectInfo] = field(default_factory=list)
    # failed versions whose backoff has not passed yet: left for a later run
    backing_off: list[ObjectInfo] = field(default_factory=list)
    unchanged: list[ObjectInfo] = field(default_factory=list)
    deleted: list[LedgerEntry] = field(default_factory=list)

    @property
    def todo(self) -> list[ObjectInfo]:
        return self.new + self.changed + self.retry


def pending_work(
    bucket: str, objects: Iterable[ObjectInfo], entries: dict[str, LedgerEntry], max_attempts: int,
    index_signature: str | None = None, at: datetime | None = None,
) -> Work:
    """``index_signature`` names the current embedder, sparse scheme and chunking: an indexed
    document made with other ones is changed work (a new embedder is a configuration change).
    ``at`` is the time backoffs are compared with (now by default)."""
    at = at or now()
    work = Work()
    seen = set()
    for obj in objects:
        doc_id = doc_id_for(obj.bucket, obj.key)
        seen.add(doc_id)
        entry = entries.get(doc_id)
        if entry is None or entry.status == Status.DELETED:
            work.new.append(obj)
        elif not entry.same_version(obj):
            work.changed.append(obj)
        elif entry.status == Status.FAILED and entry.attempts < max_attempts:
            (work.retry if entry.due(at) else work.backing_off).append(obj)
        elif entry.reopened:  # a reviewer sent the quarantined version back in
            work.retry.append(obj)
        elif entry.status == Status.INDEXED and index_signature and entry.index_signature != index_signature:
            work.changed.append(obj)
        else:
            # indexed, quarantined, or failed too often: only a new version (or a review) reopens it
            work.unchanged.append(obj)
    for doc_id, entry in entries.items():
        if entry.bucket == bucket and doc_id not in seen and entry.status != Status.DELETED:
            work.deleted.append(entry)
    return work


def next_attempt_iso(attempts: int, base_s: float, max_s: float, at: datetime | None = None) -> str:
    return ((at or now()) + timedelta(seconds=backoff_delay(attempts, base_s, max_s))).isoformat(timespec="seconds")
