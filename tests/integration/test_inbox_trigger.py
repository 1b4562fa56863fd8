"""The inbox watcher's trigger, its ``run()`` driven directly against the real S3 server.

One change (or one burst of changes) is one event; nothing fires while the bucket holds
still, for what was there when the trigger started, or again for what was reported.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import suppress

import pytest

from kb_airflow.triggers import CURSOR_KEY, MAX_EVENT_KEYS, InboxChangeTrigger

pytestmark = pytest.mark.integration

INTERVAL_S = 0.2
QUIET_S = 5 * INTERVAL_S  # "nothing happens": five polls
EVENT_S = 10.0  # an event comes within this (it takes two polls)


class Watch:
    """The trigger's ``run()`` as a task on the running loop, as the triggerer runs it; its
    events' payloads are collected as they come."""

    def __init__(self, trigger: InboxChangeTrigger) -> None:
        self.trigger = trigger
        self.events: asyncio.Queue[dict] = asyncio.Queue()
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> "Watch":
        self.task = asyncio.create_task(self._pump())
        return self

    async def _pump(self) -> None:
        async for event in self.trigger.run():
            await self.events.put(event.payload)

    async def next_event(self, timeout_s: float) -> dict | None:
        try:
            return await asyncio.wait_for(self.events.get(), timeout_s)
        except TimeoutError:
            if self.task.done():
                self.task.result()  # the trigger ended: show why
                raise AssertionError("run() returned")
            return None

    async def __aexit__(self, *exc) -> None:
        self.task.cancel()
        with suppress(asyncio.CancelledError):
            await self.task


