"""What both HTTP services (the OCR service and the search service) do around every request.

A request id (the caller's ``X-Request-ID`` or a new one, echoed in the response), a cap on
the request body applied before it is read, the API key check (``Authorization: Bearer <key>``
or ``X-API-Key``, compared in constant time with every key), and the request's count, time and
log line under its route *template*: labelling by the raw path let anyone add a time series
per random URL, with or without a key.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
import uuid
from typing import Callable, Mapping

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import Counter, Histogram
from fastapi.exceptions import HTTPException
from starlette.exceptions import HTTPException as RoutingError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ocr_engine.api.contract import Refusal, scope_of_status
from ocr_engine.api.http_errors import InvalidRequest, ServiceError, Unauthorized

UNMATCHED = "unmatched"  # the one label every path that is no route shares
ROUTING_CODES = {404: "not_found", 405: "method_not_allowed"}


class BodyTooLarge(HTTPException):
    """Raised while a request body is read, at the first byte past the cap (or at once when
    Content-Length says so); each service answers it 413 in its own error shape. An
    (FastAPI's) HTTPException, because FastAPI turns any other error raised while it reads a body into 400."""

    code = "body_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the {limit:,} byte limit")
        self.limit = limit
        self.message = self.detail


class BodyCap:
    """ASGI middleware: a request body may be at most ``limit(scope)`` bytes. The body is never
    buffered here: a declared length over the cap fails the first read, a chunked body fails
    at the chunk that crosses it, so a 200 MB body costs one read, not 200 MB."""

    def __init__(self, app: ASGIApp, limit: Callable[[Scope], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        over = declared is not None and declared.isdigit() and int(declared) > limit
        seen = 0

        async def capped() -> Message:
            nonlocal seen
            if over:
                raise BodyTooLarge(limit)
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, capped, send)


def route_template(app: FastAPI, scope: Scope) -> str:
    """The path template of the route a request matches (``/v1/documents/{doc_id}/...``), or
    ``UNMATCHED``: a bounded set of labels whatever paths are asked for."""
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return getattr(route, "path", UNMATCHED)
    return UNMATCHED


def authorised(request: Request, keys: list[bytes]) -> bool:
    header = request.headers.get("authorization", "")
    given = header[7:] if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
    given_b = given.encode()
    ok = False
    for key in keys:  # compare with every key, each in constant time
        ok |= hmac.compare_digest(given_b, key)
    return ok


def around_requests(app: FastAPI, *, keys: list[bytes], open_routes: tuple[str, ...], auth_open_routes: bool,
                    respond: Callable[[Request, ServiceError], Response], max_body_bytes: Callable[[Scope], int],
                    requests: Counter, unauthorized: Counter, latency: Histogram | None = None,
                    log_event: Callable[..., None]) -> None:
    """Install the middleware. ``respond`` (``install_error_handlers``'s) answers the 401; ``max_body_bytes`` caps each
    request's body (the service answers ``BodyTooLarge`` with its 413). Every answer but
    /metrics' is counted in ``requests`` (route template, status) and ``latency``, or, when
    it is a 401, only in the unlabelled ``unauthorized``, and logged as a ``request`` event."""

    def done(request: Request, response: Response, seconds: float) -> None:
        route = route_template(app, request.scope)
        if route == "/metrics":
            return
        if response.status_code == 401:  # keyless callers are counted, never given series of their own
            unauthorized.inc()
        else:
            requests.labels(route, str(response.status_code)).inc()
            if latency is not None:
                latency.labels(route).observe(seconds)
        log_event("request", request_id=request.state.request_id, method=request.method, route=route,
                  status=response.status_code, ms=round(seconds * 1000, 1))

    # Inside ``around``: Starlette's BaseHTTPMiddleware reads the body in a task group, which
    # would wrap BodyTooLarge in an ExceptionGroup (and FastAPI would answer 400).
    app.add_middleware(BodyCap, limit=max_body_bytes)

    @app.middleware("http")
    async def around(request: Request, call_next):
        request.state.request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        started = time.perf_counter()
        needs_key = keys and (auth_open_routes or request.url.path not in open_routes)
        if needs_key and not authorised(request, keys):
            response = respond(request, Unauthorized("a valid API key is required",
                                                     headers={"WWW-Authenticate": "Bearer"}))
        else:
            response = await call_next(request)
        response.headers["X-Request-ID"] = request.state.request_id
        done(request, response, time.perf_counter() - started)
        return response


ErrorCounter = Callable[[str, int], None]


def install_error_handlers(app: FastAPI, codes: Mapping[str, Refusal], *, log: logging.Logger,
                           boundary: Mapping[type[Exception], Callable[[Exception], ServiceError]] | None = None,
                           body_code: Callable[[Request], str] = lambda request: BodyTooLarge.code,
                           counted: ErrorCounter | None = None) -> Callable[[Request, ServiceError], Response]:
    """Every error a service answers, in the one body (``http_errors``): its ``ServiceError``s,
    the framework's own refusals (a body over the cap, no such route, a method the route does
    not take, an invalid field) and anything unexpected (500, logged). ``codes`` is the
    service's table: each code's status and scope. ``boundary`` converts a lower layer's typed
    errors, once, here. ``body_code`` names a too-large body on a route that says better;
    ``counted(code, status)`` is told of every answer. Returns the function that answers an
    error (the middleware answers its 401 with it)."""

    def respond(request: Request, exc: ServiceError) -> Response:
        row = codes.get(exc.code)
        status = row.status if row is not None else exc.status
        scope = row.scope if row is not None else scope_of_status(status)
        body = {"code": exc.code, "message": exc.message, "request_id": getattr(request.state, "request_id", None),
                "scope": scope.value}
        if exc.field:
            body["field"] = exc.field
        if counted is not None:
            counted(exc.code, status)
        return JSONResponse({"error": body}, status_code=status, headers=exc.headers or None)

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        return respond(request, exc)

    for kind, convert in (boundary or {}).items():
        app.add_exception_handler(kind, lambda request, exc, convert=convert: respond(request, convert(exc)))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ())][1:]  # the first is where: body, query, path or form
        field = ".".join(p for p in loc if not p.isdigit()) or None
        message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
        return respond(request, InvalidRequest(message, field=field))

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request: Request, exc: BodyTooLarge):
        return respond(request, ServiceError(exc.message, code=body_code(request)))

    @app.exception_handler(RoutingError)
    async def _routing(request: Request, exc: RoutingError):
        return respond(request, ServiceError(str(exc.detail), code=ROUTING_CODES.get(exc.status_code, "bad_request")))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unexpected error")
        return respond(request, ServiceError("unexpected error; see the service log"))

    return respond


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        try:
            body = json.loads(message) if message.startswith("{") else {"message": message}
        except ValueError:
            body = {"message": message}
        return json.dumps({"ts": self.formatTime(record), "level": record.levelname.lower(), "logger": record.name,
                           **body}, ensure_ascii=False)
