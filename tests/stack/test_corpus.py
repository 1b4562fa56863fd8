"""Real documents at real sizes through the whole stack, with small OCR service limits.

A subset of the real corpus (include/corpus: 111 pages, English and Chinese, two-column
papers, image-only copies that are skewed and speckled) goes through the session's live
stack, its OCR service restarted for the module with 10 pages per request and a request
timeout of a few scanned pages' time. The service starts with an optimistic idea of a scanned
page's time (as any service does before it has timed a page): a fifth of what one takes here.
So its scanned ranges are planned too long for the timeout: the page limit, the time budget and
splitting are all exercised on every run, and every document must still be indexed with all
its pages. Both are cut from a scanned page's time measured first, on this machine that day
(7 s on a busy day, 2 s on a quiet one): fixed numbers split nothing on a quiet day.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import pymupdf
import pytest

from kb.artifacts import ArtifactKeys
from kb_dev.corpus import fetch
from kb.ledger import Status, doc_id_for
from kb.ledger_db import Ledger
from kb.settings import PipelineSettings
from kb.objectstore import ObjectStore
from kb_dev.settings import StackSettings
from tests.live import run_id_of
from tests.stack.kbcli import REPO, kb

pytestmark = pytest.mark.stack
MAX_PAGES = 10  # per request
TIMEOUT_PAGES = 4  # the request timeout, in scanned pages of this corpus as timed here
# The prior a fresh service plans scanned pages with, as a share of their real time: the
# planner fills half the timeout, 4 pages' time / 2 / (1/5 of a page) = 10 pages (the request
# limit), so the 5- and 8-page scans are each sent whole, over the timeout: the service cuts
# them off and the client splits them. Whichever request first has pages timed (a scanned range that times
# out, or a page without a text layer in a born-digital document), the client cuts every
# range after it to the pace the service publishes then.
PRIOR_SHARE = 1 / 5
PREFIX = "corpus/"


@pytest.fixture(scope="module")
def corpus():
    # kept between local runs (.kb is ignored by git); a fresh clone downloads ~5 MB of packages
    return fetch(REPO / ".kb" / "corpus", subset=True)


def _scanned_page_seconds(live, corpus) -> float:
    """A scanned page's seconds, read by the stack's OCR service as it is: the mean of pages 2
    and 3 of a scan (the first page of a request pays for anything still loading: 4.3 s against
    2.6 s seen here)."""
    scan = next(f for f in corpus if f.scanned and f.pages >= 3)
    with open(scan.path, "rb") as fh:
        answer = httpx.post(f"{live.ocr_url}/v1/parse", headers=live.headers("ocr"), timeout=300,
                            files={"file": (scan.path.name, fh, "application/pdf")}, data={"pages": "1-3"})
    assert answer.status_code == 200, answer.text
    _, *timed = (page["seconds"] for page in answer.json()["pages"])
    return sum(timed) / len(timed)


@pytest.fixture(scope="module")
def small_limits_stack(live, corpus):
    """The live stack with its OCR service under small limits (a fresh one: nothing timed yet);
    yields the stack's environment and the limits."""
    page_s = _scanned_page_seconds(live, corpus)
    limits = {
        "OCR_SERVICE_MAX_PAGES_PER_REQUEST": str(MAX_PAGES),
        "OCR_SERVICE_REQUEST_TIMEOUT_S": f"{TIMEOUT_PAGES * page_s:.1f}",
        "OCR_SECONDS_PER_PAGE_PRIOR": json.dumps({"textlayer": 0.05, "ppocr": round(PRIOR_SHARE * page_s, 3),
                                                  "unlimited": 2.0}),
    }
    print(f"\na scanned page takes {page_s:.1f} s here: {limits}")
    with live.ocr_service_with(**limits):
        yield live.env, limits


