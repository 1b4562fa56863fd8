"""Prometheus metrics, in a registry of the app's own (so tests can start several apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("ocr_requests", "Requests by route and status", ["route", "status"], registry=r)
        self.latency = Histogram("ocr_request_seconds", "Request latency", ["route"], registry=r,
                                 buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
        self.pages = Counter("ocr_pages", "Pages processed by backend and status", ["backend", "status"], registry=r)
        self.tokens = Counter("ocr_tokens", "Tokens generated (unlimited backend)", registry=r)
        self.tokens_per_second = Gauge("ocr_tokens_per_second", "Generation speed of the last call", registry=r)
        self.kv_cache = Gauge("ocr_kv_cache_bytes", "Decoder KV cache of the last call", ["kind"], registry=r)
        self.gpu_memory = Gauge("ocr_gpu_memory_bytes", "GPU memory held by torch", ["kind"], registry=r)
        self.in_flight = Gauge("ocr_requests_in_flight", "Requests being processed", registry=r)
        self.queue_depth = Gauge("ocr_admission_queue_depth", "Requests waiting for a slot", registry=r)
        self.info = Info("ocr_engine", "Backend, model version and weights digest", registry=r)
