"""The ledger's main table and what every part of the ledger shares about it: how an entry
becomes a row and back, the dialect's INSERT, and the one place driver errors become kb
errors. ``kb.ledger_db`` (entries, runs, retention) and ``kb.ledger_review`` (the review
queue) both build on it, so neither imports the other's internals.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Iterator

from sqlalchemy import JSON, Column, Connection, Engine, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.exc import DBAPIError

from kb.errors import LedgerUnavailable
from kb.ledger import LedgerEntry

metadata = MetaData()

ledger_table = Table(
    "kb_ledger", metadata,
    Column("doc_id", String(36), primary_key=True),
    Column("bucket", String(255), nullable=False),
    Column("key", Text, nullable=False),
    Column("etag", String(255), nullable=False),
    Column("version_id", String(255)),
    Column("status", String(16), nullable=False),
    Column("index_signature", String(255)),
    Column("updated_at", String(32), nullable=False),
    # the whole LedgerEntry; the columns above are copies that queries filter on
    Column("entry", JSON, nullable=False),
    # Bumped by every write of the row: a write names the version it read, and a row another
    # writer changed since is not overwritten (``Ledger.update`` reads it again and retries).
    Column("row_version", Integer, nullable=False, server_default="0"),
    Index("ix_kb_ledger_bucket_key", "bucket", "key"),
)

# How often a compare-and-set on an entry's row is tried before LedgerConflict.
CONFLICT_TRIES = 20


@contextmanager
def ledger_errors() -> Iterator[None]:
    """The database driver's failures as ``LedgerUnavailable`` (a later attempt may pass); the URL, which
    may hold a password, is never part of the message."""
    try:
        yield
    except DBAPIError as exc:
        raise LedgerUnavailable(f"the ledger database failed: {type(exc.orig).__name__}: {exc.orig}") from exc


def dialect_insert(bind: Engine | Connection):
    """The dialect's INSERT, which knows ON CONFLICT (SQLite and Postgres both do)."""
    if bind.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def entry_row(entry: LedgerEntry) -> dict[str, Any]:
    """An entry as the values of its ``kb_ledger`` row."""
    return {
        "doc_id": entry.doc_id, "bucket": entry.bucket, "key": entry.key, "etag": entry.etag,
        "version_id": entry.version_id, "status": str(entry.status), "index_signature": entry.index_signature,
        "updated_at": entry.updated_at, "entry": json.loads(json.dumps(asdict(entry), default=str)),
    }


def entry_from(data: Any) -> LedgerEntry:
    """An entry from its row's ``entry`` column (JSON text on some drivers)."""
    return LedgerEntry.from_dict(json.loads(data) if isinstance(data, str) else data)
