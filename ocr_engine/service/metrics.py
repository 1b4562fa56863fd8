"""Prometheus metrics, in a registry of the app's own (so tests can start several apps), and
how a request's page results and a scrape update them."""

from __future__ import annotations

import sys

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from ocr_engine.api import cost
from ocr_engine.api.pages import PageResult


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

    def observe(self, results: list[PageResult], seconds: float) -> None:
        """One request's pages, ``seconds`` of engine time."""
        tokens = 0
        self.service_seconds.inc(seconds)
        for r in results:
            self.pages.labels(r.backend, r.status).inc()
            tokens += r.tokens_out or 0
            if not cost.read_by_ocr(r):
                continue
            device_s = cost.device_time(r.device_seconds, r.seconds)
            self.ocr_pages.inc()
            self.tokens_in.inc(r.tokens_in or 0)
            self.device_seconds.inc(device_s)
            self.accounted["pages"] += 1
            self.accounted["device_seconds"] += device_s
        if tokens:
            self.tokens.inc(tokens)
            self.tokens_per_second.set(tokens / seconds if seconds else 0)
        sequences = {(r.kv_peak_bytes, r.kv_mean_bytes, r.batch_size) for r in results if r.kv_peak_bytes is not None}
        for peak, mean, rows in sequences:  # a request's pages of one call share a sequence
            self.kv_sequence.labels("peak").observe(peak)
            self.kv_sequence.labels("mean").observe(mean)
            self.batch_rows.observe(rows)
            self.kv_cache.labels("peak").set(peak)
            self.kv_cache.labels("mean").set(mean)

    def before_scrape(self, gpu_cost_per_hour: float | None) -> None:
        """The gauges computed at each scrape: GPU memory, and the cost of what was accounted."""
        torch = sys.modules.get("torch")  # only where a backend imported it
        if torch is not None and torch.cuda.is_available():
            self.gpu_memory.labels("allocated").set(torch.cuda.memory_allocated())
            self.gpu_memory.labels("reserved").set(torch.cuda.memory_reserved())
        pages, device_s = self.accounted["pages"], self.accounted["device_seconds"]
        per_hour = cost.pages_per_device_hour(pages, device_s)
        if per_hour is not None:
            self.pages_per_device_hour.set(per_hour)
        price = cost.cost_per_1000_pages(gpu_cost_per_hour, pages, device_s)
        if price is not None:
            self.cost_per_1000_pages.set(price)
