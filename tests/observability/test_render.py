"""kb_dev.observe.render draws every dashboard from Prometheus's query_range API (the stand-in for
Grafana screenshots). A stub Prometheus on loopback answers; the live stack's run is the lead's."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from kb_dev.observe.dashboards import DASHBOARDS, all_queries
from kb_dev.observe.render import PrometheusQueryError, render_all


class _Prometheus(BaseHTTPRequestHandler):
    queries: list[str]
    refuse: bool = False

    def do_GET(self):
        url = urlparse(self.path)
        params = parse_qs(url.query)
        type(self).queries.append(params["query"][0])
        if url.path != "/api/v1/query_range" or type(self).refuse:
            body, status = {"status": "error", "errorType": "bad_data", "error": "parse error"}, 400
        else:
            start, end = float(params["start"][0]), float(params["end"][0])
            values = [[start + i * (end - start) / 9, str(i)] for i in range(10)]
            body, status = {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"job": "x", "status": "200"}, "values": values}]}}, 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    _Prometheus.queries, _Prometheus.refuse = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_every_dashboard_is_drawn_from_every_panel_query(prometheus, tmp_path):
    paths = render_all(prometheus, tmp_path, minutes=10, rate_interval="1m")
    assert sorted(p.name for p in paths) == sorted(f"{slug}.png" for slug in DASHBOARDS)
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    assert sorted(_Prometheus.queries) == sorted(q.expr for q in all_queries("1m"))


def test_a_refused_query_is_an_error_not_a_blank_panel(prometheus, tmp_path):
    _Prometheus.refuse = True
    with pytest.raises(PrometheusQueryError, match="parse error"):
        render_all(prometheus, tmp_path, minutes=10)
