"""Stage 1, sense: list the inbox and compare it with the ledger.

Documents whose objects are no longer listed are retired (their points dropped) by the
DAG's ``retire`` task, within the retire guard: a run retires at most
``KB_MAX_RETIRE_SHARE`` of the indexed documents under its prefix (and always one), else
none, since an empty or partial listing looks exactly like a mass deletion. The hold is
alerted once per set of documents and named in the run summary; a forced run retires them.
"""

from __future__ import annotations

import hashlib
import logging
import math

from kb.ledger import LedgerEntry
from kb.pipeline.context import Context
from kb.pipeline.messages import RetireHold, Sensed
from kb.pipeline.signature import index_signature

log = logging.getLogger(__name__)

HELD_KEYS_SHOWN = 20  # documents a hold names in the summary and the alert


def sense(ctx: Context, prefix: str = "", force: bool = False, reread: bool = False) -> Sensed:
    """New, changed and due-for-retry objects under ``prefix``. ``force`` re-plans every
    object there (a manual backfill, backoffs included); content already extracted is
    reused and point ids are stable, so it only costs time. It also lets the run retire
    more than the retire guard allows. ``reread`` re-plans every object too (not the retire
    guard), and its extract reads again the pages an older extraction version read."""
    s = ctx.settings
    # one bucket listing and one ledger query, however many documents there are
    objects = list(ctx.store.list_latest(s.inbox_bucket, prefix))
    signature = index_signature(s)
    work = ctx.ledger.changes(s.inbox_bucket, prefix, objects, s.max_attempts, signature)
    if force or reread:
        work.changed, work.unchanged = work.changed + work.unchanged + work.backing_off, []
        work.backing_off = []
    retire, held = retire_guard(ctx, prefix, work.deleted, len(objects), force)
    log.info(
        "sensed %s: %d new, %d changed, %d retry, %d backing off, %d unchanged, %d deleted%s",
        s.inbox_bucket, len(work.new), len(work.changed), len(work.retry), len(work.backing_off),
        len(work.unchanged), len(work.deleted), " (held: none retired)" if held else "",
    )
    return Sensed(todo=work.todo, unchanged=len(work.unchanged), backing_off=len(work.backing_off),
                  deleted=retire, force=force, reread=reread, index_signature=signature, retire_held=held)


def retire_guard(ctx: Context, prefix: str, gone: list[LedgerEntry], listed: int,
                 force: bool = False) -> tuple[list[str], RetireHold | None]:
    """The documents this run retires out of ``gone`` (not listed any more), and the hold
    when it retires none of them. Only documents with a searchable version count: retiring
    a quarantined one drops nothing from search."""
    s = ctx.settings
    searchable = [e for e in gone if e.indexed_sha256]
    if force or not searchable:
        return [e.doc_id for e in gone], None
    indexed = ctx.ledger.indexed_count(s.inbox_bucket, prefix)
    allowed = max(1, math.floor(s.max_retire_share * indexed + 1e-9))
    if len(searchable) <= allowed:
        return [e.doc_id for e in gone], None
    ids = sorted(e.doc_id for e in searchable)
    hold = RetireHold(
        bucket=s.inbox_bucket, prefix=prefix, would_retire=len(searchable), indexed=indexed,
        max_share=s.max_retire_share, allowed=allowed, listed=listed,
        keys=sorted(e.key for e in searchable)[:HELD_KEYS_SHOWN],
        fingerprint=hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16],
    )
    log.warning("retire guard: %d of %d indexed documents under s3://%s/%s are not listed (%d objects listed), "
                "more than the %d KB_MAX_RETIRE_SHARE=%s allows; none retired. A forced run retires them.",
                hold.would_retire, indexed, s.inbox_bucket, prefix, listed, allowed, s.max_retire_share)
    return [], hold
