"""The review queue in the ledger (``kb_review``): which quarantined versions wait for a
reviewer, and the record of the decisions reviewers made about them."""

from __future__ import annotations

import random
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Any, Callable

from sqlalchemy import JSON, Column, Connection, Index, Integer, String, Table, Text, func, or_, select

from kb.decisions import Decision
from kb.errors import LedgerConflict, NotUnderReview, ReviewedAnotherVersion
from kb.ledger import LedgerEntry, Review, Status, now_iso
from kb.ledger_schema import CONFLICT_TRIES, entry_from, entry_row, ledger_table, metadata

# Every review decision ever made (``kb_review``), one row each: who decided what about which
# quarantined version, and when. The ledger entry carries the latest one for its version
# (``LedgerEntry.review``), which is what the pipeline reads; this table is the record.
# A new table: ``create_all`` adds it to a database made before it existed.
review_table = Table(
    "kb_review_decisions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("doc_id", String(36), nullable=False),
    Column("bucket", String(255), nullable=False),
    Column("key", Text, nullable=False),
    Column("etag", String(255), nullable=False),
    Column("version_id", String(255)),
    Column("decision", String(32), nullable=False),
    Column("decided_by", String(255), nullable=False),
    Column("decided_at", String(32), nullable=False),
    Column("params", JSON, nullable=False),
    Column("review_run_id", String(255)),
    # what the version was quarantined for, when it was decided
    Column("quarantine_code", String(255)),
    Index("ix_kb_review_decisions_doc", "doc_id"),
)

@dataclass(frozen=True)
class ReviewDecision:
    """One row of ``kb_review_decisions``."""

    doc_id: str
    bucket: str
    key: str
    etag: str
    version_id: str | None
    decision: Decision
    decided_by: str
    decided_at: str
    params: dict[str, Any]
    review_run_id: str | None
    quarantine_code: str | None


def _reviewable(entry: LedgerEntry | None, doc_id: str, version: str | None) -> LedgerEntry:
    """``entry`` if its version can be decided about (``version``: the one the reviewer saw,
    None: any), else the refusal."""
    if entry is None or entry.status != Status.QUARANTINED:
        raise NotUnderReview(f"document {doc_id} is {entry.status if entry else 'not in the ledger'}, "
                             "not quarantined: there is nothing to decide")
    if version is not None and version not in {entry.sha256, entry.etag, entry.version_id} - {None}:
        raise ReviewedAnotherVersion(
            f"{entry.key}: the decision is about version {version}, but the version quarantined now is "
            f"{entry.sha256 or entry.version_id or entry.etag} (it landed since); that version stays in the "
            "review queue: look at it and decide again")
    return entry


