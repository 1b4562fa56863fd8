"""The review queue in the ledger (``kb_review``): which quarantined versions wait for a
reviewer, the decisions reviewers give, and the record of those applied.

A decision goes through two steps, each a row:

- **given** (``kb_review_given``, one row per review run): written by ``kb review decide``
  before it answers Airflow's human-in-the-loop task. Airflow 3.3.2 can lose that answer (the
  worker exit of the try that asked, handled after the answer, fails the resumed try as
  "changed externally"); the task's next try then reads the decision here instead of asking
  again (``kb_airflow.review``), so a decision given is never lost with it.
- **applied** (``kb_review_decisions``, and the entry's ``review``): written by kb_review's
  ``act``, which removes the run's given row in the same transaction.

One decision per version at a time: a version whose entry already carries a decision that no
run has taken up (``LedgerEntry.pending_decision``) takes no other, given or applied
(``AlreadyDecided``), and no second decision is given while another review run holds one
about the same version. The first decision stands; the second reviewer is told whose it is.
(Two runs answered in Airflow's UI give nothing here: the first of them to apply stands.)
"""

from __future__ import annotations

import random
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Any, Callable

from sqlalchemy import JSON, Column, Connection, Index, Integer, String, Table, Text, func, or_, select

from kb.decisions import Decision
from kb.errors import AlreadyDecided, LedgerConflict, NotUnderReview, ReviewedAnotherVersion
from kb.ledger import LedgerEntry, Review, Status, now_iso
from kb.ledger_schema import CONFLICT_TRIES, entry_from, entry_row, ledger_table, metadata

# Every review decision ever applied (``kb_review``), one row each: who decided what about which
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

