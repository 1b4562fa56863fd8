"""The slot queue on the serving loop: a request that finds a slot free never counts as
waiting, so another request checked at that moment is queued, not refused.

A clean clone once saw a burst's second admitted upload read and then answered 429 with a
queue place free (tests/service/test_admission_burst.py): the first request was counted in
the queue while it took a free slot across a yield of the loop. This drives the two
requests through ``take_slot`` with the second one arriving at each step of the loop in turn.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ocr_engine.api import http_errors as E
from ocr_engine.service.metrics import Metrics
from ocr_engine.service.parsing import ParseRequest, take_slot
from ocr_engine.service.settings import ServiceSettings
from ocr_engine.service.state import ServiceState


def _request() -> ParseRequest:
    return ParseRequest(b"", 1, None, "auto", "json", time.monotonic() + 5)


def _state(concurrency: int, queue: int) -> ServiceState:
    settings = ServiceSettings(max_concurrency=concurrency, max_queue=queue)
    # take_slot touches only the slots, the queue count and its gauge: no engine is needed
    state = ServiceState(settings, engine=None, metrics=Metrics(), executor=ThreadPoolExecutor(1))
    state.slots = asyncio.Semaphore(concurrency)
    return state


@pytest.mark.parametrize("steps", range(6))
def test_a_second_request_arriving_while_the_first_takes_a_free_slot_is_queued(steps):
    async def scenario() -> tuple[int, int]:
        state = _state(concurrency=1, queue=1)
        first = asyncio.create_task(take_slot(state, _request()))
        for _ in range(steps):  # the second arrives this many turns of the loop later
            await asyncio.sleep(0)
        second = asyncio.create_task(take_slot(state, _request()))
        await first
        queued_behind_first = state.waiting
        state.slots.release()  # the first request's work is done
        await asyncio.wait_for(second, 5)  # raises Overloaded if it was refused
        return queued_behind_first, state.waiting

    queued, after = asyncio.run(scenario())
    assert queued in (0, 1) and after == 0


def test_with_every_slot_and_queue_place_taken_the_next_is_refused_at_once():
    async def scenario() -> None:
        state = _state(concurrency=1, queue=1)
        await take_slot(state, _request())  # holds the slot
        waiter = asyncio.create_task(take_slot(state, _request()))
        await asyncio.sleep(0)
        assert state.waiting == 1
        started = time.monotonic()
        with pytest.raises(E.Overloaded):
            await take_slot(state, _request())
        assert time.monotonic() - started < 1  # at once, not after the queue timeout
        state.slots.release()
        await asyncio.wait_for(waiter, 5)
        assert state.waiting == 0

    asyncio.run(scenario())
