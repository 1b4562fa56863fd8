"""Both services answer every error in one body, from one kit (``ocr_engine.api.http``): the
same keys, a scope a client can act on, the request id it echoes in ``X-Request-ID``. Each
looks its codes up in its own table, so a search code is never read from the OCR contract.

The apps are the real ones (``create_app``), asked in process before their lifespan has run:
what is asked here needs no engine, store or model, and every answer is an error.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from kb.search import errors as search_errors
from kb.search.app import create_app as search_app
from kb.settings import PipelineSettings, SearchSettings
from ocr_engine.api.contract import REFUSALS, Scope
from ocr_engine.service.app import create_app as ocr_app
from ocr_engine.service.settings import ServiceSettings

KEY = "shape-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    state = tmp_path_factory.mktemp("search-state")
    search = search_app(SearchSettings(api_key=[KEY]), PipelineSettings(state_dir=state))
    ocr = ocr_app(ServiceSettings(api_keys=[KEY]))
    # no `with`: the lifespan (models, store) never runs; both stay not ready
    return {"ocr": (TestClient(ocr, raise_server_exceptions=False), "/v1/parse", REFUSALS),
            "search": (TestClient(search, raise_server_exceptions=False), "/v1/search", search_errors.CODES)}


def _asks(route: str) -> dict[str, dict]:
    return {
        "no key": {"method": "POST", "url": route},
        "no route": {"method": "GET", "url": "/v1/nothing-here", "headers": AUTH},
        "wrong method": {"method": "DELETE", "url": route, "headers": AUTH},
        # a form, which the OCR service reads (a body of any other type it never reads)
        "body over the cap": {"method": "POST", "url": route, "content": b"x", "headers": {
            **AUTH, "Content-Length": str(1 << 40), "Content-Type": "multipart/form-data; boundary=b"}},
        "not ready": {"method": "GET", "url": "/ready"},
    }


def test_every_error_of_both_services_has_the_one_body(clients):
    seen: dict[str, dict[str, tuple[int, frozenset]]] = {}
    for name, (client, route, codes) in clients.items():
        seen[name] = {}
        for ask, request in _asks(route).items():
            headers = {**request.pop("headers", {}), "X-Request-ID": f"{name}-{ask}"}
            answer = client.request(**request, headers=headers)
            assert answer.status_code >= 400, (name, ask, answer.status_code)
            error = answer.json()["error"]
            assert set(answer.json()) == {"error"}
            assert error["request_id"] == answer.headers["X-Request-ID"] == f"{name}-{ask}"
            row = codes[error["code"]]  # a code of the service's own table ...
            assert (answer.status_code, error["scope"]) == (row.status, row.scope.value), (name, ask, error)
            assert Scope(error["scope"])
            seen[name][ask] = (answer.status_code, frozenset(error))
    assert seen["ocr"] == seen["search"]  # ... and the same status and keys from both, for the same ask


def test_a_field_at_fault_is_named_in_the_same_body(clients):
    client, route, codes = clients["search"]
    answer = client.post(route, headers=AUTH, json={"query": "x", "top_k": 10_000})
    error = answer.json()["error"]
    assert answer.status_code == 422 and error["field"] == "top_k" and error["code"] == "invalid_request"
    assert set(error) == {"code", "message", "request_id", "scope", "field"}
    assert error["scope"] == codes["invalid_request"].scope.value == "request"
