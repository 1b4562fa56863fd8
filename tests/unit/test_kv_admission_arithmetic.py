"""The KV bound arithmetic, the admission queue's rules, and the pool's capacity, without a server."""

from __future__ import annotations

import asyncio

import pytest

from kb_dev.pools import ReplicaCapacity, capacity_of
from ocr_engine.api.limits import EngineLimits
from ocr_engine.api import http_errors as E
from ocr_engine.service.admission import KvAdmission
from ocr_engine.api.contract import KvLimits, PublishedLimits, RequestLimits
from ocr_engine.service.metrics import Metrics
from ocr_engine.unlimited.kv_budget import SequenceBound

# the real decoder: 12 layers x 10 KV heads x 128, bf16; 273 visual tokens a page (base mode, 1024 px)
REAL = SequenceBound(bytes_per_token=61_440, window=128, prompt_tokens=10, visual_tokens_per_page=273)


def test_a_sequence_holds_its_reference_tokens_and_one_window_whatever_its_output():
    assert REAL.tokens(12) == 10 + 12 * 273 + 128
    assert REAL.bytes(12) == REAL.tokens(12) * 61_440
    assert REAL.bytes(0) == 0
    capacity = 10 * REAL.bytes(12) + 1
    assert REAL.sequences(capacity, 12) == 10
    pages = REAL.max_pages(capacity)
    assert REAL.bytes(pages) <= capacity < REAL.bytes(pages + 1)


def published_body(kv: KvLimits | None, max_concurrency: int) -> PublishedLimits:
    """A ``GET /v1/limits`` body as the service writes it and a client reads it back."""
    request = RequestLimits(max_pages=50, max_bytes=1 << 20, timeout_s=120.0, queue_timeout_s=120.0,
                            max_concurrency=max_concurrency, max_queue=8)
    engine = EngineLimits(ocr_backend="unlimited", max_pages_per_call=12, token_budget=None,
                          seconds_per_page={"textlayer": 0.05, "unlimited": 2.0}, pace={}, min_text_chars=20)
    return PublishedLimits.from_dict(PublishedLimits(request=request, engine=engine, kv=kv).as_dict())


def test_a_replica_counts_its_kv_sequences_or_else_its_engine_slots():
    capacity = 9 * REAL.bytes(12)
    kv = KvLimits(budget_bytes=capacity, reserved_bytes=0, admitted_sequences=0, waiting=0,
                  bytes_per_token=REAL.bytes_per_token, window=REAL.window, prompt_tokens=REAL.prompt_tokens,
                  visual_tokens_per_page=REAL.visual_tokens_per_page, typical_range_pages=12,
                  bytes_per_typical_range=REAL.bytes(12), capacity_sequences=REAL.sequences(capacity, 12),
                  max_pages=REAL.max_pages(capacity), max_batch=8)
    assert capacity_of("http://a", published_body(kv, max_concurrency=2)) == ReplicaCapacity("http://a", 9, "kv")
    assert capacity_of("http://b", published_body(None, max_concurrency=2)) == \
        ReplicaCapacity("http://b", 2, "concurrency")


def run(coro):
    return asyncio.run(coro)


def test_admission_fits_n_queues_the_next_in_order_and_refuses_what_never_fits():
    async def scenario():
        admission = KvAdmission(3 * 100, max_queue=2, retry_after_s=2, metrics=Metrics())
        tickets = [await admission.admit(100, 1) for _ in range(3)]
        assert (admission.reserved, admission.sequences) == (300, 3)
        with pytest.raises(E.PayloadTooLarge) as too_large:
            await admission.admit(301, 1)
        assert too_large.value.code == "kv_budget_exceeded"
        big = asyncio.create_task(admission.admit(200, 5))  # first in line
        small = asyncio.create_task(admission.admit(100, 5))
        await asyncio.sleep(0)
        assert admission.waiting == 2
        with pytest.raises(E.Overloaded):  # the queue is full
            await admission.admit(100, 1)
        admission.release(tickets[0])
        await asyncio.sleep(0)
        assert not big.done() and not small.done()  # 100 free: the small one may not overtake the big one
        admission.release(tickets[1])
        first = await big
        assert first.nbytes == 200 and not small.done()
        admission.release(tickets[2])
        await small
        assert (admission.reserved, admission.sequences, admission.waiting) == (300, 2, 0)
        with pytest.raises(E.Overloaded):  # waits no longer than its timeout
            await admission.admit(100, 0.05)
        assert admission.waiting == 0
        metrics = admission.metrics
        assert metrics.kv_reserved._value.get() == 300 and metrics.kv_sequences._value.get() == 2

    run(scenario())


def test_a_waiter_that_goes_away_gives_back_what_it_was_granted():
    async def scenario():
        admission = KvAdmission(100, max_queue=4, retry_after_s=2, metrics=Metrics())
        held = await admission.admit(100, 1)
        waiter = asyncio.create_task(admission.admit(100, 5))
        await asyncio.sleep(0)
        waiter.cancel()  # its client went away, just as the budget freed
        admission.release(held)
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (admission.reserved, admission.sequences, admission.waiting) == (0, 0, 0)

    run(scenario())