def _store(env):
    secrets = dict(line.split("=", 1) for line in (REPO / env["KB_STATE_DIR"] / "secrets.env").read_text().split())
    return ObjectStore.connect(f"127.0.0.1:{env['KB_S3_PORT']}", secrets["KB_S3_ACCESS_KEY"], secrets["KB_S3_SECRET_KEY"])


def _parse_statuses(env) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{env['KB_OCR_PORT']}/metrics", timeout=10).text
    return {m[0]: float(m[1]) for m in re.findall(r'ocr_requests_total\{route="/v1/parse",status="(\d+)"\} (\S+)', text)}


def test_every_real_document_is_indexed_with_all_its_pages_under_small_limits(small_limits_stack, corpus, tmp_path):
    env, limits = small_limits_stack
    folder = tmp_path / "upload"
    for f in corpus:
        target = folder / ("scanned" if f.scanned else "born-digital") / f.path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f.path, target)
    done = kb(env, "ingest", str(folder), "--prefix", PREFIX, "--wait", "--timeout", "2400", timeout=2500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_id = run_id_of(done.stdout)

    store = _store(env)
    ledger = Ledger.for_settings(PipelineSettings(state_dir=Path(env["KB_STATE_DIR"])))
    doc_ids = []
    for f in corpus:
        key = f"{PREFIX}{'scanned' if f.scanned else 'born-digital'}/{f.path.name}"
        doc_ids.append(doc_id_for("inbox", key))
        entry = ledger.get(doc_ids[-1])
        assert entry is not None and entry.status == Status.INDEXED, (key, entry and entry.error)
        assert entry.pages == pymupdf.open(f.path).page_count == f.pages, key
        assert not entry.failed_pages, (key, entry.failed_pages)

    summary = store.get_json("kb-artifacts", ArtifactKeys.run_summary(run_id))
    assert summary["documents_indexed"] == len(corpus) and summary["pages"] == sum(f.pages for f in corpus)
    assert summary["limits"]["max_pages"] == MAX_PAGES
    assert summary["limits"]["timeout_s"] == float(limits["OCR_SERVICE_REQUEST_TIMEOUT_S"])
    # Every planned range fits the page limit, so the service never refused one for size.
    # Planned at the prior, the scanned ranges were too long for the pace the service timed;
    # they were split, and their parts passed. Only the requests sent before the service had
    # timed a page (one per pool slot) could run into its timeout: every later range was cut
    # to the pace it published by then, before it was sent.
    planned = [o.key for doc_id in doc_ids for o in store.list_latest("kb-artifacts", ArtifactKeys.pages_of(doc_id))
               if re.search(r"/auto/\d{5}-\d{5}\.json$", o.key)]
    spans = [tuple(map(int, re.search(r"(\d{5})-(\d{5})\.json$", k).groups())) for k in planned]
    assert spans and max(b - a + 1 for a, b in spans) <= MAX_PAGES
    statuses = _parse_statuses(env)
    assert statuses.get("422", 0) == 0 and statuses.get("413", 0) == 0, statuses
    slots = StackSettings.from_env(env).gpu_ocr_pool_slots
    assert summary["ranges_split"] >= 1 and statuses.get("504", 0) <= slots, (summary["ranges_split"], statuses)
    print(f"\ncorpus subset: {summary['pages']} pages, {summary['ranges']} ranges, {summary['ranges_split']} split, "
          f"{statuses} by status, {summary['seconds']} s")

    # what got in is found on its page, in English from a scan and in Chinese from a text layer
    for query, key, page in (
        ("utilities for handling genetic data genotypes haplotypes", f"{PREFIX}scanned/genetics_article.scan.pdf", 1),
        ("可执行二进制文件安装到/usr/bin 而非/usr/local/bin", f"{PREFIX}born-digital/maint-guide.zh-cn.pdf", 21),
    ):
        hits = json.loads(kb(env, "search", query, "--top-k", "5", "--prefix", PREFIX, "--json").stdout)
        assert any(h["key"] == key and page in h["pages"] for h in hits), (query, [(h["key"], h["pages"]) for h in hits])
