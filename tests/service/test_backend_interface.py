"""The OCR service publishes what its OCR backend's interface says, whatever the backend: the
real app (``create_app`` and its lifespan) under uvicorn on loopback, read by the real client,
with a backend registered for these tests alone."""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict

import httpx
import pymupdf
import uvicorn

from kb.ocr_client import OcrClient
from kb_dev.pools import ReplicaCapacity, capacity_of
from ocr_engine.engine import OcrEngine
from ocr_engine.service.app import create_app
from ocr_engine.api.contract import PublishedLimits
from ocr_engine.service.settings import ServiceSettings
from ocr_engine.settings import EngineSettings
from tests.conftest import free_ports
from tests.ocr_engine import fake_backend as F
from tests.pdfs import coded_pages, image_only_pdf, make_pdf

KEY = "key-for-the-fake-backend"
MAX_PAGES = 20


@contextmanager
def serving(fake: F.FakeBackend):
    """``create_app`` on a loopback port until the block ends, once its lifespan has run."""
    engine = OcrEngine(EngineSettings(ocr_backend=F.NAME, seconds_per_page_prior={"textlayer": 0.05, F.NAME: F.PRIOR_S}),
                       F.registry_with(fake))
    app = create_app(ServiceSettings(api_keys=[KEY], max_pages_per_request=MAX_PAGES, max_concurrency=2), engine)
    port = free_ports(1)[0]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not (server.started and httpx.get(f"{base}/ready").status_code == 200):
            assert thread.is_alive() and time.monotonic() < deadline, "the service did not become ready"
            time.sleep(0.05)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def limits(base: str) -> dict:
    return httpx.get(f"{base}/v1/limits", headers={"Authorization": f"Bearer {KEY}"}).json()


def text_and_scan() -> bytes:
    doc = pymupdf.open(stream=make_pdf(coded_pages("fake", 1)), filetype="pdf")
    doc.insert_pdf(pymupdf.open(stream=image_only_pdf(), filetype="pdf"))
    return doc.tobytes()


def test_the_service_publishes_a_registered_backends_limits_and_kv_budget_unchanged():
    fake = F.FakeBackend(kv=True)
    with serving(fake) as base:
        body = limits(base)
        engine = body["engine"]
        assert engine["ocr_backend"] == F.NAME
        assert engine["max_pages_per_call"] == F.PER_CALL
        assert engine["token_budget"] == {**asdict(F.BUDGET), "max_pages": F.BUDGET.max_pages()}
        assert engine["seconds_per_page"][F.NAME] == F.PRIOR_S  # the warm-up's pages are not its pace
        typical = min(MAX_PAGES, F.PER_CALL)
        assert F.CAPACITY // F.BOUND.bytes(typical) == 4
        assert body["kv"] == {
            "budget_bytes": F.CAPACITY, "reserved_bytes": 0, "admitted_sequences": 0, "waiting": 0,
            "bytes_per_token": F.BOUND.bytes_per_token, "window": F.BOUND.window,
            "prompt_tokens": F.BOUND.prompt_tokens, "visual_tokens_per_page": F.BOUND.visual_tokens_per_page,
            "typical_range_pages": typical, "bytes_per_typical_range": F.BOUND.bytes(typical),
            "capacity_sequences": F.CAPACITY // F.BOUND.bytes(typical),
            "max_pages": F.BOUND.max_pages(F.CAPACITY), "max_batch": F.MAX_BATCH,
        }
        metrics = httpx.get(f"{base}/metrics").text
        assert re.search(rf'^ocr_engine_info\{{backend="{F.NAME}",model_version="fake-ocr-1",'
                         rf'weights_digest="{"f" * 64}"\}} 1\.0$', metrics, re.M), metrics
        assert re.search(rf"^ocr_kv_budget_bytes {float(F.CAPACITY)}$", metrics, re.M)

        # the pipeline's side reads the same numbers through the contract
        client = OcrClient(base, KEY)
        planned = client.limits()
        assert (planned.ocr_backend, planned.scanned_seconds_per_page) == (F.NAME, F.PRIOR_S)
        assert (planned.max_pages_per_call, planned.max_pages_kv) == (F.PER_CALL, body["kv"]["max_pages"])
        assert capacity_of(base, client.published()) == ReplicaCapacity(base, 4, "kv")

        # a scanned page goes to the fake, through KV admission and its expecting()
        fake.calls.clear()
        pages = client.parse(text_and_scan(), 1, 2)
        assert [(p.page, p.backend) for p in pages] == [(1, "textlayer"), (2, F.NAME)]
        assert pages[1].markdown.startswith("fake read page 2") and pages[1].model_version == "fake-ocr-1"
        assert fake.calls == [[2]] and fake.calls_while_expected == [[2]]
        assert client.parse(text_and_scan(), 1, 1, backend=F.NAME)[0].backend == F.NAME
        after = limits(base)
        assert (after["kv"]["reserved_bytes"], after["kv"]["admitted_sequences"]) == (0, 0)
        assert after["engine"]["pace"][F.NAME]["samples"] == 2


def test_without_a_kv_bound_there_is_no_kv_section_and_the_pool_counts_engine_slots():
    fake = F.FakeBackend(kv=False)
    with serving(fake) as base:
        body = limits(base)
        assert body["engine"]["ocr_backend"] == F.NAME and body["kv"] is None
        assert capacity_of(base, PublishedLimits.from_dict(body)) == ReplicaCapacity(base, 2, "concurrency")
        resp = httpx.post(f"{base}/v1/parse", headers={"Authorization": f"Bearer {KEY}"},
                          files={"file": ("d.pdf", image_only_pdf(), "application/pdf")})
        assert resp.status_code == 200, resp.text
        assert [p["backend"] for p in resp.json()["pages"]] == [F.NAME]
        assert fake.calls_while_expected == []  # nothing admitted, nothing to batch


def test_a_backend_the_registry_does_not_know_is_a_bad_request():
    with serving(F.FakeBackend()) as base:
        resp = httpx.post(f"{base}/v1/parse", headers={"Authorization": f"Bearer {KEY}"}, data={"backend": "magic"},
                          files={"file": ("d.pdf", image_only_pdf(), "application/pdf")})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "bad_backend"
        assert F.NAME in resp.json()["error"]["message"]  # the registry's names, the fake's included