# Decisions given to a review run and not applied yet (see the module's docstring): one per
# run, about the version (etag, version_id) the entry had when it was given.
given_table = Table(
    "kb_review_given", metadata,
    Column("review_run_id", String(255), primary_key=True),
    Column("doc_id", String(36), nullable=False),
    Column("etag", String(255), nullable=False),
    Column("version_id", String(255)),
    Column("decision", String(32), nullable=False),
    Column("decided_by", String(255), nullable=False),
    Column("decided_at", String(32), nullable=False),
    Column("params", JSON, nullable=False),
    Index("ix_kb_review_given_doc", "doc_id"),
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


@dataclass(frozen=True)
class GivenDecision:
    """One row of ``kb_review_given``: what a reviewer answered review run ``review_run_id``.
    ``params`` are the human-in-the-loop task's (``quality``, ``version``)."""

    review_run_id: str
    doc_id: str
    etag: str
    version_id: str | None
    decision: Decision
    decided_by: str
    decided_at: str
    params: dict[str, Any]

    @property
    def version(self) -> tuple[str, str | None]:
        return self.etag, self.version_id


def _given(row: Any) -> GivenDecision:
    return GivenDecision(**{**row._asdict(), "decision": Decision(row.decision)})


def _already(entry: LedgerEntry, review: Review) -> AlreadyDecided:
    what = "it waits for the kb_ingest run that takes it up" if review.decision.reopens else "it stays out of the index"
    return AlreadyDecided(f"{entry.key}: this version was decided already: {review.decision} by {review.decided_by} "
                          f"at {review.decided_at} (kb_review run {review.review_run_id}); {what}")


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

    # --- a decision given (kb review decide, before it answers Airflow) --------------------

    def give(self, doc_id: str, decision: Decision | str, decided_by: str, review_run_id: str,
             params: dict[str, Any] | None = None, version: str | None = None,
             decided_at: str | None = None) -> GivenDecision:
        """Record a reviewer's decision for review run ``review_run_id`` before Airflow hears
        of it, replacing one given to the same run before (a reviewer who decides again). The
        same refusals as ``decide`` (NotUnderReview, ReviewedAnotherVersion, AlreadyDecided),
        and AlreadyDecided when another run holds a given decision about the version
        (``withdraw`` the given decisions of runs that ended first). The entry's row is
        compare-and-set, so of two reviewers giving at once exactly one is refused."""
        decision = Decision(decision)
        for attempt in range(CONFLICT_TRIES):
            with self._connection() as conn:
                entry, row_version = self._read(conn, doc_id)
            others = [g for g in self.given_for(doc_id) if g.review_run_id != review_run_id]
            entry = _reviewable(entry, doc_id, version)
            if (pending := entry.pending_decision) is not None:
                raise _already(entry, pending)
            for other in others:
                if other.version == (entry.etag, entry.version_id):
                    raise AlreadyDecided(
                        f"{entry.key}: {other.decided_by} gave a decision about this version ({other.decision}, "
                        f"at {other.decided_at}) to kb_review run {other.review_run_id}, which has not applied it "
                        "yet; the first decision stands")
            given = GivenDecision(review_run_id, doc_id, entry.etag, entry.version_id, decision, decided_by,
                                  decided_at or now_iso(), dict(params or {}))
            with self._connection(write=True) as conn:
                # the entry is unchanged; its row_version is bumped so that a concurrent give or
                # decide, which read the same row, writes nothing and reads again
                if conn.execute(ledger_table.update().where(
                        ledger_table.c.doc_id == doc_id, ledger_table.c.row_version == row_version
                ).values(row_version=row_version + 1)).rowcount == 1:
                    conn.execute(given_table.delete().where(given_table.c.review_run_id == review_run_id))
                    conn.execute(given_table.insert().values(**{**asdict(given), "decision": str(decision)}))
                    return given
            time.sleep(random.uniform(0, 0.01 * (attempt + 1)))
        raise LedgerConflict(f"the ledger entry of {doc_id} kept changing under {CONFLICT_TRIES} attempts to give "
                             "a decision")

    def given(self, review_run_id: str) -> GivenDecision | None:
        """The decision given to review run ``review_run_id`` and not applied yet."""
        with self._connection() as conn:
            row = conn.execute(select(given_table).where(given_table.c.review_run_id == review_run_id)).first()
        return _given(row) if row is not None else None

    def given_for(self, doc_id: str) -> list[GivenDecision]:
        """Every review run's given decision about the document, oldest first."""
        with self._connection() as conn:
            rows = conn.execute(select(given_table).where(given_table.c.doc_id == doc_id)
                                .order_by(given_table.c.decided_at))
            return [_given(row) for row in rows]

    def withdraw(self, review_run_id: str) -> bool:
        """Remove the decision given to ``review_run_id`` (Airflow refused the answer, the run
        refused the decision, or the run ended without applying it); False: there was none."""
        with self._connection(write=True) as conn:
            return conn.execute(given_table.delete().where(given_table.c.review_run_id == review_run_id)).rowcount > 0

    # --- a decision applied (kb_review's act) ------------------------------------------------

    def decide(self, doc_id: str, decision: Decision | str, decided_by: str, decided_at: str | None = None,
               params: dict[str, Any] | None = None, review_run_id: str | None = None,
               version: str | None = None) -> ReviewDecision:
        """Record a reviewer's decision on the document's quarantined version: a row in
        ``kb_review_decisions`` and the entry's ``review``, in one transaction that also
        removes the decision given to ``review_run_id``, and only if the entry is still the one
        read (a compare-and-set on its row). A decision that reopens the version makes it due
        again (``pending_work``); ``drop`` leaves it quarantined and out of the queue.
        ``params["quality"]``: threshold overrides for this version alone.

        ``version``: the version the reviewer saw (its sha256, ETag or version id). A decision
        about another version than the one quarantined now is refused (ReviewedAnotherVersion)
        and that version stays in the queue. NotUnderReview unless the version is quarantined;
        AlreadyDecided when another review run's decision about it is pending (the first
        stands). The same run's decision recorded already is returned, not recorded twice."""
        decision = Decision(decision)
        params = dict(params or {})
        decided_at = decided_at or now_iso()
        for attempt in range(CONFLICT_TRIES):
            with self._connection() as conn:
                entry, row_version = self._read(conn, doc_id)
            entry = _reviewable(entry, doc_id, version)
            if (pending := entry.pending_decision) is not None:
                if review_run_id is not None and pending.review_run_id == review_run_id:
                    return self._recorded(doc_id, review_run_id)
                raise _already(entry, pending)
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
                    if review_run_id is not None:
                        conn.execute(given_table.delete().where(given_table.c.review_run_id == review_run_id))
                    return row
            time.sleep(random.uniform(0, 0.01 * (attempt + 1)))
        raise LedgerConflict(f"the ledger entry of {doc_id} kept changing under {CONFLICT_TRIES} attempts to decide")

    def _recorded(self, doc_id: str, review_run_id: str) -> ReviewDecision:
        return [d for d in self.decisions(doc_id) if d.review_run_id == review_run_id][-1]

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
        """Decisions applied, oldest first (of one document, or all)."""
        rev = review_table
        query = select(*[rev.c[name] for name in ReviewDecision.__dataclass_fields__]).order_by(rev.c.id)
        if doc_id:
            query = query.where(rev.c.doc_id == doc_id)
        with self._connection() as conn:
            return [ReviewDecision(**{**row._asdict(), "decision": Decision(row.decision)}) for row in conn.execute(query)]
