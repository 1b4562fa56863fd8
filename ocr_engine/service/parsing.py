"""One ``POST /v1/parse``: the request read and checked, then admission, a slot, the engine.

0. The route takes a place (``ServiceState.place``) before anything of the request is read:
   429 at once when every slot and queue place is taken.
1. ``read_form`` / ``read_request``: the form's fields checked (400s), the document read
   (upload or s3://), at most ``max_file_bytes`` of it.
2. ``reserve_kv``: where the OCR backend holds a KV cache, the request reserves what its
   largest call will hold (``admission.py``: 413 if it never could fit, a wait in order if
   it does not fit yet).
3. ``take_slot``: at most ``max_concurrency`` requests hold an engine slot and at most
   ``max_queue`` wait for one; the next is answered 429 at once.
4. ``run``: the engine on the slot's thread. Waiting for the engine counts against the
   queue timeout (429: the wait says nothing about the range); once the engine starts,
   ``request_timeout_s`` bounds the work (504: the range is too slow, a client splits it)
   and the work is told to stop at the next page or token. The slot stays held until the
   work has really stopped, so abandoned work never runs beside admitted work.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass

import anyio
from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from ocr_engine.api import errors as engine_errors
from ocr_engine.api.names import AUTO
from ocr_engine.engine import Routes
from ocr_engine.api.pages import PageResult
from ocr_engine.api import http_errors as E
from ocr_engine.service.admission import Ticket
from ocr_engine.api.http import BodyTooLarge
from ocr_engine.service.s3 import read_s3
from ocr_engine.service.state import ServiceState

OUTPUTS = ("json", "markdown")


@dataclass(frozen=True)
class ParseRequest:
    data: bytes
    first: int
    last: int | None
    backend: str
    output: str
    queue_deadline: float  # time.monotonic() by which the engine must have started on it

    def queue_left(self) -> float:
        return max(0.0, self.queue_deadline - time.monotonic())


@dataclass(frozen=True)
class Reservation:
    """A request's KV reservation and the route it was computed from."""

    ticket: Ticket
    routes: Routes


def parse_page_range(text: str | None) -> tuple[int, int | None]:
    if not text:
        return 1, None
    try:
        if "-" in text:
            a, b = text.split("-", 1)
            first, last = int(a), int(b)
        else:
            first = last = int(text)
    except ValueError:
        raise E.BadRequest(f"pages must look like 3 or 1-8, not {text!r}", code="bad_page_range") from None
    if first < 1 or last < first:
        raise E.BadRequest(f"page range {text!r} is empty or starts before page 1", code="bad_page_range")
    return first, last


FORM_FIELDS = {"file", "s3_uri", "pages", "backend", "output"}


async def read_form(state: ServiceState, request: Request) -> ParseRequest:
    """The multipart form read (the file part spooled by the framework, the other fields
    small), then ``read_request``."""
    try:
        form = await request.form(max_files=1, max_fields=len(FORM_FIELDS))
    except BodyTooLarge:
        raise  # 413, answered by the app's handler
    except HTTPException as exc:  # the framework's refusal of a malformed or over-full form
        raise E.BadRequest(f"the request is not a form this service reads: {exc.detail}", code="bad_source") from None
    unknown = set(form) - FORM_FIELDS
    if unknown:
        raise E.BadRequest(f"unknown form field(s) {sorted(unknown)}; send {sorted(FORM_FIELDS)}", code="bad_source")
    file = form.get("file")
    if file is not None and not isinstance(file, UploadFile):  # a field where the file should be
        raise E.ServiceError("file must be an upload, not a form field", code="invalid_request")

    def text(name: str, default: str | None = None) -> str | None:
        value = form.get(name, default)
        if value is not None and not isinstance(value, str):
            raise E.ServiceError(f"{name} must be a form field, not a file", code="invalid_request")
        return value

    try:
        return await read_request(state, file, text("s3_uri"), text("pages"), text("backend", AUTO) or AUTO,
                                  text("output", "json") or "json")
    finally:
        await form.close()


async def read_request(state: ServiceState, file: UploadFile | None, s3_uri: str | None, pages: str | None,
                       backend: str, output: str) -> ParseRequest:
    queue_deadline = time.monotonic() + state.settings.queue_timeout_s
    if not state.serving:
        raise E.NotReady("the service is not ready")
    requestable = state.engine.registry.requestable()
    if backend not in requestable:
        raise E.BadRequest(f"backend must be one of {', '.join(requestable)}", code="bad_backend")
    if output not in OUTPUTS:
        raise E.BadRequest("output must be json or markdown", code="bad_output")
    if (file is None) == (s3_uri is None):
        raise E.BadRequest("send exactly one of a file upload or an s3_uri", code="bad_source")
    first, last = parse_page_range(pages)
    limit = state.settings.max_file_bytes
    data = await _read_upload(file, limit) if file is not None else await anyio.to_thread.run_sync(
        read_s3, state.settings, s3_uri, limit)
    return ParseRequest(data, first, last, backend, output, queue_deadline)


