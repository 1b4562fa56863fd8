"""The search service as deployed: `kb-search serve` on loopback, over a store the real
pipeline stages wrote (real S3 server, the embedded store (Qdrant Edge), the ONNX embedder)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pymupdf
import pytest

from kb.limits import RangeLimits
from kb.objectstore import ObjectStore
from kb.pipeline import Context
from kb.pipeline.extract import engine_extractor, extract, local_engine
from kb.pipeline.index import index_batch
from kb.pipeline.plan import plan
from kb.pipeline.sense import sense
from kb_dev.samples import ARCHIVE_RULES, PUMP_MANUAL, write_pdf
from kb.settings import PipelineSettings
from tests.conftest import free_ports, serve
from tests.highlight import highlighted_box, overlaps

pytestmark = pytest.mark.integration
KEY = "search-test-key"
SECRET_QUESTION = "How often must the impeller seal be replaced?"


def ingest(ctx: Context, run_id: str) -> list:
    planned = plan(ctx, sense(ctx), run_id, RangeLimits.from_engine(local_engine()))
    for rng in planned.ranges:
        extract(ctx, rng, engine_extractor)
    return index_batch(ctx, planned.documents, run_id)


@pytest.fixture(scope="module")
def kb(s3_server, embed_cache, tmp_path_factory):
    """Two sample documents indexed through the pipeline's stages."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    state = tmp_path_factory.mktemp("search-state")
    settings = PipelineSettings(state_dir=state, embed_cache_dir=embed_cache, inbox_bucket=f"inbox-{tag}",
                                artifacts_bucket=f"artifacts-{tag}")
    store = ObjectStore.connect(s3_server["endpoint"], s3_server["access_key"], s3_server["secret_key"])
    store.ensure_bucket(settings.inbox_bucket, versioned=True)
    store.ensure_bucket(settings.artifacts_bucket)
    docs = tmp_path_factory.mktemp("search-docs")
    for key, (title, pages) in {"manuals/aquila-p200-manual.pdf": PUMP_MANUAL,
                                "rules/archive-digitization-rules-zh.pdf": ARCHIVE_RULES}.items():
        write_pdf(docs / Path(key).name, title, pages)
        store.put_bytes(settings.inbox_bucket, key, (docs / Path(key).name).read_bytes())
    ctx = Context(store, settings)
    results = ingest(ctx, "run-1")
    assert [r.status for r in results] == ["indexed", "indexed"]
    return {"ctx": ctx, "settings": settings, "store": store, "docs": docs, "s3": s3_server}


def _service_env(kb, state: Path, port: int, keys: str) -> dict[str, str]:
    s = kb["settings"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "OCR_"))}
    env.update({
        "KB_STATE_DIR": str(state), "KB_EMBED_CACHE_DIR": str(s.resolved_embed_cache_dir),
        "KB_INBOX_BUCKET": s.inbox_bucket, "KB_ARTIFACTS_BUCKET": s.artifacts_bucket,
        "KB_S3_ENDPOINT": kb["s3"]["endpoint"], "KB_SEARCH_S3_ACCESS_KEY": kb["s3"]["access_key"],
        "KB_SEARCH_S3_SECRET_KEY": kb["s3"]["secret_key"], "KB_SEARCH_API_KEY": keys,
        "KB_SEARCH_PORT": str(port), "HF_HUB_OFFLINE": "1",
    })
    return env


@pytest.fixture(scope="module")
def service(kb, tmp_path_factory):
    port = free_ports(1)[0]
    env = _service_env(kb, kb["settings"].state_dir, port, f"{KEY},rotated-key")
    with serve("kb-search", env, tmp_path_factory.mktemp("search-log") / "search.log", port) as svc:
        yield svc


def ask(service, body: dict, key: str | None = KEY, header: str = "bearer") -> httpx.Response:
    headers = {}
    if key:
        headers = {"Authorization": f"Bearer {key}"} if header == "bearer" else {"X-API-Key": key}
    return httpx.post(f"{service['base']}/v1/search", json=body, headers=headers, timeout=30)


def assert_error(resp: httpx.Response, status: int, code: str, field: str | None = None):
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and error["message"] and error["request_id"] == resp.headers["x-request-id"]
    if field:
        assert error["field"] == field, error