class MemoryCursor:
    """Where the triggerer would inject the asset state store's accessor (``aget``/``aset``).
    The real one talks to the triggerer's supervisor, which these tests do not run."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    async def aget(self, key: str, default=None):
        return self.values.get(key, default)

    async def aset(self, key: str, value) -> None:
        self.values[key] = value


class BrokenCursor:
    async def aget(self, key: str, default=None):
        raise RuntimeError("asset state store unavailable")

    async def aset(self, key: str, value) -> None:
        raise RuntimeError("asset state store unavailable")


def _put(store, bucket: str, key: str, data: bytes = b"%PDF-1.4 test"):
    # off the loop, as another process would upload: the trigger keeps polling meanwhile
    return asyncio.to_thread(store.put_bytes, bucket, key, data)


def _changed(bucket: str, *keys: str) -> dict:
    return {"bucket": bucket, "reason": "changed", "changed": len(keys), "keys": sorted(keys)}


def test_one_upload_is_one_event_with_its_key_and_nothing_fires_again(kb_env):
    store, inbox = kb_env["store"], kb_env["inbox"]

    async def scenario():
        async with Watch(InboxChangeTrigger(inbox, interval_s=INTERVAL_S)) as watch:
            assert await watch.next_event(QUIET_S) is None
            await _put(store, inbox, "a.pdf")
            assert await watch.next_event(EVENT_S) == _changed(inbox, "a.pdf")
            # the baseline moved: a run working through a.pdf sees no further events
            assert await watch.next_event(QUIET_S) is None

    asyncio.run(scenario())


def test_a_burst_of_uploads_is_one_event(kb_env):
    store, inbox = kb_env["store"], kb_env["inbox"]
    keys = [f"burst/{i:02d}.pdf" for i in range(MAX_EVENT_KEYS + 5)]

    def burst():  # over about 3 s, so several listings see it growing; never a whole interval without an upload
        for key in keys:
            store.put_bytes(inbox, key, b"%PDF-1.4 burst")
            time.sleep(0.1)

    async def scenario():
        async with Watch(InboxChangeTrigger(inbox, interval_s=0.5)) as watch:
            assert await watch.next_event(1.5) is None
            await asyncio.to_thread(burst)
            event = await watch.next_event(EVENT_S)
            assert event == {"bucket": inbox, "reason": "changed", "changed": len(keys), "keys": keys[:MAX_EVENT_KEYS]}
            assert await watch.next_event(2.5) is None

    asyncio.run(scenario())


def test_objects_already_there_do_not_fire_but_a_new_version_and_a_delete_do(kb_env):
    store, inbox = kb_env["store"], kb_env["inbox"]
    for key in ("old.pdf", "kept.pdf"):
        store.put_bytes(inbox, key, b"%PDF-1.4 " + key.encode())

    async def scenario():
        async with Watch(InboxChangeTrigger(inbox, interval_s=INTERVAL_S)) as watch:
            assert await watch.next_event(QUIET_S) is None
            await _put(store, inbox, "kept.pdf", b"%PDF-1.4 kept, second version")
            assert await watch.next_event(EVENT_S) == _changed(inbox, "kept.pdf")
            await asyncio.to_thread(store.remove, inbox, "old.pdf")
            assert await watch.next_event(EVENT_S) == _changed(inbox, "old.pdf")
            assert await watch.next_event(QUIET_S) is None

    asyncio.run(scenario())


def test_a_failing_listing_is_waited_out_and_the_baseline_kept(kb_env):
    store = kb_env["store"]
    bucket = f"watch-{uuid.uuid4().hex[:8]}"
    store.ensure_bucket(bucket)

    async def scenario():
        async with Watch(InboxChangeTrigger(bucket, interval_s=INTERVAL_S)) as watch:
            assert await watch.next_event(QUIET_S) is None
            await asyncio.to_thread(store.client.remove_bucket, bucket)  # listings now fail: NoSuchBucket
            assert await watch.next_event(QUIET_S) is None
            assert not watch.task.done()
            await asyncio.to_thread(store.ensure_bucket, bucket)
            await _put(store, bucket, "back.pdf")
            assert await watch.next_event(EVENT_S) == _changed(bucket, "back.pdf")

    asyncio.run(scenario())


class SlowListing:
    """The real store, but each listing takes ``seconds`` longer: a big inbox."""

    def __init__(self, store, seconds: float) -> None:
        self.store, self.seconds, self.listings = store, seconds, 0

    def list_latest(self, bucket: str):
        self.listings += 1
        time.sleep(self.seconds)
        return self.store.list_latest(bucket)


def test_a_slow_listing_spaces_the_listings_out_and_a_change_still_fires(kb_env):
    store, inbox = kb_env["store"], kb_env["inbox"]
    slow = SlowListing(store, 0.3)
    trigger = InboxChangeTrigger(inbox, interval_s=0.05)
    trigger._store = slow  # as list_inbox would have made it

    async def scenario():
        async with Watch(trigger) as watch:
            assert await watch.next_event(3.0) is None
            # back to back, 3 s hold ~8 listings of 0.35 s; paced (4 x 0.3 s between), 2 or 3
            assert slow.listings <= 4, slow.listings
            await _put(store, inbox, "big-inbox.pdf")
            assert await watch.next_event(EVENT_S) == _changed(inbox, "big-inbox.pdf")

    asyncio.run(scenario())


def test_with_a_stored_cursor_a_new_instance_fires_once_for_what_changed_while_none_ran(kb_env):
    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "first.pdf", b"%PDF-1.4 first")
    cursor = MemoryCursor()

    def watcher() -> InboxChangeTrigger:
        trigger = InboxChangeTrigger(inbox, interval_s=INTERVAL_S)
        trigger.asset_state_store = cursor  # as the triggerer injects it
        return trigger

    async def scenario():
        async with Watch(watcher()) as watch:  # no cursor yet: what is there is the baseline
            assert await watch.next_event(QUIET_S) is None
        assert isinstance(cursor.values.get(CURSOR_KEY), str)

        await _put(store, inbox, "while-down.pdf")  # no watcher running
        async with Watch(watcher()) as watch:
            assert await watch.next_event(EVENT_S) == {"bucket": inbox, "reason": "changed_while_unwatched",
                                                       "changed": None, "keys": []}
            assert await watch.next_event(QUIET_S) is None

        async with Watch(watcher()) as watch:  # nothing changed since: a restart is silent
            assert await watch.next_event(QUIET_S) is None

    asyncio.run(scenario())


def test_a_broken_asset_state_store_leaves_the_watcher_working(kb_env):
    store, inbox = kb_env["store"], kb_env["inbox"]
    trigger = InboxChangeTrigger(inbox, interval_s=INTERVAL_S)
    trigger.asset_state_store = BrokenCursor()

    async def scenario():
        async with Watch(trigger) as watch:
            assert await watch.next_event(QUIET_S) is None
            await _put(store, inbox, "a.pdf")
            assert await watch.next_event(EVENT_S) == _changed(inbox, "a.pdf")

    asyncio.run(scenario())


def test_the_serialized_trigger_holds_no_credentials_and_lists_with_the_connections(kb_env):
    from airflow._shared.module_loading import import_string  # what the triggerer imports a classpath with

    store, inbox = kb_env["store"], kb_env["inbox"]
    store.put_bytes(inbox, "a.pdf", b"%PDF-1.4 a")
    classpath, kwargs = InboxChangeTrigger(inbox).serialize()
    text = json.dumps(kwargs)
    assert kb_env["KB_S3_ACCESS_KEY"] not in text and kb_env["KB_S3_SECRET_KEY"] not in text

    rebuilt = import_string(classpath)(**kwargs)
    listing = asyncio.run(rebuilt.list_inbox())  # credentials from the connection kb_s3, at run time
    assert set(listing) == {"a.pdf"}
