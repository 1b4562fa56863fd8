"""The OCR client's retry contract, against a real HTTP server on loopback that scripts its answers."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kb.errors import DocumentError, RangeTimedOut, RangeTooLarge
from kb.ocr_client import OcrClient, OcrRejected, OcrRequestRefused, OcrUnavailable
from ocr_engine.api.pages import PageResult


class Scripted:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.do_POST()

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.calls += 1
                status, headers, body = outer.answers.pop(0) if outer.answers else (500, {}, {})
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(body).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()




def err(code, scope=None):
    body = {"error": {"code": code, "message": code, "request_id": "r"}}
    if scope:
        body["error"]["scope"] = scope
    return body


OK = (200, {}, {"pages": [{"page": 1, "markdown": "hello"}]})


@pytest.mark.parametrize("first", [(429, {"Retry-After": "0"}, err("overloaded")), (503, {}, err("not_ready"))])
def test_429_and_503_are_retried_then_succeed(first):
    server = Scripted([first, first, OK])
    try:
        pages = OcrClient(server.url, "k", retries=3, backoff_s=0.01).parse(b"%PDF", 1, 1)
        assert pages == [PageResult(page=1, markdown="hello")] and server.calls == 3
    finally:
        server.close()


@pytest.mark.parametrize("status, code, scope, error", [
    (422, "encrypted_pdf", None, OcrRejected),  # the document's own defect: quarantined
    (422, "corrupt_pdf", None, OcrRejected),
    (422, "malformed_pdf", None, OcrRejected),  # these three were retried as refusals, never quarantined
    (422, "claims_exceed_file", None, OcrRejected),
    (422, "page_too_large", None, OcrRejected),
    (413, "file_too_large", None, RangeTooLarge),  # our limits: the range is split
    (413, "too_many_pages", None, RangeTooLarge),
    (413, "kv_budget_exceeded", None, RangeTooLarge),
    (504, "timeout", None, RangeTimedOut),
    (422, "invalid_request", None, OcrRequestRefused),  # a 422 is not the document's unless the service says so
    (401, "unauthorized", None, OcrRequestRefused),  # our deployment's mistake: never the document's
    (400, "bad_s3_uri", None, OcrRequestRefused),
    (500, "internal_error", None, OcrUnavailable),
    # a code added to the contract later is read by the scope the answer states
    (422, "a_code_added_later", "document", OcrRejected),
    (422, "a_code_added_later", "range", RangeTooLarge),
    (422, "a_code_added_later", "request", OcrRequestRefused),
    (500, "a_code_added_later", "retry", OcrUnavailable),
])
def test_final_answers_are_not_retried_and_say_whose_problem_they_are(status, code, scope, error):
    server = Scripted([(status, {}, err(code, scope)), OK])
    try:
        with pytest.raises(error) as info:
            OcrClient(server.url, "k", retries=3, backoff_s=0.01).parse(b"%PDF", 1, 1)
        assert code in str(info.value) and server.calls == 1
        if error is OcrRejected:
            assert info.value.code == code and info.value.status == status and isinstance(info.value, DocumentError)
    finally:
        server.close()


def test_limits_are_read_from_the_service():
    body = {"request": {"max_pages": 10, "max_bytes": 2048, "timeout_s": 20.0, "queue_timeout_s": 30.0,
                        "max_concurrency": 2, "max_queue": 4},
            "engine": {"ocr_backend": "ppocr", "max_pages_per_call": None, "token_budget": None,
                       "seconds_per_page": {"textlayer": 0.02, "ppocr": 2.5}, "pace": {},
                       "min_text_chars": 20},
            "kv": None, "refusals": {"overloaded": {"status": 429, "scope": "retry", "meaning": "busy"}},
            "a_field_added_later": {"ignored": True}}
    server = Scripted([(503, {}, err("not_ready")), (200, {}, body)])
    try:
        limits = OcrClient(server.url, "k", retries=2, backoff_s=0.01).limits()
        assert (limits.max_pages, limits.max_bytes, limits.timeout_s) == (10, 2048, 20.0)
        assert (limits.text_seconds_per_page, limits.scanned_seconds_per_page) == (0.02, 2.5)
        assert limits.source == server.url and server.calls == 2 and limits.min_text_chars == 20
        assert limits.queue_timeout_s == 30.0 and limits.max_pages_kv is None
        # a service older than extraction versions publishes none: nothing to compare, no error
        assert limits.extraction_version is None and limits.ocr_model is None
    finally:
        server.close()
    body["engine"].update(extraction_version="7", ocr_model="ppocr:PP-OCRv5")
    server = Scripted([(200, {}, body)])
    try:
        limits = OcrClient(server.url, "k").limits()
        assert (limits.extraction_version, limits.ocr_model) == ("7", "ppocr:PP-OCRv5")
    finally:
        server.close()


def test_retries_are_bounded():
    server = Scripted([(503, {}, err("not_ready"))] * 10)
    try:
        with pytest.raises(OcrUnavailable):
            OcrClient(server.url, "k", retries=2, backoff_s=0.01).parse(b"%PDF", 1, 1)
        assert server.calls == 3
    finally:
        server.close()


def test_a_refused_connection_is_retried_and_then_reported():
    with pytest.raises(OcrUnavailable, match="did not answer after 3 tries"):
        OcrClient("http://127.0.0.1:9", "k", retries=2, backoff_s=0.01).parse(b"%PDF", 1, 1)


def test_a_read_timeout_is_not_resent_and_becomes_ocr_unavailable():
    import time as _time

    server = Scripted([])
    handler = server.server.RequestHandlerClass
    original = handler.do_POST

    def slow_post(self):
        _time.sleep(1.0)
        original(self)

    handler.do_POST = slow_post
    try:
        with pytest.raises(OcrUnavailable, match="ReadTimeout"):
            OcrClient(server.url, "k", retries=3, backoff_s=0.01).parse(b"%PDF", 1, 1, read_timeout_s=0.2)
        _time.sleep(1.2)
        assert server.calls == 1, "a request the service may still be working on is not sent twice"
    finally:
        server.close()


BUSY = (429, {"Retry-After": "30"}, err("overloaded"))


def test_a_full_replica_is_left_for_a_free_one_without_waiting():
    full, free = Scripted([BUSY] * 10), Scripted([OK] * 10)
    try:
        client = OcrClient(full.url, "k", retries=2, backoff_s=5.0, replicas=[free.url])
        import time

        started = time.monotonic()
        for _ in range(6):  # each call starts at a random replica: both orders happen
            assert client.parse(b"%PDF", 1, 1) == [PageResult(page=1, markdown="hello")]
        # a 429 from one replica never waited its Retry-After: the other was free
        assert time.monotonic() - started < 5
        assert free.calls == 6 and full.calls <= 6
    finally:
        full.close()
        free.close()


def test_a_replica_that_is_down_is_skipped_and_all_down_is_reported_once_per_round():
    live = Scripted([OK] * 5)
    try:
        client = OcrClient("http://127.0.0.1:9", "k", retries=1, backoff_s=0.01, replicas=[live.url])
        for _ in range(4):
            assert client.parse(b"%PDF", 1, 1)
        assert live.calls == 4
    finally:
        live.close()
    with pytest.raises(OcrUnavailable, match="after 4 tries"):
        OcrClient("http://127.0.0.1:9", "k", retries=1, backoff_s=0.01, replicas=["http://127.0.0.1:7"]).parse(
            b"%PDF", 1, 1)


def test_every_engine_error_code_is_in_the_contract_at_a_4xx_or_5xx_status():
    from ocr_engine.api import errors as engine_errors
    from ocr_engine.api.contract import REFUSALS, Scope

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    for cls in [engine_errors.EngineError, *subclasses(engine_errors.EngineError)]:
        assert cls.code in REFUSALS, cls
        refusal = REFUSALS[cls.code]
        if issubclass(cls, engine_errors.InputError) and cls.code not in ("too_many_pages", "file_too_large",
                                                                          "bad_page_range"):
            assert refusal.scope is Scope.DOCUMENT and refusal.status == 422, cls
    assert all(400 <= r.status < 600 for r in REFUSALS.values())


def test_clients_never_show_their_key():
    from kb.ocr_client import OcrClient
    from kb.search.client import SearchClient

    secret = "sk-0123456789abcdef"
    ocr = OcrClient("http://127.0.0.1:1", secret)
    search = SearchClient("http://127.0.0.1:1", secret)
    try:
        for client in (ocr, search):
            assert secret not in repr(client) and secret not in str(client), repr(client)
            assert "127.0.0.1:1" in repr(client)
    finally:
        search.close()
