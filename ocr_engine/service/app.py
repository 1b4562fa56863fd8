"""The OCR service: ``POST /v1/parse``, ``GET /v1/limits``, ``GET /health``, ``GET /ready``,
``GET /metrics``.

This module wires the app: the errors in the one shape both services answer with, by the
refusal contract's table, and what runs around every request (both ``ocr_engine.api.http``),
and thin routes. What the routes share is ``state.ServiceState`` (its start and stop, and
the limits it publishes, typed in ``contract.py``); a parse request's flow (admission, an
engine slot, the engine, the results) is ``parsing.py``.
``GET /v1/limits`` publishes the request limits, the engine's token budget and measured
seconds per page, and the KV budget: the one source clients plan from.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ocr_engine.engine import OcrEngine
from ocr_engine.api import contract
from ocr_engine.service import parsing
from ocr_engine.api import http_errors as E
from ocr_engine.api.http import BodyTooLarge, around_requests, install_error_handlers
from ocr_engine.service.settings import ServiceSettings
from ocr_engine.service.state import ServiceState, log_event

log = logging.getLogger("ocr_engine.service")
OPEN_ROUTES = ("/health", "/ready", "/metrics")
FORM_OVERHEAD_BYTES = 1 << 20  # multipart boundaries and the form fields beside the file
SMALL_BODY_BYTES = 64 << 10


def create_app(settings: ServiceSettings | None = None, engine: OcrEngine | None = None) -> FastAPI:
    settings = settings or ServiceSettings()
    if not settings.api_keys and not settings.allow_no_auth:
        raise ValueError("no API keys: set OCR_SERVICE_API_KEYS (or OCR_SERVICE_ALLOW_NO_AUTH=true for a closed network)")
    state = ServiceState.of(settings, engine or OcrEngine())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.start()
        yield
        state.stop()

    app = FastAPI(title="OCR service", lifespan=lifespan)
    # a parse body over the cap holds a file over max_bytes: the file's own code
    respond = install_error_handlers(app, contract.REFUSALS, log=log, body_code=lambda request: "file_too_large"
                                     if request.url.path == "/v1/parse" else BodyTooLarge.code)
    _around_requests(app, state, respond)
    _routes(app, state)
    return app


def _around_requests(app: FastAPI, state: ServiceState, respond) -> None:
    """Request id, auth, body cap, logs and metrics."""
    settings, metrics = state.settings, state.metrics

    def max_body_bytes(scope) -> int:
        # an upload of the largest file the service reads, and its form fields; nothing else has a body
        return settings.max_file_bytes + FORM_OVERHEAD_BYTES if scope["path"] == "/v1/parse" else SMALL_BODY_BYTES

    around_requests(app, keys=[k.get_secret_value().encode() for k in settings.api_keys], open_routes=OPEN_ROUTES,
                    auth_open_routes=settings.auth_health, respond=respond, max_body_bytes=max_body_bytes,
                    requests=metrics.requests, unauthorized=metrics.unauthorized, latency=metrics.latency,
                    log_event=log_event)


def _routes(app: FastAPI, state: ServiceState) -> None:
    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if not state.serving:
            raise E.NotReady("warming up" if not state.ready else "draining for shutdown")
        return {"status": "ready"}

    @app.get("/metrics")
    async def prometheus():
        state.metrics.before_scrape(state.settings.gpu_cost_per_hour)
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/limits")
    async def limits():
        """What one request may be, and the engine's token budget and pace: clients cut
        their page ranges from this, so the numbers have one owner."""
        return state.published_limits().as_dict()

    @app.post("/v1/parse")
    async def parse(request: Request):
        """Form fields ``file`` (an upload) or ``s3_uri``, ``pages``, ``backend``, ``output``. The
        request takes a place before its form is read (429 when none is free), so what the
        service holds in memory is bounded by its places, not by what clients send."""
        async with state.place():
            job = await parsing.read_form(state, request)
            results = await parsing.parse(state, job)
        if job.output == "markdown":
            text = "\n\n".join(f"<!-- page {r.page} -->\n\n{r.markdown}" for r in results)
            return PlainTextResponse(text, media_type="text/markdown")
        return {"request_id": request.state.request_id, "pages": [r.as_dict() for r in results]}
