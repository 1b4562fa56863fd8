"""The local stack's mail sink: an SMTP server on loopback that keeps every message it is given
as a ``.eml`` file, so that ``kb alerts`` shows what the ops team would have received.

It asks for the login ``kb up`` generated (``KB_MAIL_SINK_PASSWORD``): the stack's own
senders (Airflow's alert tasks, Alertmanager) use it, and nothing else on the machine can
fill the folder. ``python -m kb_dev.stack.mailsink --port N --folder DIR``.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from pathlib import Path

USER = "kb"


def run(host: str, port: int, folder: Path, password: str) -> None:
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    folder.mkdir(parents=True, exist_ok=True)
    counter = iter(range(1, 1 << 62))

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            name = f"{time.time_ns()}-{next(counter)}.eml"
            tmp = folder / f".{name}"
            tmp.write_bytes(envelope.original_content or envelope.content)
            tmp.rename(folder / name)  # a reader never sees half a message
            return "250 OK"

    def authenticator(server, session, envelope, mechanism, auth_data):
        return AuthResult(success=auth_data.login.decode() == USER and auth_data.password.decode() == password)

    controller = Controller(Handler(), hostname=host, port=port, authenticator=authenticator,
                            auth_required=True, auth_require_tls=False, data_size_limit=10 * 1024 * 1024,
                            # PLAIN only: Alertmanager's LOGIN expects the challenge "Username:", and
                            # aiosmtpd's ("User Name") makes it give up ("unexpected server challenge")
                            auth_exclude_mechanism=["LOGIN"])
    controller.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        controller.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kb_dev.stack.mailsink")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args(argv)
    run(args.host, args.port, args.folder, os.environ["KB_MAIL_SINK_PASSWORD"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
