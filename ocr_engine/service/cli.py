"""``ocr-engine serve``: run the OCR service with uvicorn and JSON logs."""

from __future__ import annotations

import argparse
import json
import logging
import sys


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        try:
            body = json.loads(message) if message.startswith("{") else {"message": message}
        except ValueError:
            body = {"message": message}
        return json.dumps({"ts": self.formatTime(record), "level": record.levelname.lower(), "logger": record.name,
                           **body}, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ocr-engine")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service (settings: OCR_SERVICE_* and OCR_* variables)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    args = parser.parse_args(argv)

    import uvicorn

    from ocr_engine.service.app import create_app
    from ocr_engine.service.settings import ServiceSettings

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    settings = ServiceSettings()
    try:
        app = create_app(settings)
    except ValueError as exc:
        print(f"ocr-engine: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host or settings.host, port=args.port or settings.port, access_log=False,
                log_config=None, timeout_graceful_shutdown=int(settings.drain_timeout_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
