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
