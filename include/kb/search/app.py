"""The search service: ``POST /v1/search``, ``GET /v1/documents/{doc_id}/pages/{n}.png``, the
search page at ``GET /``, ``/health``, ``/ready``, ``/metrics``.

It keeps the embedder loaded and a vector store open between queries (``stores``), and
follows the OCR service's conventions: API keys, one error body shape, JSON logs without
document text, and no query text unless ``KB_SEARCH_LOG_QUERIES`` is on.
"""

import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, Literal
from urllib.parse import quote

import anyio
from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kb.errors import StoreBusy
from kb.points import SearchFilter
from kb.retrieval import Retriever, mark_terms
from kb.search import errors as E
from kb.ledger_db import Ledger
from kb.search.pages import PageNotFound, PageSourceTooLarge, render_png
from kb.search.ui import PAGE
from kb.settings import PipelineSettings, S3Settings, SearchSettings
from kb.store import service_reader
from ocr_engine.api.http import answer_refusals_of_the_framework, around_requests

log = logging.getLogger("kb.search")
OPEN_ROUTES = ("/", "/health", "/ready", "/metrics")


def _log(event: str, **fields: Any) -> None:
    log.info(json.dumps({"event": event, **fields}, ensure_ascii=False))


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        # route: the route's template, or "unmatched"; answers 401 are only counted, unlabelled,
        # and error codes are the service's own few: nobody can add a series from outside
        self.requests = Counter("kb_search_requests", "Requests by route and status", ["route", "status"], registry=r)
        self.unauthorized = Counter("kb_search_unauthorized_requests", "Requests refused for want of a valid key",
                                    registry=r)
        self.latency = Histogram("kb_search_query_seconds", "Search latency by mode", ["mode"], registry=r,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.errors = Counter("kb_search_errors", "Errors by code", ["code"], registry=r)
        self.store_lag = Gauge("kb_search_store_lag_rows",
                               "Rows of the store's write log no copy has applied yet (embedded store)", registry=r)


class FilterIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key_prefix: str | None = Field(None, min_length=1, max_length=1024,
                                   description="a folder (ending in /) or a whole key")
    language: Literal["en", "zh"] | None = None
    pages: tuple[int, int] | None = Field(None, description="[first, last]: chunks touching these pages")

    @field_validator("pages")
    @classmethod
    def _range(cls, value):
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError("pages must be [first, last] with 1 <= first <= last")
        return value


def create_app(settings: SearchSettings | None = None, pipeline: PipelineSettings | None = None) -> FastAPI:
    settings = settings or SearchSettings()
    pipeline = pipeline or PipelineSettings()
    if not settings.api_key and not settings.allow_no_auth:
        raise ValueError("no API key: set KB_SEARCH_API_KEY (or KB_SEARCH_ALLOW_NO_AUTH=true for a closed network)")
    keys = [k.get_secret_value().encode() for k in settings.api_key]
    metrics = Metrics()
    reader = service_reader(pipeline)
    retriever = Retriever(pipeline, stores=reader, embed_threads=settings.embed_threads)
    state: dict[str, Any] = {"ready": False}

    class SearchIn(BaseModel):
        model_config = ConfigDict(extra="forbid")

        query: str = Field(max_length=settings.max_query_chars)
        top_k: int = Field(5, ge=1, le=settings.max_top_k)
        mode: Literal["hybrid", "dense", "sparse"] = pipeline.search_mode  # type: ignore[assignment]
        filter: FilterIn | None = None

        @field_validator("query")
        @classmethod
        def _not_blank(cls, value: str) -> str:
            if not value.strip():
                raise ValueError("the query is empty")
            return value

    def s3_store():
        from kb.objectstore import ObjectStore

        s3 = S3Settings()
        if settings.s3_access_key:
            s3 = s3.model_copy(update={"access_key": settings.s3_access_key, "secret_key": settings.s3_secret_key})
        return ObjectStore.from_settings(s3)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        started = time.perf_counter()
        await anyio.to_thread.run_sync(retriever.embedder.embed, ["warm-up"])  # loads (or exports) the model
        reader.start()  # here, not in a worker thread: the store's replicas die with the thread that starts them
        app.state.objects = s3_store()
        state["ready"] = True
        _log("ready", embedder=retriever.embedder.model_id, seconds=round(time.perf_counter() - started, 2))
        yield
        state["ready"] = False
        reader.close()

    app = FastAPI(title="Knowledge base search", lifespan=lifespan)

    def error_response(request: Request, status: int, code: str, message: str, headers=None,
                       field: str | None = None) -> JSONResponse:
        body: dict[str, Any] = {"code": code, "message": message, "request_id": getattr(request.state, "request_id", None)}
        if field:
            body["field"] = field
        if status != 401:
            metrics.errors.labels(code).inc()
        return JSONResponse({"error": body}, status_code=status, headers=headers)

    @app.exception_handler(E.ServiceError)
    async def _service_error(request: Request, exc: E.ServiceError):
        return error_response(request, exc.status, exc.code, exc.message, exc.headers, getattr(exc, "field", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ())][1:]  # the first is where: body, query or path
        field = ".".join(p for p in loc if not p.isdigit()) or None
        message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
        return error_response(request, 422, "invalid_request", message, field=field)

    @app.exception_handler(StoreBusy)
    async def _store_busy(request: Request, exc: StoreBusy):  # no copy of the store answered in time
        return error_response(request, 503, exc.code, exc.message, {"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unexpected error")
        return error_response(request, 500, "internal_error", "unexpected error; see the service log")

    def unauthorised(request: Request) -> JSONResponse:
        return error_response(request, 401, "unauthorized", "a valid API key is required", {"WWW-Authenticate": "Bearer"})

    answer_refusals_of_the_framework(app, error_response)

    around_requests(app, keys=keys, open_routes=OPEN_ROUTES, auth_open_routes=settings.auth_health,
                    unauthorised=unauthorised, max_body_bytes=lambda scope: settings.max_body_bytes,
                    requests=metrics.requests, unauthorized=metrics.unauthorized, log_event=_log)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return PAGE

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if not state["ready"]:
            raise E.NotReady("loading the embedder and the store")

        def check() -> dict[str, Any]:
            with reader() as vs:
                dimension = vs.dimension()
            return {"dimension": dimension}

        found = await anyio.to_thread.run_sync(check)
        embedder = retriever.embedder
        if found["dimension"] not in (None, embedder.dimension):
            raise E.NotReady(f"collection {pipeline.collection!r} holds {found['dimension']}-d vectors; "
                             f"the embedder makes {embedder.dimension}-d")
        return {"status": "ready", "embedder": embedder.model_id, "collection": pipeline.collection,
                "collection_exists": found["dimension"] is not None, "store_generation": reader.generation}

    @app.get("/metrics")
    async def prometheus():
        metrics.store_lag.set(reader.lag())
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/search")
    async def search(body: SearchIn, request: Request):
        if not state["ready"]:
            raise E.NotReady("loading the embedder and the store")
        where = None
        if body.filter is not None:
            where = SearchFilter(body.filter.key_prefix, body.filter.language, body.filter.pages)
        def answer() -> list[dict[str, Any]]:  # in a thread: nothing per hit runs on the event loop
            hits = retriever.search(body.query, body.top_k, body.mode, where)
            for hit in hits:
                hit["page_urls"] = page_urls(hit)
                hit["page_url"] = hit["page_urls"][0] if hit["page_urls"] else None
                hit["snippet_html"] = mark_terms(hit["snippet"], body.query, retriever.encoder.tokenizer)
            return hits

        started = time.perf_counter()
        hits = await anyio.to_thread.run_sync(answer)
        seconds = time.perf_counter() - started
        metrics.latency.labels(body.mode).observe(seconds)
        if settings.log_queries:
            _log("query", request_id=request.state.request_id, query=body.query, mode=body.mode, hits=len(hits))
        # plain JSON: FastAPI's encoder would walk every hit again for nothing (~2 ms a query)
        return JSONResponse({"hits": hits, "took_ms": round(seconds * 1000, 2)})

    @app.get("/v1/documents/{doc_id}/chunks")
    async def document_chunks(doc_id: str = Path(max_length=128)):
        """The document's indexed chunks (id and payload, by chunk index): what is searchable of it."""
        def read() -> list[dict[str, Any]]:
            with reader() as vs:
                points = vs.points(doc_id)
            return sorted(({"id": pt.id, "payload": pt.payload} for pt in points),
                          key=lambda c: (c["payload"].get("sha256", ""), c["payload"].get("chunk_index", 0)))

        chunks = await anyio.to_thread.run_sync(read)
        if not chunks:
            raise E.NotFound(f"no document {doc_id} is indexed", code="unknown_document")
        return JSONResponse({"doc_id": doc_id, "chunks": chunks})

    def chunk_boxes(doc_id: str, page: int, version: str | None, chunk: str) -> tuple[str | None, list]:
        """The version a chunk was cut from and its boxes on ``page``; 404 unless the chunk is
        this document's, at this version."""
        with reader() as vs:
            payload = vs.payload(chunk)
        if not payload or payload.get("doc_id") != doc_id:
            raise E.NotFound(f"no chunk {chunk} in document {doc_id}", code="unknown_chunk")
        if version is not None and payload.get("version_id") not in (None, version):
            raise E.NotFound(f"chunk {chunk} is of another version of the document", code="unknown_chunk")
        boxes = [b["bbox"] for b in payload.get("boxes") or [] if b.get("page") == page and b.get("bbox")]
        return version or payload.get("version_id"), boxes

    renders = anyio.CapacityLimiter(settings.page_renders)  # threads rendering at once (MuPDF: one)
    waiting = 0

    @app.get("/v1/documents/{doc_id}/pages/{page:int}.png")
    async def page_image(doc_id: str, page: int, request: Request, version: str | None = None,
                         chunk: str | None = Query(None, pattern=_UUID, description="a hit's id: its boxes are drawn")):
        nonlocal waiting

        def render() -> bytes:
            at, boxes = chunk_boxes(doc_id, page, version, chunk) if chunk else (version, [])
            return render_png(request.app.state.objects, Ledger.for_settings(pipeline, request.app.state.objects),
                              doc_id, page, at, settings.page_dpi, settings.max_page_pixels, boxes,
                              max_bytes=int(settings.max_page_source_mb * 2**20))

        if waiting >= settings.page_renders + settings.page_queue:
            raise E.Overloaded("too many page images are being drawn; retry later",
                               headers={"Retry-After": "1"})
        waiting += 1
        try:
            png = await anyio.to_thread.run_sync(render, limiter=renders)
        except PageNotFound as exc:
            raise E.NotFound(exc.message, code=exc.code) from None
        except PageSourceTooLarge as exc:
            raise E.InvalidRequest(exc.message, code=exc.code) from None
        finally:
            waiting -= 1
        return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})

    return app


_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def page_urls(hit: dict[str, Any]) -> list[str]:
    """Where the image of each of a hit's pages is, at the exact version the chunk came from,
    with the hit's boxes drawn on it."""
    if not hit.get("doc_id") or not hit.get("pages"):
        return []
    query = {"version": hit.get("version_id"), "chunk": hit.get("id")}
    tail = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items() if v)
    return [f"/v1/documents/{hit['doc_id']}/pages/{n}.png" + (f"?{tail}" if tail else "") for n in hit["pages"]]