def test_a_question_finds_its_page_with_everything_a_client_needs(service, kb):
    resp = ask(service, {"query": SECRET_QUESTION, "top_k": 3})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["took_ms"] > 0
    top = body["hits"][0]
    assert {"id", "score", "key", "pages", "section", "snippet", "text", "version_id", "page_url", "page_urls",
            "boxes", "kind"} <= set(top)
    assert top["key"] == "manuals/aquila-p200-manual.pdf" and top["pages"] == [4] and top["kind"] == "text"
    assert "<mark>impeller</mark>" in top["snippet_html"] and "<mark>seal</mark>" in top["snippet_html"]
    assert top["page_url"].startswith("/v1/documents/") and top["page_urls"] == [top["page_url"]]
    assert top["page_url"].endswith(f"?version={top['version_id']}&chunk={top['id']}")
    # located: the boxes are on the hit's page, around the answer's words in the text layer
    with pymupdf.open(kb["docs"] / "aquila-p200-manual.pdf") as doc:
        answer = doc[3].search_for("2,000 operating hours")
    assert answer and top["boxes"] and {b["page"] for b in top["boxes"]} == {4}
    assert any(overlaps(b["bbox"], tuple(answer[0])) for b in top["boxes"])
    zh = ask(service, {"query": "档案扫描分辨率不低于多少？", "top_k": 1}, key="rotated-key", header="x-api-key").json()
    assert zh["hits"][0]["key"] == "rules/archive-digitization-rules-zh.pdf" and zh["hits"][0]["pages"] == [2]


def test_keys_are_required_and_bad_input_is_422_naming_the_field(service):
    assert_error(ask(service, {"query": "pump"}, key=None), 401, "unauthorized")
    assert_error(ask(service, {"query": "pump"}, key="not-the-key"), 401, "unauthorized")
    assert httpx.get(f"{service['base']}/health").status_code == 200
    for body, field in (({"query": "   "}, "query"), ({"query": "pump", "top_k": 0}, "top_k"),
                        ({"query": "pump", "top_k": 51}, "top_k"), ({"query": "pump", "mode": "fuzzy"}, "mode"),
                        ({"query": "x" * 2001}, "query"), ({"top_k": 3}, "query"),
                        ({"query": "pump", "filter": {"pages": [3, 1]}}, "filter.pages"),
                        ({"query": "pump", "filter": {"language": "fr"}}, "filter.language")):
        assert_error(ask(service, body), 422, "invalid_request", field)


def test_filters_restrict_hits_by_folder_language_and_pages(service):
    hits = ask(service, {"query": "maintenance schedule scanning", "top_k": 20, "filter": {"key_prefix": "rules/"}}).json()
    assert hits["hits"] and {h["key"] for h in hits["hits"]} == {"rules/archive-digitization-rules-zh.pdf"}
    hits = ask(service, {"query": "pump 档案", "top_k": 20, "filter": {"language": "zh"}}).json()["hits"]
    assert hits and all(h["key"].startswith("rules/") for h in hits)
    hits = ask(service, {"query": "pump", "top_k": 20, "filter": {"pages": [5, 5]}}).json()["hits"]
    assert hits and all(5 in h["pages"] for h in hits)
    exact = ask(service, {"query": "pump", "filter": {"key_prefix": "manuals/aquila-p200-manual.pdf"}}).json()["hits"]
    assert exact and {h["key"] for h in exact} == {"manuals/aquila-p200-manual.pdf"}


