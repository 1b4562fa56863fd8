"""KV-aware admission: a request reserves the KV cache its ranges will hold before it
reaches the engine, so the sequences decoding together never outgrow the device.

- A request whose bound is larger than the whole budget could never run: 413 at once
  (``kv_budget_exceeded``); the client cuts a smaller range.
- One that does not fit yet waits, first come first served (a large request is not
  overtaken for ever by small ones), until the queue timeout: then 429, a retry.
- ``max_queue`` requests may wait; the next is 429 at once.

Requests that need no cache (text layers, PP-OCR) are not counted here. Everything runs
on the event loop's thread, so no lock is needed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from ocr_engine.api import http_errors as E
from ocr_engine.service.metrics import Metrics


@dataclass
class Ticket:
    nbytes: int
    released: bool = False


class KvAdmission:
    def __init__(self, capacity: int, *, max_queue: int, retry_after_s: int, metrics: Metrics) -> None:
        self.capacity = capacity
        self.reserved = 0
        self.sequences = 0
        self.max_queue, self.retry_after_s = max_queue, retry_after_s
        self.metrics = metrics
        self._waiting: deque[tuple[int, asyncio.Future]] = deque()
        self._publish()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def admit(self, nbytes: int, timeout_s: float) -> Ticket:
        if nbytes > self.capacity:
            raise E.PayloadTooLarge(
                f"this range needs {nbytes:,} bytes of KV cache and the whole budget is {self.capacity:,}; "
                "send fewer pages per request (GET /v1/limits)", code="kv_budget_exceeded")
        if not self._waiting and self._take(nbytes):
            return Ticket(nbytes)
        if len(self._waiting) >= self.max_queue:
            raise E.Overloaded("the KV budget is taken and the queue is full; retry later",
                               headers={"Retry-After": str(self.retry_after_s)})
        granted: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = (nbytes, granted)
        self._waiting.append(entry)
        self._publish()
        try:
            await asyncio.wait_for(asyncio.shield(granted), timeout_s)
            return Ticket(nbytes)
        except BaseException as exc:
            if entry in self._waiting:
                self._waiting.remove(entry)
                granted.cancel()
                self._pump()  # the head left: the next may fit now
            elif granted.done() and not granted.cancelled():  # granted just as the wait ended
                if isinstance(exc, TimeoutError):
                    return Ticket(nbytes)
                self.release(Ticket(nbytes))  # the caller is gone (disconnected): give it back
            if isinstance(exc, TimeoutError):
                raise E.Overloaded(f"the KV budget stayed taken for {timeout_s:.0f}s; retry later",
                                   headers={"Retry-After": str(self.retry_after_s)}) from None
            raise
        finally:
            self._publish()

    def release(self, ticket: Ticket) -> None:
        if ticket.released:
            return
        ticket.released = True
        self.reserved -= ticket.nbytes
        self.sequences -= 1
        self._pump()
        self._publish()

    def _take(self, nbytes: int) -> bool:
        if self.reserved + nbytes > self.capacity:
            return False
        self.reserved += nbytes
        self.sequences += 1
        return True

    def _pump(self) -> None:
        while self._waiting and self._take(self._waiting[0][0]):
            _, granted = self._waiting.popleft()
            granted.set_result(True)

    def _publish(self) -> None:
        m = self.metrics
        m.kv_budget.set(self.capacity)
        m.kv_reserved.set(self.reserved)
        m.kv_sequences.set(self.sequences)
        m.kv_waiting.set(len(self._waiting))
