"""Stage 1, sense: list the inbox and compare it with the ledger."""

from __future__ import annotations

import logging

from kb.pipeline.context import Context
from kb.pipeline.messages import Sensed
from kb.pipeline.signature import index_signature

log = logging.getLogger(__name__)


def sense(ctx: Context, prefix: str = "", force: bool = False) -> Sensed:
    """New, changed and due-for-retry objects under ``prefix``. ``force`` re-plans every
    object there (a manual backfill, backoffs included); content already extracted is
    reused and point ids are stable, so it only costs time."""
    s = ctx.settings
    # one bucket listing and one ledger query, however many documents there are
    objects = ctx.store.list_latest(s.inbox_bucket, prefix)
    signature = index_signature(s)
    work = ctx.ledger.changes(s.inbox_bucket, prefix, objects, s.max_attempts, signature)
    if force:
        work.changed, work.unchanged = work.changed + work.unchanged + work.backing_off, []
        work.backing_off = []
    log.info(
        "sensed %s: %d new, %d changed, %d retry, %d backing off, %d unchanged, %d deleted",
        s.inbox_bucket, len(work.new), len(work.changed), len(work.retry), len(work.backing_off),
        len(work.unchanged), len(work.deleted),
    )
    return Sensed(todo=work.todo, unchanged=len(work.unchanged), backing_off=len(work.backing_off),
                  deleted=[e.doc_id for e in work.deleted], force=force, index_signature=signature)