def test_the_page_behind_a_hit_is_rendered_from_its_exact_version(service, kb):
    headers = {"Authorization": f"Bearer {KEY}"}
    hit = ask(service, {"query": SECRET_QUESTION, "top_k": 1}).json()["hits"][0]
    resp = httpx.get(service["base"] + hit["page_url"], headers=headers, timeout=30)
    assert resp.status_code == 200 and resp.headers["content-type"] == "image/png"
    image = pymupdf.Pixmap(resp.content)
    assert 0.6 < image.width / image.height < 0.8  # an A4 page, upright

    # a new version of the document with one page: the old version's page 4 is still there
    store, s = kb["store"], kb["settings"]
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "a one-page replacement")
    store.put_bytes(s.inbox_bucket, "manuals/aquila-p200-manual.pdf", doc.tobytes())
    assert httpx.get(service["base"] + hit["page_url"], headers=headers, timeout=30).status_code == 200

    doc_id = hit["page_url"].split("/")[3]
    other = ask(service, {"query": "档案扫描分辨率不低于多少？", "top_k": 1}).json()["hits"][0]
    for url, code in ((f"/v1/documents/{doc_id}/pages/99.png?version={hit['version_id']}", "unknown_page"),
                      (f"/v1/documents/{doc_id}/pages/1.png?version=no-such-version", "unknown_version"),
                      ("/v1/documents/00000000-0000-0000-0000-000000000000/pages/1.png", "unknown_document"),
                      (f"/v1/documents/{doc_id}/pages/4.png?chunk={other['id']}", "unknown_chunk"),
                      (f"/v1/documents/{doc_id}/pages/4.png?chunk=00000000-0000-0000-0000-000000000000",
                       "unknown_chunk"),
                      (f"/v1/documents/{doc_id}/pages/4.png?chunk={hit['id']}&version=no-such-version",
                       "unknown_chunk")):
        assert_error(httpx.get(service["base"] + url, headers=headers, timeout=30), 404, code)
    assert_error(httpx.get(f"{service['base']}/v1/documents/{doc_id}/pages/4.png?chunk=not-an-id", headers=headers,
                           timeout=30), 422, "invalid_request", "chunk")
    assert_error(httpx.get(service["base"] + hit["page_url"]), 401, "unauthorized")


def test_the_page_behind_a_hit_comes_with_the_hit_highlighted_on_its_words(service, kb):
    """The page endpoint draws the hit's boxes: the highlight covers the answer's words, as
    the text layer places them, and the plain page has none."""
    headers = {"Authorization": f"Bearer {KEY}"}
    hit = ask(service, {"query": "What does error code E17 mean?", "top_k": 1}).json()["hits"][0]
    assert hit["pages"] == [5]
    highlighted = httpx.get(service["base"] + hit["page_url"], headers=headers, timeout=30)
    plain = httpx.get(service["base"] + hit["page_url"].split("&chunk=")[0], headers=headers, timeout=30)
    assert highlighted.status_code == plain.status_code == 200
    assert highlighted_box(plain.content) is None
    box = highlighted_box(highlighted.content)
    assert box is not None
    with pymupdf.open(kb["docs"] / "aquila-p200-manual.pdf") as doc:
        page = doc[4]
        scale = pymupdf.Pixmap(highlighted.content).width / page.rect.width
        answer = page.search_for("the motor is overheating")
        elsewhere = page.search_for("Troubleshooting and error codes")  # the heading: a label, not a box
    in_points = tuple(v / scale for v in box)
    assert answer and all(overlaps(in_points, tuple(r)) for r in answer), (in_points, answer)
    assert elsewhere and not any(overlaps(in_points, tuple(r)) for r in elsewhere)


def test_writes_while_serving_fail_no_query_and_show_up_within_seconds(service, kb):
    """An index task writes the store while queries run: every query answers, and the new
    document is found a moment after the write."""
    ctx, s = kb["ctx"], kb["settings"]
    write_pdf(kb["docs"] / "bulletin.pdf", "Service Bulletin SB-9: Aquila P-200 Gearbox", [
        ("Gearbox oil", ["Change the gearbox oil of the Aquila P-200 every 7,500 operating hours with ISO VG 220."]),
    ])
    ctx.store.put_bytes(s.inbox_bucket, "bulletins/sb-9.pdf", (kb["docs"] / "bulletin.pdf").read_bytes())
    statuses: list[int] = []
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            statuses.append(ask(service, {"query": "gearbox oil change interval", "top_k": 3}).status_code)

    with ThreadPoolExecutor(2) as pool:
        for _ in range(2):
            pool.submit(hammer)
        ingest(ctx, "run-2")  # appends to the store's log, which the service's copies apply
        deadline = time.monotonic() + 20
        found = False
        while time.monotonic() < deadline and not found:
            hits = ask(service, {"query": "gearbox oil ISO VG 220", "top_k": 3}).json()["hits"]
            found = any(h["key"] == "bulletins/sb-9.pdf" for h in hits)
            time.sleep(0.2)
        stop.set()
    assert found, "the new document was not searchable 20 s after it was written"
    assert statuses and set(statuses) == {200}, statuses


