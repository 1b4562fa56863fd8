"""What both HTTP services (the OCR service and the search service) do around every request.

A request id (the caller's ``X-Request-ID`` or a new one, echoed in the response), the API
key check (``Authorization: Bearer <key>`` or ``X-API-Key``, compared in constant time with
every key), and a callback with the outcome for the service's own metrics and logs.
"""

from __future__ import annotations

import hmac
import time
import uuid
from typing import Awaitable, Callable

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response


def authorised(request: Request, keys: list[bytes]) -> bool:
    header = request.headers.get("authorization", "")
    given = header[7:] if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
    given_b = given.encode()
    ok = False
    for key in keys:  # compare with every key, each in constant time
        ok |= hmac.compare_digest(given_b, key)
    return ok


def around_requests(app: FastAPI, *, keys: list[bytes], open_routes: tuple[str, ...], auth_open_routes: bool,
                    unauthorised: Callable[[Request], Response],
                    done: Callable[[Request, Response, float], Awaitable[None] | None]) -> None:
    """Install the middleware. ``unauthorised`` builds the 401; ``done`` sees every answer."""

    @app.middleware("http")
    async def around(request: Request, call_next):
        request.state.request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        started = time.perf_counter()
        needs_key = keys and (auth_open_routes or request.url.path not in open_routes)
        if needs_key and not authorised(request, keys):
            response = unauthorised(request)
        else:
            response = await call_next(request)
        response.headers["X-Request-ID"] = request.state.request_id
        done(request, response, time.perf_counter() - started)
        return response