class ReviewQueue:
    """The review queue's part of ``kb.ledger_db.Ledger`` (a mixin: it uses the ledger's
    connections)."""

    _connection: Callable[..., AbstractContextManager[Connection]]
    update: Callable[..., LedgerEntry | None]

    def _pending_review_where(self, bucket: str | None) -> list:
        """Quarantined versions that wait for a reviewer: no decision on the version, or a
        decision that sent it back and a run that quarantined it again. (``record`` clears
        the review when a new version arrives, so a review is always about the current one.)"""
        led = ledger_table
        review, applied = led.c.entry["review"], led.c.entry[("review", "applied_run")]
        where = [led.c.status == str(Status.QUARANTINED),
                 or_(review.as_string().is_(None), applied.as_string().is_not(None))]
        if bucket:
            where.append(led.c.bucket == bucket)
        return where

    def pending_reviews(self, bucket: str | None = None) -> list[LedgerEntry]:
        """The review queue, oldest quarantine first."""
        query = select(ledger_table.c.entry).where(*self._pending_review_where(bucket)).order_by(
            ledger_table.c.updated_at, ledger_table.c.key)
        with self._connection() as conn:
            return [entry_from(data) for (data,) in conn.execute(query)]

    def pending_review_count(self, bucket: str | None = None) -> int:
        """The queue's length in one COUNT (the exporter's ``kb_review_pending_documents``)."""
        query = select(func.count()).select_from(ledger_table).where(*self._pending_review_where(bucket))
        with self._connection() as conn:
            return conn.execute(query).scalar_one()

    def _read(self, conn: Connection, doc_id: str) -> tuple[LedgerEntry | None, int | None]:
        found = conn.execute(select(ledger_table.c.entry, ledger_table.c.row_version)
                             .where(ledger_table.c.doc_id == doc_id)).first()
        return (entry_from(found.entry), found.row_version) if found is not None else (None, None)

    @staticmethod
    def _set(conn: Connection, entry: LedgerEntry, row_version: int) -> bool:
        """Write ``entry`` over its row if nobody wrote the row since ``row_version`` was read."""
        return conn.execute(ledger_table.update().where(
            ledger_table.c.doc_id == entry.doc_id, ledger_table.c.row_version == row_version
        ).values(**entry_row(entry), row_version=row_version + 1)).rowcount == 1

    def decide(self, doc_id: str, decision: Decision | str, decided_by: str, decided_at: str | None = None,
               params: dict[str, Any] | None = None, review_run_id: str | None = None,
               version: str | None = None) -> ReviewDecision:
        """Record a reviewer's decision on the document's quarantined version: a row in
        ``kb_review_decisions`` and the entry's ``review``, in one transaction, and only if the
        entry is still the one read (a compare-and-set on its row). A decision that reopens the version makes it due
        again (``pending_work``); ``drop`` leaves it quarantined and out of the queue.
        ``params["quality"]``: threshold overrides for this version alone.

        ``version``: the version the reviewer saw (its sha256, ETag or version id). A decision
        about another version than the one quarantined now is refused (ReviewedAnotherVersion)
        and that version stays in the queue. NotUnderReview unless the version is quarantined."""
        decision = Decision(decision)
        params = dict(params or {})
        decided_at = decided_at or now_iso()
        for attempt in range(CONFLICT_TRIES):
            with self._connection() as conn:
                entry, row_version = self._read(conn, doc_id)
            entry = _reviewable(entry, doc_id, version)
            row = ReviewDecision(
                doc_id=doc_id, bucket=entry.bucket, key=entry.key, etag=entry.etag, version_id=entry.version_id,
                decision=decision, decided_by=decided_by, decided_at=decided_at, params=params,
                review_run_id=review_run_id, quarantine_code=(entry.error or {}).get("code"),
            )
            entry.review = Review(decision, decided_by, decided_at, entry.etag, entry.version_id,
                                  quality=dict(params.get("quality") or {}), review_run_id=review_run_id).as_dict()
            entry.updated_at = now_iso()
            with self._connection(write=True) as conn:
                if self._set(conn, entry, row_version):
                    conn.execute(review_table.insert().values(**{**asdict(row), "decision": str(decision)}))
                    return row
            time.sleep(random.uniform(0, 0.01 * (attempt + 1)))
        raise LedgerConflict(f"the ledger entry of {doc_id} kept changing under {CONFLICT_TRIES} attempts to decide")

    def review_applied(self, doc_id: str, run_id: str) -> None:
        """The run ``run_id`` took the reviewed version up: it is not reopened again, and if
        that run quarantines it again it is back in the queue."""
        def change(entry: LedgerEntry | None) -> LedgerEntry | None:
            if entry is None or entry.current_review is None:
                return None
            entry.review = {**entry.review, "applied_run": run_id}
            return entry

        self.update(doc_id, change)

    def decisions(self, doc_id: str | None = None) -> list[ReviewDecision]:
        """Decisions, oldest first (of one document, or all)."""
        rev = review_table
        query = select(*[rev.c[name] for name in ReviewDecision.__dataclass_fields__]).order_by(rev.c.id)
        if doc_id:
            query = query.where(rev.c.doc_id == doc_id)
        with self._connection() as conn:
            return [ReviewDecision(**{**row._asdict(), "decision": Decision(row.decision)}) for row in conn.execute(query)]
