"""Real alert receivers on loopback: an SMTP server (aiosmtpd) and an HTTP webhook endpoint."""

from __future__ import annotations

import email
import json
import threading
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

from tests.conftest import free_ports


@contextmanager
def smtp_receiver(user: str, password: str) -> Iterator[dict]:
    """Accepts mail only after AUTH with ``user``/``password``; yields the messages received."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    messages: list[Message] = []
    logins: list[str] = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            messages.append(email.message_from_bytes(envelope.content))
            return "250 OK"

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login.decode() == user and auth_data.password.decode() == password
        if ok:
            logins.append(user)
        return AuthResult(success=ok)

    port = free_ports(1)[0]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=authenticator,
                            auth_required=True, auth_require_tls=False)
    controller.start()
    try:
        yield {"port": port, "messages": messages, "logins": logins}
    finally:
        controller.stop()


@contextmanager
def webhook_receiver() -> Iterator[dict]:
    """Answers 200 to every POST and keeps (path, JSON body)."""
    calls: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            calls.append((self.path, json.loads(body)))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"port": server.server_address[1], "calls": calls}
    finally:
        server.shutdown()
        server.server_close()


def body_text(message: Message) -> str:
    parts = message.walk() if message.is_multipart() else [message]
    return "\n".join(p.get_payload(decode=True).decode(p.get_content_charset() or "utf-8")
                     for p in parts if p.get_content_maintype() == "text")


@contextmanager
def recording_s3_proxy(upstream: str) -> Iterator[dict]:
    """An HTTP proxy on loopback in front of the S3 server at ``upstream`` (host:port): every
    request is passed on as it came (method, path, headers, body: the SigV4 signature covers
    the Host header, which it keeps) and answered as the server answered, and each is kept as
    ``(method, path, query, body)`` for ``tests.s3_actions``."""
    import http.client
    from urllib.parse import urlsplit

    calls: list[tuple[str, str, str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            url = urlsplit(self.path)
            calls.append((self.command, url.path, url.query, body))
            conn = http.client.HTTPConnection(upstream, timeout=60)
            try:
                conn.request(self.command, self.path, body=body or None, headers=dict(self.headers.items()))
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for name, value in resp.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        def log_message(self, *args):
            pass

    port = free_ports(1)[0]
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"endpoint": f"127.0.0.1:{port}", "port": port, "calls": calls}
    finally:
        server.shutdown()
        server.server_close()
