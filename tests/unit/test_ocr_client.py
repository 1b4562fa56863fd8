"""The OCR client's retry contract, against a real HTTP server on loopback that scripts its answers."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kb.ocr_client import OcrClient, OcrRejected, OcrUnavailable


class Scripted:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
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


def err(code):
    return {"error": {"code": code, "message": code, "request_id": "r"}}


OK = (200, {}, {"pages": [{"page": 1, "markdown": "hello"}]})


@pytest.mark.parametrize("first", [(429, {"Retry-After": "0"}, err("overloaded")), (503, {}, err("not_ready"))])
def test_429_and_503_are_retried_then_succeed(first):
    server = Scripted([first, first, OK])
    try:
        pages = OcrClient(server.url, "k", retries=3, backoff_s=0.01).parse(b"%PDF", 1, 1)
        assert pages == [{"page": 1, "markdown": "hello"}] and server.calls == 3
    finally:
        server.close()


@pytest.mark.parametrize("status, code", [(422, "encrypted_pdf"), (413, "file_too_large"), (401, "unauthorized")])
def test_input_errors_are_not_retried(status, code):
    server = Scripted([(status, {}, err(code)), OK])
    try:
        with pytest.raises(OcrRejected) as info:
            OcrClient(server.url, "k", retries=3, backoff_s=0.01).parse(b"%PDF", 1, 1)
        assert info.value.code == code and info.value.status == status and not info.value.retryable
        assert server.calls == 1
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
