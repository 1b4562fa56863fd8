"""``kb-exporter serve``: the pipeline's /metrics. ``kb-exporter statsd-bridge``: Airflow's StatsD
metrics as Prometheus series where no statsd_exporter runs (the local stack).

Both answer ``GET /metrics`` and ``GET /healthz`` and nothing else; neither needs a key, like
the other services' /metrics, and both bind to loopback unless told otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # one line per scrape is noise
        pass


def _app(registry: CollectorRegistry):
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: /metrics and /healthz only\n"]

    return app


def serve(registry: CollectorRegistry, host: str, port: int) -> None:
    with make_server(host, port, _app(registry), server_class=_Server, handler_class=_QuietHandler) as server:
        server.serve_forever()


def _pipeline_registry() -> CollectorRegistry:
    from kb.ledger_db import Ledger
    from kb.objectstore import ObjectStore
    from kb.observe.exporter import PipelineCollector
    from kb.settings import ExporterSettings, PipelineSettings, S3Settings

    settings, pipeline = ExporterSettings(), PipelineSettings()
    s3 = S3Settings()
    if settings.s3_access_key:
        s3 = s3.model_copy(update={"access_key": settings.s3_access_key, "secret_key": settings.s3_secret_key})
    store = ObjectStore.from_settings(s3)
    registry = CollectorRegistry()
    registry.register(PipelineCollector(store, pipeline, Ledger.for_settings(pipeline, store),
                                        min_interval_s=settings.min_interval_s))
    return registry


def main(argv: list[str] | None = None) -> int:
    from kb.settings import ExporterSettings

    parser = argparse.ArgumentParser(prog="kb-exporter")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="the pipeline's metrics (settings: KB_EXPORTER_* and the pipeline's KB_*)")
    sub.add_parser("statsd-bridge", help="Airflow's StatsD metrics in (UDP), Prometheus series out")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(name)s %(message)s")
    settings = ExporterSettings()
    if args.command == "serve":
        serve(_pipeline_registry(), settings.host, settings.port)
        return 0
    from kb.observe.statsd import StatsdSeries, listen, load_mappings

    series = StatsdSeries(load_mappings(settings.statsd_mapping))
    registry = CollectorRegistry()
    registry.register(series)
    stop = threading.Event()
    listen(series, settings.host, settings.statsd_port, stop)
    try:
        serve(registry, settings.host, settings.statsd_http_port)
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
