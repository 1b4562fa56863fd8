"""The ledger as a SQL table: one row per document, read by one query per run.

Locally it is SQLite under the state folder (``<state_dir>/ledger.db``) in WAL mode, so the
task processes of one machine read while one writes; in the distributed stack and in
compose it is Postgres, in its own database (``KB_LEDGER_URL``), not Airflow's.

``changes`` answers "what changed" for a bucket listing with one query: the listing goes
into a temporary table and is joined with the ledger, which returns only rows that may
need work (anything but an indexed row of the same version and index signature) and the
rows whose object is gone. ``kb.ledger.pending_work`` then sorts those few rows by the
same rules it always applied, so the rules keep one owner; the SQL is only the filter
that keeps 99.9 % of a steady bucket out of Python.

The JSON ledger that earlier versions kept in the artifacts bucket (``ledger/<doc_id>.json``)
is copied in once, the first time a process opens an empty database; those objects are
left where they were (a backup) and never read again.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Iterator

from sqlalchemy import (
    Column, Index, MetaData, String, Table, Text, and_, create_engine, event, exists, func, inspect, literal, not_,
    or_, select, text, union_all,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from kb.artifacts import ArtifactKeys
from kb.errors import LedgerConflict
from kb.ledger import LedgerEntry, Status, Work, doc_id_for, now_iso, pending_work
from kb.ledger_review import ReviewDecision, ReviewQueue  # noqa: F401 (ReviewDecision: the review's record)
from kb.ledger_schema import (
    CONFLICT_TRIES, dialect_insert, entry_from, entry_row, ledger_errors, ledger_table, metadata,
)
from kb.objectstore import ObjectInfo, ObjectStore

log = logging.getLogger(__name__)

# What has been done to this database once: the JSON ledger's migration.
meta_table = Table(
    "kb_ledger_meta", metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# The retention sweep's memory (``kb.pipeline.retention``). ``kb_retention`` holds what is
# waiting to expire: an artifacts folder (``version_id`` "") or one version of an inbox object,
# with the time the sweep first found no version of the document needing it. Nothing else
# says when a version was superseded, and the clock must not restart each time the
# document changes again. ``kb_retention_seen`` holds each document's ledger ``updated_at``
# when the sweep last looked at it, so a run looks only at documents that changed.
retention_table = Table(
    "kb_retention", metadata,
    Column("bucket", String(255), primary_key=True),
    Column("name", String(1024), primary_key=True),
    Column("version_id", String(255), primary_key=True),
    Column("doc_id", String(36), nullable=False),
    Column("since", String(32), nullable=False),
    Index("ix_kb_retention_since", "since"),
    Index("ix_kb_retention_doc", "doc_id"),
)

retention_seen_table = Table(
    "kb_retention_seen", metadata,
    Column("doc_id", String(36), primary_key=True),
    Column("updated_at", String(32), nullable=False),
)

JSON_MIGRATED = "json_ledger_migrated"
_INSERT_CHUNK = 5000  # listing rows per INSERT into the temporary table


def sqlite_url(path) -> str:
    return f"sqlite:///{path}"


def _on_sqlite_connect(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    # WAL: readers never wait for the writer; a writer waits up to 30 s for another.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


_engines: dict[tuple[str, int], Engine] = {}
_engines_lock = threading.Lock()
_prepared: set[tuple[str, int]] = set()  # (url, pid) whose tables and migration were checked


def engine_for(url: str) -> Engine:
    """One engine per URL and process: a pool must never cross a fork (task runners fork)."""
    key = (url, os.getpid())
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            if url.startswith("sqlite"):
                # NullPool: a connection per unit of work; opening SQLite costs microseconds and
                # no file handle outlives it.
                engine = create_engine(url, poolclass=NullPool)
                event.listen(engine, "connect", _on_sqlite_connect)
            else:
                engine = create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2)
            _engines[key] = engine
    return engine


@dataclass(frozen=True)
class Expiring:
    """Something the retention sweep removes once ``since`` is older than the retention:
    every object under the artifacts folder ``name`` (``version_id`` None), or version
    ``version_id`` of the inbox object ``name``."""

    bucket: str
    name: str
    version_id: str | None
    doc_id: str
    since: str  # ISO 8601, UTC, seconds

    @property
    def ident(self) -> tuple[str, str, str]:
        return self.bucket, self.name, self.version_id or ""


def _under(column, prefix: str):
    """Keys under ``prefix``, case for case. ``startswith`` alone is LIKE, which SQLite
    compares without case ("Reports/" took "reports/" too), while S3 keys are case-sensitive;
    the LIKE stays for an index to narrow with, the substring comparison decides."""
    return and_(column.startswith(prefix, autoescape=True), func.substr(column, 1, len(prefix)) == prefix)


class Ledger(ReviewQueue):
    """Ledger entries in SQL. ``store`` and ``artifacts_bucket`` are only read once, to
    migrate the JSON ledger into an empty database."""

    def __init__(self, url: str, store: ObjectStore | None = None, artifacts_bucket: str | None = None) -> None:
        self.url = url
        self.store = store
        self.artifacts_bucket = artifacts_bucket

    @classmethod
    def for_settings(cls, settings, store: ObjectStore | None = None) -> "Ledger":
        """The ledger ``PipelineSettings`` names (``KB_LEDGER_URL``, else SQLite in the state folder)."""
        return cls(settings.resolved_ledger_url, store, settings.artifacts_bucket)

    @property
    def engine(self) -> Engine:
        return engine_for(self.url)

    # --- the one place SQL errors become kb errors --------------------------------------

    @contextmanager
    def _connection(self, write: bool = False) -> Iterator[Connection]:
        """A connection (a transaction when ``write``) to the prepared database."""
        with ledger_errors():
            self._prepare()
            with self.engine.begin() if write else self.engine.connect() as conn:
                yield conn

    def _prepare(self) -> None:
        """Create the tables, then migrate the JSON ledger once per database (checked once
        per process and URL: a task's ledger calls are then one statement each)."""
        if (self.url, os.getpid()) in _prepared:
            return
        if self.url.startswith("sqlite:///"):
            os.makedirs(os.path.dirname(os.path.abspath(self.url.removeprefix("sqlite:///"))), exist_ok=True)
        metadata.create_all(self.engine, checkfirst=True)
        self._add_missing_columns()
        with self.engine.connect() as conn:
            migrated = conn.execute(select(meta_table.c.value).where(meta_table.c.name == JSON_MIGRATED)).scalar()
        if migrated is None:
            self._migrate_json()
        _prepared.add((self.url, os.getpid()))

    def _add_missing_columns(self) -> None:
        """Columns added since a database was made (``create_all`` makes tables, not columns)."""
        have = {c["name"] for c in inspect(self.engine).get_columns(ledger_table.name)}
        if "row_version" not in have:
            with self.engine.begin() as conn:
                conn.execute(text(f"ALTER TABLE {ledger_table.name} ADD COLUMN row_version INTEGER NOT NULL DEFAULT 0"))

    def _migrate_json(self) -> None:
        entries = list(self._json_entries())
        insert = dialect_insert(self.engine)
        with self.engine.begin() as conn:
            if entries:
                # a row already in SQL is newer than its JSON copy: keep it
                conn.execute(insert(ledger_table).on_conflict_do_nothing(index_elements=["doc_id"]),
                             [entry_row(e) for e in entries])
            conn.execute(insert(meta_table).on_conflict_do_nothing(index_elements=["name"]),
                         [{"name": JSON_MIGRATED, "value": json.dumps({"entries": len(entries), "at": now_iso()})}])
        if entries:
            log.info("ledger: migrated %d JSON entries from s3://%s/%s", len(entries), self.artifacts_bucket,
                     ArtifactKeys.LEDGER)

    def _json_entries(self) -> Iterator[LedgerEntry]:
        if self.store is None or not self.artifacts_bucket or not self.store.bucket_exists(self.artifacts_bucket):
            return
        for obj in self.store.list_latest(self.artifacts_bucket, ArtifactKeys.LEDGER):
            data = self.store.get_json(self.artifacts_bucket, obj.key)
            if data:
                yield LedgerEntry.from_dict(data)

    # --- reads and writes -------------------------------------------------------------

    def get(self, doc_id: str) -> LedgerEntry | None:
        with self._connection() as conn:
            data = conn.execute(select(ledger_table.c.entry).where(ledger_table.c.doc_id == doc_id)).scalar()
        return entry_from(data) if data is not None else None

    def get_many(self, doc_ids: Iterable[str]) -> dict[str, LedgerEntry]:
        ids = list(doc_ids)
        found: dict[str, LedgerEntry] = {}
        with self._connection() as conn:
            for start in range(0, len(ids), _INSERT_CHUNK):
                rows = conn.execute(select(ledger_table.c.entry)
                                    .where(ledger_table.c.doc_id.in_(ids[start:start + _INSERT_CHUNK])))
                for (data,) in rows:
                    entry = entry_from(data)
                    found[entry.doc_id] = entry
        return found

    def put(self, entry: LedgerEntry) -> None:
        self.put_many([entry])

    def put_many(self, entries: Iterable[LedgerEntry]) -> None:
        """Insert or replace entries whole, in one transaction, whatever is there: for entries no
        one else writes (a migration, a benchmark's rows). A stage changes an entry with ``update``."""
        rows = []
        for entry in entries:
            entry.updated_at = now_iso()
            rows.append(entry_row(entry))
        if not rows:
            return
        with self._connection(write=True) as conn:
            stmt = dialect_insert(conn)(ledger_table)
            stmt = stmt.on_conflict_do_update(index_elements=["doc_id"],
                                              set_={**{k: stmt.excluded[k] for k in rows[0] if k != "doc_id"},
                                                    "row_version": ledger_table.c.row_version + 1})
            for start in range(0, len(rows), _INSERT_CHUNK):
                conn.execute(stmt, rows[start:start + _INSERT_CHUNK])

    def update(self, doc_id: str, change: Callable[[LedgerEntry | None], LedgerEntry | None]) -> LedgerEntry | None:
        """Read the entry, let ``change`` make the new one from it (None: leave it), write it back
        only if no other writer changed the row since the read (its ``row_version``), else read
        it again and ``change`` that: two writers of one entry both land, whatever the order.
        ``change`` may run more than once, so it only reads its argument and returns."""
        for attempt in range(CONFLICT_TRIES):
            with self._connection() as conn:
                row = conn.execute(select(ledger_table.c.entry, ledger_table.c.row_version)
                                   .where(ledger_table.c.doc_id == doc_id)).first()
            current = entry_from(row.entry) if row is not None else None
            new = change(current)
            if new is None:
                return current
            new.updated_at = now_iso()
            with self._connection(write=True) as conn:
                if row is None:
                    done = conn.execute(dialect_insert(conn)(ledger_table).values(**entry_row(new))
                                        .on_conflict_do_nothing(index_elements=["doc_id"])).rowcount
                else:
                    done = conn.execute(ledger_table.update().where(
                        ledger_table.c.doc_id == doc_id, ledger_table.c.row_version == row.row_version
                    ).values(**entry_row(new), row_version=row.row_version + 1)).rowcount
            if done == 1:
                return new
            time.sleep(random.uniform(0, 0.01 * (attempt + 1)))  # another writer got in: read again
        raise LedgerConflict(f"the ledger entry of {doc_id} kept changing under {CONFLICT_TRIES} attempts to write it")

    def count(self) -> int:
        from sqlalchemy import func

        with self._connection() as conn:
            return conn.execute(select(func.count()).select_from(ledger_table)).scalar_one()

    def count_by_status(self) -> dict[Status, int]:
        """Documents by the status of their latest version (every status, zero included)."""
        from sqlalchemy import func

        with self._connection() as conn:
            rows = conn.execute(select(ledger_table.c.status, func.count()).group_by(ledger_table.c.status)).all()
        counts = {status: 0 for status in Status}
        counts.update({Status(status): n for status, n in rows})
        return counts

    def changes(self, bucket: str, prefix: str, objects: Iterable[ObjectInfo], max_attempts: int,
                index_signature: str | None = None, at: datetime | None = None) -> Work:
        """What a run should do with ``objects`` (a listing of ``bucket`` under ``prefix``)."""
        listed = {doc_id_for(o.bucket, o.key): o for o in objects}
        sense = Table("kb_sense", MetaData(), Column("doc_id", String(36), primary_key=True),
                      Column("etag", String(255)), Column("version_id", String(255)), prefixes=["TEMPORARY"])
        led = ledger_table
        settled = and_(led.c.status == str(Status.INDEXED), led.c.etag == sense.c.etag,
                       led.c.version_id.is_not_distinct_from(sense.c.version_id))
        if index_signature:
            settled = and_(settled, led.c.index_signature.is_not_distinct_from(literal(index_signature)))
        maybe_work = (select(sense.c.doc_id.label("listed"), led.c.entry)
                      .select_from(sense.outerjoin(led, led.c.doc_id == sense.c.doc_id))
                      .where(or_(led.c.doc_id.is_(None), not_(settled))))
        gone_where = [led.c.bucket == bucket, led.c.status != str(Status.DELETED),
                      ~exists().where(sense.c.doc_id == led.c.doc_id)]
        if prefix:
            gone_where.append(_under(led.c.key, prefix))
        gone = select(literal(None, String).label("listed"), led.c.entry).where(*gone_where)
        with self._connection(write=True) as conn:
            sense.create(conn)
            try:
                rows = [{"doc_id": d, "etag": o.etag, "version_id": o.version_id} for d, o in listed.items()]
                for start in range(0, len(rows), _INSERT_CHUNK):
                    conn.execute(sense.insert(), rows[start:start + _INSERT_CHUNK])
                result = conn.execute(union_all(maybe_work, gone)).all()
            finally:
                sense.drop(conn)
        entries: dict[str, LedgerEntry] = {}
        candidate_ids: list[str] = []
        for listed_id, data in result:
            if data is not None:
                entry = entry_from(data)
                entries[entry.doc_id] = entry
            if listed_id is not None:
                candidate_ids.append(listed_id)
        work = pending_work(bucket, [listed[d] for d in candidate_ids], entries, max_attempts, index_signature, at)
        considered = set(candidate_ids)
        work.unchanged.extend(o for d, o in listed.items() if d not in considered)
        return work

    # --- what the guard and the retention sweep read -----------------------------------

    def indexed_count(self, bucket: str, prefix: str = "") -> int:
        """Documents of ``bucket`` under ``prefix`` with a searchable version, whatever their
        latest version's status (a failed or quarantined new version keeps the old one)."""
        from sqlalchemy import func

        led = ledger_table
        where = [led.c.bucket == bucket, led.c.status != str(Status.DELETED),
                 led.c.entry["indexed_sha256"].as_string().is_not(None)]
        if prefix:
            where.append(_under(led.c.key, prefix))
        with self._connection() as conn:
            return conn.execute(select(func.count()).select_from(led).where(*where)).scalar_one()

    def unswept(self, bucket: str, limit: int) -> list[LedgerEntry]:
        """Up to ``limit`` documents of ``bucket`` that changed since the retention sweep last
        looked at them (or that it never saw), oldest change first."""
        led, seen = ledger_table, retention_seen_table
        query = (select(led.c.entry).select_from(led.outerjoin(seen, seen.c.doc_id == led.c.doc_id))
                 .where(led.c.bucket == bucket,
                        or_(seen.c.doc_id.is_(None), seen.c.updated_at != led.c.updated_at))
                 .order_by(led.c.updated_at, led.c.doc_id).limit(limit))
        with self._connection() as conn:
            return [entry_from(data) for (data,) in conn.execute(query)]

    def expiring_since(self, entry: LedgerEntry, expiring: list[Expiring]) -> None:
        """What of ``entry``'s document waits to expire now: rows already waiting keep their
        ``since``, new ones are added, the others (needed again, or gone) are dropped; and the
        document counts as seen at its current ``updated_at``. One transaction."""
        ret, seen = retention_table, retention_seen_table
        with self._connection(write=True) as conn:
            insert = dialect_insert(conn)
            waiting = {(b, n, v) for b, n, v in conn.execute(
                select(ret.c.bucket, ret.c.name, ret.c.version_id).where(ret.c.doc_id == entry.doc_id))}
            wanted = {e.ident: e for e in expiring}
            for ident in waiting - set(wanted):
                bucket, name, version_id = ident
                conn.execute(ret.delete().where(ret.c.bucket == bucket, ret.c.name == name,
                                                ret.c.version_id == version_id))
            new = [{"bucket": e.bucket, "name": e.name, "version_id": e.version_id or "", "doc_id": e.doc_id,
                    "since": e.since} for ident, e in wanted.items() if ident not in waiting]
            if new:
                conn.execute(insert(ret).on_conflict_do_nothing(), new)
            stmt = insert(seen).values(doc_id=entry.doc_id, updated_at=entry.updated_at)
            conn.execute(stmt.on_conflict_do_update(index_elements=["doc_id"], set_={"updated_at": entry.updated_at}))

    def expiring_due(self, before: str, limit: int) -> list[Expiring]:
        """Up to ``limit`` rows waiting since before ``before`` (ISO 8601), oldest first."""
        ret = retention_table
        query = (select(ret.c.bucket, ret.c.name, ret.c.version_id, ret.c.doc_id, ret.c.since)
                 .where(ret.c.since <= before).order_by(ret.c.since, ret.c.name).limit(limit))
        with self._connection() as conn:
            return [Expiring(b, n, v or None, d, since) for b, n, v, d, since in conn.execute(query)]

    def expiring_done(self, done: Iterable[Expiring]) -> None:
        ret = retention_table
        with self._connection(write=True) as conn:
            for e in done:
                bucket, name, version_id = e.ident
                conn.execute(ret.delete().where(ret.c.bucket == bucket, ret.c.name == name,
                                                ret.c.version_id == version_id))

    def expiring_count(self) -> int:
        from sqlalchemy import func

        with self._connection() as conn:
            return conn.execute(select(func.count()).select_from(retention_table)).scalar_one()

