"""Prometheus metrics, in a registry of the app's own (so tests can start several apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        # route: the route's template, or "unmatched"; answers 401 are only counted, unlabelled
        self.requests = Counter("ocr_requests", "Requests by route and status", ["route", "status"], registry=r)
        self.unauthorized = Counter("ocr_unauthorized_requests", "Requests refused for want of a valid key",
                                    registry=r)
        self.latency = Histogram("ocr_request_seconds", "Request latency", ["route"], registry=r,
                                 buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
        self.pages = Counter("ocr_pages", "Pages processed by backend and status", ["backend", "status"], registry=r)
        self.tokens = Counter("ocr_tokens", "Tokens generated (unlimited backend)", registry=r)
        self.tokens_per_second = Gauge("ocr_tokens_per_second", "Generation speed of the last call", registry=r)
        self.kv_cache = Gauge("ocr_kv_cache_bytes", "KV cache of the last decoded sequence (peak, mean)", ["kind"],
                              registry=r)
        # KV-aware admission (admission.py)
        self.kv_budget = Gauge("ocr_kv_budget_bytes", "KV cache the device gives all admitted sequences", registry=r)
        self.kv_reserved = Gauge("ocr_kv_reserved_bytes", "KV cache reserved by admitted requests", registry=r)
        self.kv_sequences = Gauge("ocr_kv_admitted_sequences", "Requests holding a KV reservation", registry=r)
        self.kv_waiting = Gauge("ocr_kv_waiting_requests", "Requests waiting for KV budget", registry=r)
        self.batch_rows = Histogram("ocr_decode_batch_rows", "Sequences decoded together, per request",
                                    registry=r, buckets=(1, 2, 4, 8, 16, 32, 64))
        # cost accounting: pages read by OCR, their tokens and times
        self.ocr_pages = Counter("ocr_accounted_pages", "Pages read by an OCR backend", registry=r)
        self.tokens_in = Counter("ocr_tokens_in", "Visual tokens read (unlimited backend)", registry=r)
        self.service_seconds = Counter("ocr_service_seconds", "Engine time of requests", registry=r)
        self.device_seconds = Counter("ocr_device_seconds", "Device time of OCR pages (a batch's time over its rows)",
                                      registry=r)
        self.kv_sequence = Histogram("ocr_kv_sequence_bytes", "KV cache per sequence", ["stat"], registry=r,
                                     buckets=tuple(2.0 ** k for k in range(12, 36, 2)))
        self.pages_per_device_hour = Gauge("ocr_pages_per_device_hour", "OCR pages per hour of device time",
                                           registry=r)
        self.cost_per_1000_pages = Gauge("ocr_cost_per_1000_pages", "Device cost of 1,000 OCR pages "
                                         "(OCR_SERVICE_GPU_COST_PER_HOUR)", registry=r)
        self.gpu_memory = Gauge("ocr_gpu_memory_bytes", "GPU memory held by torch", ["kind"], registry=r)
        self.in_flight = Gauge("ocr_requests_in_flight", "Requests being processed", registry=r)
        self.queue_depth = Gauge("ocr_admission_queue_depth", "Requests waiting for a slot", registry=r)
        # the totals the cost gauges are computed from at each scrape
        self.accounted = {"pages": 0, "device_seconds": 0.0}
        self.info = Info("ocr_engine", "Backend, model version and weights digest", registry=r)
