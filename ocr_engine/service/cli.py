"""``ocr-engine serve``: run the OCR service with uvicorn and JSON logs."""

from __future__ import annotations

import argparse
import logging
import sys

from ocr_engine.api.http import JsonFormatter


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
