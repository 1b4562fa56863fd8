"""The OCR service: ``POST /v1/parse``, ``GET /v1/limits``, ``GET /health``, ``GET /ready``,
``GET /metrics``.

Admission: where the OCR backend holds a KV cache (``unlimited``), a request first
reserves the KV cache its ranges will hold (``admission.py``: 413 if it never could fit,
a wait in order if it does not fit yet). Then at most ``max_concurrency`` requests hold an engine slot and at
most ``max_queue`` wait for one; the next is answered 429 with Retry-After at once. A request
that waits longer than ``queue_timeout_s`` for the engine is answered 429 too: the wait
says nothing about the range. Once the engine starts on it, a request past
``request_timeout_s`` is answered 504 (the range is too slow: a client splits it) and
its work is told to stop at the next page or token; its slot stays held until the work
has really stopped, so abandoned work never runs beside admitted work. Each slot has
an engine thread; the engine serialises MuPDF and its decoder batches the ranges of
the admitted requests (a slot waiting for MuPDF is still waiting, not working).
``GET /v1/limits`` publishes the request limits, the engine's token budget and
measured seconds per page, and the KV budget: the one source clients plan from.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ocr_engine import cost
from ocr_engine import errors as engine_errors
from ocr_engine.backends.registry import AUTO
from ocr_engine.engine import OcrEngine
from ocr_engine.service import contract
from ocr_engine.service import errors as E
from ocr_engine.service.admission import KvAdmission
from ocr_engine.service.http import BodyTooLarge, answer_refusals_of_the_framework, around_requests
from ocr_engine.service.metrics import Metrics
from ocr_engine.service.s3 import read_s3
from ocr_engine.service.settings import ServiceSettings

log = logging.getLogger("ocr_engine.service")
OPEN_ROUTES = ("/health", "/ready", "/metrics")
FORM_OVERHEAD_BYTES = 1 << 20  # multipart boundaries and the form fields beside the file
SMALL_BODY_BYTES = 64 << 10


def _log(event: str, **fields: Any) -> None:
    # Structured, and never document text or keys: ids, sizes, codes and timings only.
    log.info(json.dumps({"event": event, **fields}, ensure_ascii=False))


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


def create_app(settings: ServiceSettings | None = None, engine: OcrEngine | None = None) -> FastAPI:
    settings = settings or ServiceSettings()
    if not settings.api_keys and not settings.allow_no_auth:
        raise ValueError("no API keys: set OCR_SERVICE_API_KEYS (or OCR_SERVICE_ALLOW_NO_AUTH=true for a closed network)")
    engine = engine or OcrEngine()
    metrics = Metrics()
    keys = [k.get_secret_value().encode() for k in settings.api_keys]
    # Engine work runs on threads of its own, one per slot: a fixed few keep a fixed few
    # malloc arenas (measured: RSS grew 37% over 100 scanned requests when calls hopped
    # across anyio's thread pool), and MuPDF is serialised inside the engine.
    executor = ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="ocr-engine")
    state: dict[str, Any] = {"ready": False, "draining": False, "waiting": 0, "admission": None}

    def warm() -> None:
        import pymupdf

        doc = pymupdf.open()
        doc.new_page().insert_text((72, 72), "warm-up page for the OCR service", fontsize=12)
        engine.parse_pdf(doc.tobytes(), backend=AUTO)
        engine.parse_pdf(doc.tobytes(), backend=engine.ocr_backend_name)  # loads the OCR model

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.slots = asyncio.Semaphore(settings.max_concurrency)
        if settings.warmup:
            await asyncio.get_running_loop().run_in_executor(executor, warm)
            engine.clock.clear()  # the warm-up's pages include loading the models: not a page's pace
        ocr = engine.backend(engine.ocr_backend_name)
        metrics.info.info({"backend": ocr.name, "model_version": str(ocr.model_version),
                           "weights_digest": str(ocr.weights_digest or "")})
        # measured on a GPU: after the warm-up, so the weights are in
        capacity = await asyncio.get_running_loop().run_in_executor(executor, ocr.kv_capacity)
        if capacity is not None:  # the OCR backend holds a KV cache
            state["admission"] = KvAdmission(capacity, max_queue=settings.max_queue,
                                             retry_after_s=settings.retry_after_s, metrics=metrics)
        state["ready"] = True
        _log("ready", backend=ocr.name)
        yield
        state["draining"] = True  # uvicorn now waits for requests in flight (drain_timeout_s)
        _log("draining")
        executor.shutdown(wait=True)

    app = FastAPI(title="OCR service", lifespan=lifespan)
    app.state.metrics = metrics

    # --- errors: one shape for all --------------------------------------------------------

    def error_response(request: Request, status: int, code: str, message: str, headers=None) -> JSONResponse:
        rid = getattr(request.state, "request_id", None)
        scope = contract.refusal(code).scope.value  # a code outside the contract is a bug: tests walk them all
        return JSONResponse({"error": {"code": code, "message": message, "request_id": rid, "scope": scope}},
                            status_code=status, headers=headers)

    @app.exception_handler(E.ServiceError)
    async def _service_error(request: Request, exc: E.ServiceError):
        return error_response(request, exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return error_response(request, 422, "invalid_request", "; ".join(str(e.get("msg")) for e in exc.errors()))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unexpected error")
        return error_response(request, 500, "internal_error", "unexpected error; see the service log")

    # --- request id, auth, logs, metrics --------------------------------------------------

    def unauthorised(request: Request) -> JSONResponse:
        return error_response(request, 401, "unauthorized", "a valid API key is required", {"WWW-Authenticate": "Bearer"})

    # a parse body over the cap holds a file over max_bytes: the file's own code
    answer_refusals_of_the_framework(app, error_response, lambda request: "file_too_large"
                                     if request.url.path == "/v1/parse" else BodyTooLarge.code)

    def max_body_bytes(scope) -> int:
        # an upload of the largest file the service reads, and its form fields; nothing else has a body
        return settings.max_file_bytes + FORM_OVERHEAD_BYTES if scope["path"] == "/v1/parse" else SMALL_BODY_BYTES

    around_requests(app, keys=keys, open_routes=OPEN_ROUTES, auth_open_routes=settings.auth_health,
                    unauthorised=unauthorised, max_body_bytes=max_body_bytes, requests=metrics.requests,
                    unauthorized=metrics.unauthorized, latency=metrics.latency, log_event=_log)

    # --- routes -----------------------------------------------------------------------

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if not state["ready"] or state["draining"]:
            raise E.NotReady("warming up" if not state["ready"] else "draining for shutdown")
        return {"status": "ready"}

    @app.get("/metrics")
    async def prometheus():
        _gpu_memory(metrics)
        _cost(metrics, settings.gpu_cost_per_hour)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/limits")
    async def limits():
        """What one request may be, and the engine's token budget and pace: clients cut
        their page ranges from this, so the numbers have one owner."""
        request = contract.RequestLimits(
            max_pages=settings.max_pages_per_request, max_bytes=settings.max_file_bytes,
            timeout_s=settings.request_timeout_s, queue_timeout_s=settings.queue_timeout_s,
            max_concurrency=settings.max_concurrency, max_queue=settings.max_queue)
        kv = _kv_limits(engine, state["admission"], settings.max_pages_per_request)
        return contract.PublishedLimits(request=request, engine=engine.limits(), kv=kv).as_dict()

    @app.post("/v1/parse")
    async def parse(
        request: Request,
        file: UploadFile | None = File(None),
        s3_uri: str | None = Form(None),
        pages: str | None = Form(None),
        backend: str = Form(AUTO),
        output: str = Form("json"),
    ):
        queue_deadline = time.monotonic() + settings.queue_timeout_s
        if not state["ready"] or state["draining"]:
            raise E.NotReady("the service is not ready")
        requestable = engine.registry.requestable()
        if backend not in requestable:
            raise E.BadRequest(f"backend must be one of {', '.join(requestable)}", code="bad_backend")
        if output not in ("json", "markdown"):
            raise E.BadRequest("output must be json or markdown", code="bad_output")
        if (file is None) == (s3_uri is None):
            raise E.BadRequest("send exactly one of a file upload or an s3_uri", code="bad_source")
        first, last = parse_page_range(pages)
        limit = settings.max_file_bytes
        data = await _read_upload(file, limit) if file is not None else await anyio.to_thread.run_sync(
            read_s3, settings, s3_uri, limit)

        def busy() -> E.Overloaded:
            return E.Overloaded(f"the engine stayed busy for {settings.queue_timeout_s:.0f}s; retry later",
                                headers={"Retry-After": str(settings.retry_after_s)})

        admission: KvAdmission | None = state["admission"]
        ticket = routes = None
        if admission is not None:
            try:  # what the range will hold: the calls of its pages (a bad document is 422 here)
                routes = await anyio.to_thread.run_sync(engine.route, data, first, last, backend)
                nbytes = engine.kv_bytes(routes)
            except engine_errors.EngineError as exc:
                raise E.from_engine(exc) from exc
            if nbytes:
                ticket = await admission.admit(nbytes, max(0.0, queue_deadline - time.monotonic()))
        try:
            slots: asyncio.Semaphore = request.app.state.slots
            if slots.locked() and state["waiting"] >= settings.max_queue:
                raise E.Overloaded("all slots are busy and the queue is full; retry later",
                                   headers={"Retry-After": str(settings.retry_after_s)})
            state["waiting"] += 1
            metrics.queue_depth.set(state["waiting"])
            try:
                await asyncio.wait_for(slots.acquire(), max(0.0, queue_deadline - time.monotonic()))
            except TimeoutError:
                raise busy() from None
            finally:
                state["waiting"] -= 1
                metrics.queue_depth.set(state["waiting"])
        except BaseException:
            if ticket is not None:
                admission.release(ticket)
            raise

        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        began = asyncio.Event()

        def work():
            if cancel.is_set():  # the request stopped waiting before the engine was free
                raise engine_errors.Cancelled("the request stopped waiting for the engine")
            # the decoder waits for the ranges of admitted requests, to batch them
            with engine.expecting(routes) if ticket is not None else contextlib.nullcontext():
                return engine.parse_pdf(data, first, last, backend, max_pages=settings.max_pages_per_request,
                                        cancel=cancel, on_start=lambda: loop.call_soon_threadsafe(began.set))

        metrics.in_flight.inc()
        task = loop.run_in_executor(executor, work)

        def finished(fut):
            metrics.in_flight.dec()
            slots.release()
            if ticket is not None:
                admission.release(ticket)
            if not fut.cancelled():
                fut.exception()  # an abandoned request's error is known; nobody awaits it

        task.add_done_callback(finished)  # the slot frees when the work has really stopped
        # A slot does not mean the engine: MuPDF runs one call at a time, and the time spent
        # waiting for it is not this range's cost, so it is bounded apart from the timeout.
        try:
            await asyncio.wait_for(began.wait(), max(0.0, queue_deadline - time.monotonic()))
        except TimeoutError:
            cancel.set()
            raise busy() from None
        started = time.perf_counter()
        try:
            results = await asyncio.wait_for(asyncio.shield(task), settings.request_timeout_s)
        except TimeoutError:
            cancel.set()
            raise E.TimedOut(f"parsing took longer than {settings.request_timeout_s:.0f}s; the work was stopped") from None
        except engine_errors.EngineError as exc:
            raise E.from_engine(exc) from exc
        _observe(metrics, results, time.perf_counter() - started)
        if output == "markdown":
            text = "\n\n".join(f"<!-- page {r.page} -->\n\n{r.markdown}" for r in results)
            return PlainTextResponse(text, media_type="text/markdown")
        return {"request_id": request.state.request_id, "pages": [r.as_dict() for r in results]}

    return app


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


def _observe(metrics: Metrics, results, seconds: float) -> None:
    tokens = 0
    metrics.service_seconds.inc(seconds)
    for r in results:
        metrics.pages.labels(r.backend, r.status).inc()
        tokens += r.tokens_out or 0
        if not cost.read_by_ocr(r.backend, r.status):
            continue
        device_s = cost.device_time(r.device_seconds, r.seconds)
        metrics.ocr_pages.inc()
        metrics.tokens_in.inc(r.tokens_in or 0)
        metrics.device_seconds.inc(device_s)
        metrics.accounted["pages"] += 1
        metrics.accounted["device_seconds"] += device_s
    if tokens:
        metrics.tokens.inc(tokens)
        metrics.tokens_per_second.set(tokens / seconds if seconds else 0)
    sequences = {(r.kv_peak_bytes, r.kv_mean_bytes, r.batch_size) for r in results if r.kv_peak_bytes is not None}
    for peak, mean, rows in sequences:  # a request's pages of one call share a sequence
        metrics.kv_sequence.labels("peak").observe(peak)
        metrics.kv_sequence.labels("mean").observe(mean)
        metrics.batch_rows.observe(rows)
        metrics.kv_cache.labels("peak").set(peak)
        metrics.kv_cache.labels("mean").set(mean)


def _cost(metrics: Metrics, gpu_cost_per_hour: float | None) -> None:
    pages, device_s = metrics.accounted["pages"], metrics.accounted["device_seconds"]
    per_hour = cost.pages_per_device_hour(pages, device_s)
    if per_hour is not None:
        metrics.pages_per_device_hour.set(per_hour)
    price = cost.cost_per_1000_pages(gpu_cost_per_hour, pages, device_s)
    if price is not None:
        metrics.cost_per_1000_pages.set(price)


def _kv_limits(engine: OcrEngine, admission: KvAdmission | None, max_pages: int) -> contract.KvLimits | None:
    """The KV budget and what it holds, as a number of sequences of a typical range (the
    largest range one request and one generate call take: the planner cuts scanned
    ranges to it)."""
    if admission is None:
        return None
    limits = engine.backend(engine.ocr_backend_name).limits()
    bound = limits.kv_bound
    if bound is None:
        return None
    typical = min(max_pages, limits.pages_per_call)
    return contract.KvLimits(
        budget_bytes=admission.capacity, reserved_bytes=admission.reserved,
        admitted_sequences=admission.sequences, waiting=admission.waiting,
        bytes_per_token=bound.bytes_per_token, window=bound.window, prompt_tokens=bound.prompt_tokens,
        visual_tokens_per_page=bound.visual_tokens_per_page,
        typical_range_pages=typical, bytes_per_typical_range=bound.bytes(typical),
        capacity_sequences=bound.sequences(admission.capacity, typical),
        max_pages=bound.max_pages(admission.capacity), max_batch=limits.max_batch)


def _gpu_memory(metrics: Metrics) -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        metrics.gpu_memory.labels("allocated").set(torch.cuda.memory_allocated())
        metrics.gpu_memory.labels("reserved").set(torch.cuda.memory_reserved())