async def _read_upload(file: UploadFile, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        chunk = await file.read(1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise E.PayloadTooLarge(f"the upload is over the {limit / 2**20:g} MB limit")
        chunks.append(chunk)


async def parse(state: ServiceState, request: ParseRequest) -> list[PageResult]:
    reservation = await reserve_kv(state, request)
    try:
        await take_slot(state, request)
    except BaseException:
        if reservation is not None:
            state.admission.release(reservation.ticket)
        raise
    return await run(state, request, reservation)


async def reserve_kv(state: ServiceState, request: ParseRequest) -> Reservation | None:
    admission = state.admission
    if admission is None:
        return None
    engine = state.engine
    try:  # what the range will hold: the calls of its pages (a bad document is 422 here)
        routes = await anyio.to_thread.run_sync(
            lambda: engine.route(request.data, request.first, request.last, request.backend,
                                 max_pages=state.settings.max_pages_per_request, wait_s=request.queue_left()))
        nbytes = engine.kv_bytes(routes)
    except engine_errors.EngineError as exc:
        raise E.from_engine(exc) from exc
    if not nbytes:
        return None
    return Reservation(await admission.admit(nbytes, request.queue_left()), routes)


def _busy(state: ServiceState) -> E.Overloaded:
    return E.Overloaded(f"the engine stayed busy for {state.settings.queue_timeout_s:.0f}s; retry later",
                        headers={"Retry-After": str(state.settings.retry_after_s)})


async def take_slot(state: ServiceState, request: ParseRequest) -> None:
    slots = state.slots
    if not slots.locked():
        # A free slot is taken without yielding to the loop. Counted as waiting across a
        # yield, a request that never waits would fill the queue for a moment: a second
        # request checked in that moment was answered 429 with a place free for it.
        await slots.acquire()
        return
    if state.waiting >= state.settings.max_queue:
        raise E.Overloaded("all slots are busy and the queue is full; retry later",
                           headers={"Retry-After": str(state.settings.retry_after_s)})
    state.queue_changed(+1)
    try:
        await asyncio.wait_for(slots.acquire(), request.queue_left())
    except TimeoutError:
        raise _busy(state) from None
    finally:
        state.queue_changed(-1)


async def run(state: ServiceState, request: ParseRequest, reservation: Reservation | None) -> list[PageResult]:
    """The engine on a slot this request holds; the slot (and the reservation) are given back
    when the work has stopped, whether or not anyone still waits for it."""
    engine, metrics = state.engine, state.metrics
    cancel = threading.Event()
    loop = asyncio.get_running_loop()
    began = asyncio.Event()

    def work() -> list[PageResult]:
        if cancel.is_set():  # the request stopped waiting before the engine was free
            raise engine_errors.Cancelled("the request stopped waiting for the engine")
        # the decoder waits for the calls of admitted requests, to batch them
        with engine.expecting(reservation.routes) if reservation is not None else nullcontext():
            return engine.parse_pdf(request.data, request.first, request.last, request.backend,
                                    max_pages=state.settings.max_pages_per_request, cancel=cancel,
                                    on_start=lambda: loop.call_soon_threadsafe(began.set))

    metrics.in_flight.inc()
    task = loop.run_in_executor(state.executor, work)

    def finished(fut: asyncio.Future) -> None:
        metrics.in_flight.dec()
        state.slots.release()
        if reservation is not None:
            state.admission.release(reservation.ticket)
        if not fut.cancelled():
            fut.exception()  # an abandoned request's error is known; nobody awaits it

    task.add_done_callback(finished)
    # A slot does not mean the engine: MuPDF runs one call at a time, and the time spent
    # waiting for it is not this range's cost, so it is bounded apart from the timeout.
    try:
        await asyncio.wait_for(began.wait(), request.queue_left())
    except TimeoutError:
        cancel.set()
        raise _busy(state) from None
    started = time.perf_counter()
    timeout_s = state.settings.request_timeout_s
    try:
        results = await asyncio.wait_for(asyncio.shield(task), timeout_s)
    except TimeoutError:
        cancel.set()
        raise E.TimedOut(f"parsing took longer than {timeout_s:.0f}s; the work was stopped") from None
    except engine_errors.EngineError as exc:
        raise E.from_engine(exc) from exc
    metrics.observe(results, time.perf_counter() - started)
    return results