def test_ready_metrics_and_logs_without_query_text_or_torch(service):
    ready = httpx.get(f"{service['base']}/ready").json()
    assert ready["status"] == "ready" and ready["embedder"].endswith("+onnx") and ready["collection_exists"]
    metrics = httpx.get(f"{service['base']}/metrics").text
    assert re.search(r'kb_search_query_seconds_count\{mode="hybrid"\} [1-9]', metrics)
    assert 'kb_search_errors_total{code="invalid_request"}' in metrics
    assert re.search(r"^kb_search_store_lag_rows 0\.0$", metrics, re.M), "every log row written is applied"
    assert int(ready["store_generation"]) >= 2, ready  # both runs' writes went through the log
    service["log"].flush()
    service["log"].seek(0)
    text = service["log"].read()
    assert '"event": "request"' in text
    assert "impeller" not in text and "gearbox" not in text, "no query text in the logs"
    assert KEY not in text
    maps = Path(f"/proc/{service['proc'].pid}/maps").read_text()
    assert "libtorch" not in maps, "answering queries must not load torch"


def test_a_documents_chunks_are_read_by_key_holders_and_a_deleted_one_has_none(service, kb):
    from kb.ledger import doc_id_for

    doc_id = doc_id_for(kb["settings"].inbox_bucket, "manuals/aquila-p200-manual.pdf")
    url = f"{service['base']}/v1/documents/{doc_id}/chunks"
    assert httpx.get(url).status_code == 401
    got = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"})
    assert got.status_code == 200, got.text
    chunks = got.json()["chunks"]
    assert chunks and all(c["payload"]["doc_id"] == doc_id for c in chunks)
    assert [c["payload"]["chunk_index"] for c in chunks] == sorted(c["payload"]["chunk_index"] for c in chunks)
    assert all(c["payload"]["key"] == "manuals/aquila-p200-manual.pdf" and c["payload"]["text"] for c in chunks)
    assert len({c["payload"]["sha256"] for c in chunks}) == 1, "only the indexed version's chunks"
    unknown = httpx.get(f"{service['base']}/v1/documents/{'0' * 64}/chunks", headers={"Authorization": f"Bearer {KEY}"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_document"
    # a document retired (gone from the inbox) has no chunks a moment later: the delete is a log row too
    from kb.store import open_writer

    gone = doc_id_for(kb["settings"].inbox_bucket, "rules/archive-digitization-rules-zh.pdf")
    with open_writer(kb["settings"]) as writer:
        writer.delete_document(gone)
    deleted = httpx.get(f"{service['base']}/v1/documents/{gone}/chunks", headers={"Authorization": f"Bearer {KEY}"})
    assert deleted.status_code == 404, deleted.text[:300]


def test_a_stop_signal_to_the_services_group_stops_it_at_once_without_starting_a_copy_again(kb, tmp_path):
    """``kb down`` signals a part's whole process group. The store's copies used to be in it:
    they exited before the service began its shutdown, the service's watcher started one
    again, and the new copy held the group until the stop's 20 s deadline killed it (a soak
    stack's teardown took 34 s)."""
    from kb.store.replicas import RESTART_AFTER_S

    port = free_ports(1)[0]
    # a copy of the store: the module's service owns the shards of the original
    state = tmp_path / "state"
    shutil.copytree(kb["settings"].state_dir, state)
    with serve("kb-search", _service_env(kb, state, port, KEY), tmp_path / "search.log", port,
               own_group=True) as svc:
        proc = svc["proc"]
        time.sleep(RESTART_AFTER_S + 0.5)  # past the time a copy that exits is started again
        os.killpg(proc.pid, signal.SIGTERM)
        stopped = time.monotonic()
        while time.monotonic() - stopped < 10 and (proc.poll() is None or _group_alive(proc.pid)):
            time.sleep(0.1)
        took = time.monotonic() - stopped
        svc["log"].seek(0)
        text = svc["log"].read()
        assert "starting it again" not in text, text[-2000:]
        assert took < 10, f"the service's group still ran {took:.0f} s after SIGTERM"
        assert proc.wait(timeout=5) in (0, -signal.SIGTERM)  # uvicorn ends by the signal it handled


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _group_alive(pgid: int) -> bool:
    """A process of the group that is not a zombie (a zombie has stopped; its parent reaps it)."""
    for p in psutil.process_iter(["status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and _pgid(p.pid) == pgid:
            return True
    return False
