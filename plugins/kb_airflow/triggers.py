"""Triggers: async watchers that run in the Airflow triggerer.

The DAG file builds them at parse time, so this module stays light: the S3 client (minio,
through ``kb.objectstore`` and the hook) is imported inside ``run``, in the triggerer only.

How the triggerer runs an asset watcher's trigger (Airflow 3.3, read in its source): it is
started once and kept running. After an event the triggerer only records an asset event and
resumes the same generator, so the state below lives in this instance. A fresh instance,
built from ``serialize()``'s kwargs, starts only when a triggerer starts or takes the trigger
over, when the DAG's watcher changes, or after ``run`` returned or raised (then within a
second or two, which is why ``run`` never raises on a failed listing).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any, TypedDict

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

MAX_EVENT_KEYS = 20
# The asset state store key of the last listing an event (or the start) accounted for.
CURSOR_KEY = "inbox_listing_sha256"
# The watcher spends at most about a fifth of its time listing: the pause before a listing is
# at least this many times what the last one took.
LISTING_PACE = 4.0

Listing = dict[str, str]  # key -> version (the version id, else the ETag), as kb_ingest's sense sees it


class InboxChange(TypedDict):
    """An event's payload (kept in the asset event's ``extra``): what changed, for the logs and
    the UI. The run lists the bucket itself, so nothing depends on the keys being complete."""

    bucket: str
    reason: str  # "changed", or "changed_while_unwatched" (seen against the stored cursor at start)
    changed: int | None  # keys added, replaced or removed; None when only a digest was kept
    keys: list[str]  # the first MAX_EVENT_KEYS of them, sorted


def listing_digest(listing: Listing) -> str:
    return hashlib.sha256(json.dumps(sorted(listing.items())).encode()).hexdigest()


class InboxChangeTrigger(BaseEventTrigger):
    """One event when the objects in ``bucket`` change, for an ``AssetWatcher``.

    Lists the bucket every ``interval_s`` and compares the listing with a baseline: the
    listing the last event reported, else the first one. A change fires once the listing has
    held still for one interval (a burst of uploads is one event), or after ``max_delay_s`` of
    changing; the baseline then moves to what was reported, so a run working through the
    files sees no more events until something else changes.

    Across restarts: where the triggerer injects the asset state store (Airflow 3.3 watchers),
    the digest of the reported listing is kept there, and a new instance whose first listing
    differs from it fires once ("changed_while_unwatched"). Without a stored digest, what is
    there at the start is the baseline: no event. The cron schedule and the run's own full
    listing catch anything a watcher misses.

    The credentials come from the Airflow connection ``s3_conn_id`` when ``run`` first lists, never
    from the kwargs: those are stored in the metadata database.
    """

    def __init__(self, bucket: str, interval_s: float = 5.0, max_delay_s: float = 60.0,
                 s3_conn_id: str = "kb_s3") -> None:
        super().__init__()
        self.bucket = bucket
        self.interval_s = float(interval_s)
        self.max_delay_s = float(max_delay_s)
        self.s3_conn_id = s3_conn_id
        self._store = None
        self._failing = False
        self._cursor_usable = True
        self._listing_s = 0.0  # how long the last listing took

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Everything here is part of the watcher's identity (the DAG processor hashes it), so
        # it is the configuration only, and stable from one parse to the next.
        return (
            "kb_airflow.triggers.InboxChangeTrigger",
            {"bucket": self.bucket, "interval_s": self.interval_s, "max_delay_s": self.max_delay_s,
             "s3_conn_id": self.s3_conn_id},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        baseline = await self.list_inbox()
        while baseline is None:
            await asyncio.sleep(self.pause_s())
            baseline = await self.list_inbox()
        stored = await self._cursor()
        if stored is not None and stored != listing_digest(baseline):
            yield TriggerEvent(InboxChange(bucket=self.bucket, reason="changed_while_unwatched", changed=None,
                                           keys=[]))
        if stored != listing_digest(baseline):
            await self._remember(baseline)

        previous, changing_since = baseline, None
        while True:
            await asyncio.sleep(self.pause_s())
            current = await self.list_inbox()
            if current is None:  # not listed (logged): keep the baseline, so what changes meanwhile fires later
                continue
            if current == baseline:  # nothing, or a change undone before it settled
                previous, changing_since = current, None
                continue
            now = time.monotonic()
            changing_since = changing_since if changing_since is not None else now
            if current != previous and now - changing_since < self.max_delay_s:
                previous = current  # still changing: wait for a listing that holds still
                continue
            changed = sorted(k for k in baseline.keys() | current.keys() if baseline.get(k) != current.get(k))
            yield TriggerEvent(InboxChange(bucket=self.bucket, reason="changed", changed=len(changed),
                                           keys=changed[:MAX_EVENT_KEYS]))
            baseline, previous, changing_since = current, current, None
            await self._remember(current)

    def pause_s(self) -> float:
        """Seconds until the next listing: the interval, but at least LISTING_PACE times what
        the last listing took, so that a big inbox (20,000 objects list in ~7 s) is not listed
        back to back by a short interval."""
        return max(self.interval_s, LISTING_PACE * self._listing_s)

    async def list_inbox(self) -> Listing | None:
        """The bucket's current objects, or None when they cannot be listed now.

        Any failure (server down, bucket or connection missing, refused credentials) is logged
        once and waited out: raising would end ``run``, and the triggerer would start a fresh
        instance a second later, again and again, without its baseline.
        """
        try:
            if self._store is None:
                from kb_airflow.hooks import ObjectStoreHook

                self._store = await ObjectStoreHook(self.s3_conn_id).astore()
            store = self._store
            # The minio client is synchronous and one event loop runs every trigger of the
            # triggerer: the listing (HTTP requests, one per 1,000 versions) runs in a worker thread.
            started = time.monotonic()
            objects = await asyncio.to_thread(lambda: list(store.list_latest(self.bucket)))
            self._listing_s = time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - see the docstring
            if not self._failing:
                self.log.warning("cannot list s3://%s (%s: %s); trying again every %.1f s",
                                 self.bucket, type(exc).__name__, exc, self.interval_s)
            self._failing = True
            return None
        if self._failing:
            self.log.info("listing s3://%s again", self.bucket)
            self._failing = False
        return {o.key: o.version for o in objects}

    # --- the durable cursor: best effort, the in-memory baseline does not depend on it -----

    async def _cursor(self) -> str | None:
        store = self.asset_state_store
        if store is None or not self._cursor_usable:
            return None
        try:
            value = await store.aget(CURSOR_KEY)
        except Exception as exc:  # noqa: BLE001 - without the cursor the watcher still works
            self._cursor_off(exc)
            return None
        return value if isinstance(value, str) else None

    async def _remember(self, listing: Listing) -> None:
        store = self.asset_state_store
        if store is None or not self._cursor_usable:
            return
        try:
            await store.aset(CURSOR_KEY, listing_digest(listing))
        except Exception as exc:  # noqa: BLE001
            self._cursor_off(exc)

    def _cursor_off(self, exc: Exception) -> None:
        self._cursor_usable = False
        self.log.warning("the asset state store is not usable (%s: %s); changes made while this watcher "
                         "was not running are left to the cron schedule", type(exc).__name__, exc)
