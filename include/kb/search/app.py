"""The search service: ``POST /v1/search``, a document's chunks and page images, the search
page at ``GET /``, ``/health``, ``/ready``, ``/metrics``.

This module wires the app: the errors in the one shape both services answer with, by this
service's code table (``errors.py``), and what runs around every request (both
``ocr_engine.api.http``), then the routes (``search_routes.py``, ``document_routes.py``). What
they share is ``state.SearchState``: the embedder kept loaded and the store kept open between
queries. No query text is logged unless ``KB_SEARCH_LOG_QUERIES`` is on.
"""

from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kb.search import errors as E
from kb.search.document_routes import add_document_routes
from kb.search.search_routes import add_search_route
from kb.search.state import Metrics, SearchState, log, log_event
from kb.search.ui import PAGE
from kb.settings import PipelineSettings, SearchSettings
from ocr_engine.api.http import around_requests, install_error_handlers

__all__ = ["Metrics", "create_app"]
OPEN_ROUTES = ("/", "/health", "/ready", "/metrics")


def create_app(settings: SearchSettings | None = None, pipeline: PipelineSettings | None = None) -> FastAPI:
    settings = settings or SearchSettings()
    if not settings.api_key and not settings.allow_no_auth:
        raise ValueError("no API key: set KB_SEARCH_API_KEY (or KB_SEARCH_ALLOW_NO_AUTH=true for a closed network)")
    state = SearchState.of(settings, pipeline or PipelineSettings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.start()
        yield
        state.stop()

    app = FastAPI(title="Knowledge base search", lifespan=lifespan)
    metrics = state.metrics
    respond = install_error_handlers(app, E.CODES, log=log, boundary=E.BOUNDARY, counted=metrics.error)
    around_requests(app, keys=[k.get_secret_value().encode() for k in settings.api_key], open_routes=OPEN_ROUTES,
                    auth_open_routes=settings.auth_health, respond=respond,
                    max_body_bytes=lambda scope: settings.max_body_bytes, requests=metrics.requests,
                    unauthorized=metrics.unauthorized, log_event=log_event)
    _probes(app, state)
    add_search_route(app, state)
    add_document_routes(app, state)
    return app


def _probes(app: FastAPI, state: SearchState) -> None:
    @app.get("/", response_class=HTMLResponse)
    async def page():
        return PAGE

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if not state.ready:
            raise E.NotReady("loading the embedder and the store")

        def dimension() -> int | None:
            with state.reader() as vs:
                return vs.dimension()

        found = await anyio.to_thread.run_sync(dimension)
        embedder, collection = state.retriever.embedder, state.pipeline.collection
        if found not in (None, embedder.dimension):
            raise E.NotReady(f"collection {collection!r} holds {found}-d vectors; the embedder makes "
                             f"{embedder.dimension}-d")
        return {"status": "ready", "embedder": embedder.model_id, "collection": collection,
                "collection_exists": found is not None, "store_generation": state.reader.generation}

    @app.get("/metrics")
    async def prometheus():
        state.metrics.store_lag.set(state.reader.lag())
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
