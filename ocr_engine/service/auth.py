"""API keys, as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``, compared in constant time.

Shared by the OCR service and the search service, which follow the same conventions.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request


def authorised(request: Request, keys: list[bytes]) -> bool:
    header = request.headers.get("authorization", "")
    given = header[7:] if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
    given_b = given.encode()
    ok = False
    for key in keys:  # compare with every key, each in constant time
        ok |= hmac.compare_digest(given_b, key)
    return ok
