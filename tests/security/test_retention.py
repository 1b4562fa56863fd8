"""The retire guard on the live stack: an inbox prefix emptied at once (a wrong bucket, a
partial listing and a mass deletion look the same) retires nothing, and its documents stay
searchable through the search service until a forced run says the deletions are meant."""

from __future__ import annotations

import json
import time
import uuid

from kb.objectstore import ObjectStore
from kb.settings import PipelineSettings
from kb_dev.settings import StackSettings
from kb_dev.stack.topology import run_ingest
from tests.pdfs import coded_pages, make_pdf

HOST = "127.0.0.1"


def _inbox(live) -> str:
    return live.env.get("KB_INBOX_BUCKET") or PipelineSettings.model_fields["inbox_bucket"].default


def _search_keys(live, query: str) -> list[str]:
    done = live.kb("search", query, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    return [hit["key"] for hit in json.loads(done.stdout)]


def _eventually(check, timeout_s: float = 30.0) -> bool:
    """The search service reloads the local store about every half second after a write."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_an_emptied_inbox_prefix_stays_searchable_until_a_forced_run(live, tmp_path):
    prefix = f"security/retire-guard-{uuid.uuid4().hex[:8]}/"
    folder = tmp_path / "docs"
    folder.mkdir()
    codes = []
    for i in range(3):
        name = f"retireguard{i}"
        (folder / f"{name}.pdf").write_bytes(make_pdf(coded_pages(name, 1)))
        codes.append((f"{prefix}{name}.pdf", f"{name.upper()}-001"))
    done = live.kb("ingest", str(folder), "--prefix", prefix, "--wait")
    assert done.returncode == 0 and "3 indexed" in done.stdout, done.stdout + done.stderr
    for key, code in codes:
        assert _eventually(lambda k=key, c=code: k in _search_keys(live, c)), key

    store = ObjectStore.connect(f"{HOST}:{live.env['KB_S3_PORT']}", live.secrets["KB_S3_ACCESS_KEY"],
                                live.secrets["KB_S3_SECRET_KEY"])
    stack = StackSettings.from_env(live.env)
    for key, _ in codes:
        store.remove(_inbox(live), key)
    try:
        run = run_ingest(stack, {"prefix": prefix, "force": False}, 600, echo=lambda _line: None)
        assert run.state == "success", run
        assert run.summary["documents_deleted"] == 0
        assert run.summary["retire_held"]["would_retire"] == 3
        time.sleep(3)  # past the search service's reload, so a retirement would show
        for key, code in codes:  # the search service still answers with every one of them
            assert key in _search_keys(live, code)
    finally:
        # a forced run retires them, so this test leaves nothing behind for the others' guard
        forced = run_ingest(stack, {"prefix": prefix, "force": True}, 600, echo=lambda _line: None)
    assert forced.state == "success" and forced.summary["documents_deleted"] == 3
    for key, code in codes:
        assert _eventually(lambda k=key, c=code: k not in _search_keys(live, c)), key
