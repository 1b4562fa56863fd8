"""KV-aware admission and batched decoding in the OCR service as deployed: ``ocr-engine
serve`` on loopback with a tiny random Unlimited OCR whose output never ends (so a call
lasts its token limit), on a KV budget of exactly two one-page sequences."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from kb.ocr_client import OcrClient
from kb_dev.pools import ReplicaCapacity, replica_capacities
from ocr_engine.settings import EngineSettings
from ocr_engine.unlimited.backend import UnlimitedBackend
from tests.tiny_unlimited import build_tiny_model
from tests.conftest import start_service
from tests.pdfs import coded_pages, make_pdf, scanned_copy

# sequential: it watches a KV budget fill and drain within bounded waits
pytestmark = pytest.mark.sequential
KEY = "key-for-admission-tests"
N = 2  # one-page sequences the budget holds
TOKENS = 300  # per page: a few seconds of the tiny model on 2 cores
COST = 3.5  # per device-hour


def scanned(tag: str, pages: int) -> bytes:
    return scanned_copy(make_pdf(coded_pages(tag, pages)), dpi=72)


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + (('{' + labels + '}') if labels else ''))} (\S+)$", text, re.MULTILINE)
    assert match, f"{name}{labels} not in /metrics"
    return float(match.group(1))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("never-ends"), never_ends=True)


def test_a_budget_of_n_sequences_runs_n_together_queues_the_next_and_refuses_one_too_large(
        s3_server, tmp_path, model_dir):
    bound = UnlimitedBackend(model_dir, EngineSettings()).bound  # the arithmetic, in process
    budget = N * bound.bytes(1)
    assert bound.bytes(5) > budget  # five pages could never fit
    env = {"OCR_SERVICE_API_KEYS": KEY, "OCR_MODEL_DIR": str(model_dir), "OCR_KV_BUDGET_BYTES": str(budget),
           "OCR_MAX_NEW_TOKENS_PER_PAGE": str(TOKENS), "OCR_BATCH_GATHER_S": "2",
           "OCR_SERVICE_MAX_CONCURRENCY": "4", "OCR_SERVICE_MAX_QUEUE": "4",
           "OCR_SERVICE_REQUEST_TIMEOUT_S": "300", "OCR_SERVICE_GPU_COST_PER_HOUR": str(COST)}
    with start_service(s3_server, tmp_path, env) as svc:
        base, headers = svc["base"], {"Authorization": f"Bearer {KEY}"}

        def post(data: bytes) -> httpx.Response:
            return httpx.post(f"{base}/v1/parse", files={"file": ("doc.pdf", data, "application/pdf")},
                              headers=headers, timeout=300)

        kv = httpx.get(f"{base}/v1/limits", headers=headers).json()["kv"]
        assert kv["budget_bytes"] == budget and kv["bytes_per_token"] == bound.bytes_per_token
        assert kv["capacity_sequences"] == budget // bound.bytes(kv["typical_range_pages"])
        # the largest range the budget admits: the planner cuts scanned ranges to it
        assert bound.bytes(kv["max_pages"]) <= budget < bound.bytes(kv["max_pages"] + 1)
        assert OcrClient(base, KEY).limits().max_pages_kv == kv["max_pages"]
        # and `kb pools sync` counts this replica as what its budget holds
        assert replica_capacities([base], KEY) == [ReplicaCapacity(base, kv["capacity_sequences"], "kv")]

        seen = []  # (admitted, reserved, waiting) while the three run
        with ThreadPoolExecutor(3) as pool:
            pending = [pool.submit(post, scanned(f"adm{i}", 1)) for i in range(3)]
            deadline = time.monotonic() + 60
            while True:
                text = httpx.get(f"{base}/metrics").text
                state = (metric(text, "ocr_kv_admitted_sequences"), metric(text, "ocr_kv_reserved_bytes"),
                         metric(text, "ocr_kv_waiting_requests"))
                seen.append(state)
                if state == (N, budget, 1):
                    break
                assert time.monotonic() < deadline, f"never saw {N} admitted and one waiting: {seen[-5:]}"
                time.sleep(0.05)
            # one too large is refused at once, while the budget is taken, and never queued
            started = time.monotonic()
            too_large = post(scanned("big", 5))
            assert too_large.status_code == 413, too_large.text
            assert too_large.json()["error"]["code"] == "kv_budget_exceeded"
            assert time.monotonic() - started < 10
            while not all(p.done() for p in pending):
                text = httpx.get(f"{base}/metrics").text
                seen.append((metric(text, "ocr_kv_admitted_sequences"), metric(text, "ocr_kv_reserved_bytes"),
                             metric(text, "ocr_kv_waiting_requests")))
                time.sleep(0.1)
            responses = [p.result() for p in pending]

        assert [r.status_code for r in responses] == [200] * 3, [r.text[:200] for r in responses]
        pages = [r.json()["pages"][0] for r in responses]
        # the two admitted decoded as one batch, the one that waited alone
        assert sorted(p["batch_size"] for p in pages) == [1, N, N]
        assert all(p["backend"] == "unlimited" and p["tokens_out"] > 0 for p in pages)
        assert all(0 < p["kv_peak_bytes"] <= bound.bytes(1) for p in pages)
        assert max(a for a, _, _ in seen) == N and max(r for _, r, _ in seen) <= budget

        text = httpx.get(f"{base}/metrics").text
        assert metric(text, "ocr_kv_budget_bytes") == budget
        assert (metric(text, "ocr_kv_admitted_sequences"), metric(text, "ocr_kv_reserved_bytes")) == (0, 0)
        assert metric(text, "ocr_requests_total", 'route="/v1/parse",status="413"') == 1
        assert metric(text, "ocr_decode_batch_rows_count") == 3 and metric(text, "ocr_decode_batch_rows_sum") == 2 * N + 1
        # cost accounting agrees with the pages it was given
        device_s = metric(text, "ocr_device_seconds_total")
        assert device_s == pytest.approx(sum(p["device_seconds"] for p in pages), abs=1e-3)
        assert metric(text, "ocr_accounted_pages_total") == 3
        assert metric(text, "ocr_tokens_in_total") == 3 * bound.visual_tokens_per_page
        assert metric(text, "ocr_pages_per_device_hour") == pytest.approx(3 / (device_s / 3600), rel=1e-6)
        assert metric(text, "ocr_cost_per_1000_pages") == pytest.approx(COST * device_s / 3600 / 3 * 1000, rel=1e-6)
