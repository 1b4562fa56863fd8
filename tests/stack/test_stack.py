"""The whole local stack through the real ``kb`` command: up, ingest, search, status, down.

On the session's live stack (``tests/live.py``); the samples go under ``stack/``, and every
search here is limited to that folder (``--prefix``), since other suites index copies of them."""

from __future__ import annotations

import base64
import json
import socket
import time
from pathlib import Path

import pymupdf
import pytest

from kb.errors import StorageRefused
from kb.objectstore import ObjectStore
from tests.conftest import weed_port_set
from tests.highlight import highlighted_box, overlaps
from tests.stack.preloaded import task_libraries_loaded
from tests.stack.kbcli import REPO, kb

pytestmark = pytest.mark.stack
CHROMIUM = "/usr/bin/chromium"
FOLDER = "stack"  # --prefix takes a folder's name with or without its slash
PREFIX = f"{FOLDER}/"
SAMPLES = REPO / "include" / "samples"


@pytest.fixture(scope="module")
def stack_env(live):
    return live.env


@pytest.fixture(scope="module")
def ingested(stack_env):
    """The samples under ``stack/`` through ``kb ingest --wait``: the command's output."""
    done = kb(stack_env, "ingest", str(SAMPLES), "--prefix", FOLDER, "--wait", "--timeout", "400")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def search(env, query: str, *args: str) -> list[dict]:
    done = kb(env, "search", query, "--prefix", PREFIX, "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_status_reports_every_part_healthy(stack_env):
    done = kb(stack_env, "status", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["s3"]["healthy"] and {"inbox", "kb-artifacts"} <= set(status["s3"]["buckets"])
    assert status["airflow"]["healthy"]
    assert status["ocr"]["healthy"]
    assert set(status["airflow"]["components"]) >= {"scheduler", "dag_processor", "triggerer", "metadatabase"}
    assert status["store"]["prepared"] and status["store"]["mode"] == "embedded"
    secrets = (Path(stack_env["KB_STATE_DIR"]) / "secrets.env")
    assert secrets.stat().st_mode & 0o077 == 0, "the secrets file must be private"


def test_task_processes_start_from_a_forkserver_that_has_the_task_libraries_loaded(stack_env, ingested):
    """The scheduler's LocalExecutor forks its workers, whose forks are the task processes,
    from a forkserver that imported kb_airflow.preload (Python's forkserver drops a preload
    that fails to import without a word)."""
    from kb_dev.settings import StackSettings
    from kb_dev.stack.airflow_local import PART, SCHEDULER_PART
    from kb_dev.stack.process import cmdline, part_members

    s = StackSettings.from_env(stack_env)
    servers = [pid for part in (PART, SCHEDULER_PART) for pid in part_members(s, part)
               if "multiprocessing.forkserver" in " ".join(cmdline(pid))]
    assert servers, "no forkserver under the stack's Airflow: its executor forks workers from the scheduler"
    assert task_libraries_loaded(servers[-1])


def test_wrong_s3_credentials_are_refused_as_a_typed_error(stack_env):
    secrets = dict(line.split("=", 1) for line in (Path(stack_env["KB_STATE_DIR"]) / "secrets.env").read_text().split())
    endpoint = f"127.0.0.1:{stack_env['KB_S3_PORT']}"
    good = ObjectStore.connect(endpoint, secrets["KB_S3_ACCESS_KEY"], secrets["KB_S3_SECRET_KEY"])
    assert good.bucket_exists("inbox")
    for access, secret in ((secrets["KB_S3_ACCESS_KEY"], "not-the-secret"), ("nobody", "nothing"), (None, None)):
        with pytest.raises(StorageRefused) as info:
            list(ObjectStore.connect(endpoint, access, secret).list_latest("inbox"))
        assert info.value.s3_code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied")
        assert secret is None or secret not in info.value.message


def test_kb_with_wrong_keys_is_one_line_and_exit_2_not_a_traceback(stack_env, tmp_path):
    sample = tmp_path / "one.pdf"
    sample.write_bytes((SAMPLES / "aquila-p200-manual.pdf").read_bytes())
    done = kb(dict(stack_env, KB_S3_SECRET_KEY="not-the-secret"), "ingest", str(sample), "--prefix", "stack-refused")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("kb: error [storage_refused]: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and "not-the-secret" not in done.stderr


def test_a_prefix_is_a_folder_with_or_without_its_slash(stack_env, tmp_path):
    sample = tmp_path / "image-bomb.pdf"
    sample.write_bytes((SAMPLES / "aquila-p200-manual.pdf").read_bytes())
    for prefix in ("stack-folder", "stack-folder/", "/stack-folder/"):
        done = kb(stack_env, "ingest", str(sample), "--prefix", prefix)
        assert done.returncode == 0, done.stderr
        assert "uploaded s3://inbox/stack-folder/image-bomb.pdf " in done.stdout, (prefix, done.stdout)
    secrets = dict(line.split("=", 1) for line in (Path(stack_env["KB_STATE_DIR"]) / "secrets.env").read_text().split())
    store = ObjectStore.connect(f"127.0.0.1:{stack_env['KB_S3_PORT']}", secrets["KB_S3_ACCESS_KEY"],
                                secrets["KB_S3_SECRET_KEY"])
    assert [o.key for o in store.list_latest("inbox", "stack-folder")] == ["stack-folder/image-bomb.pdf"]
    store.remove("inbox", "stack-folder/image-bomb.pdf")  # no run was meant to read it


def test_ingest_wait_then_search_cites_the_right_page(stack_env, ingested):
    assert "run success" in ingested and "3 indexed" in ingested
    assert "extract" in ingested  # progress lines name the tasks
    assert "0 quarantined" in ingested
    assert f"{PREFIX}aquila-p200-manual.pdf: indexed, " in ingested  # where each uploaded file stands

    hits = search(stack_env, "How often must the impeller seal be replaced?", "--top-k", "3")
    assert hits and {"score", "key", "pages", "text", "snippet"} <= set(hits[0])
    assert all(h["key"].startswith(PREFIX) for h in hits)
    assert hits[0]["key"] == f"{PREFIX}aquila-p200-manual.pdf" and hits[0]["pages"] == [4]
    assert "2,000 operating hours" in hits[0]["text"]

    # the scanned sample went through the OCR service (PP-OCR): its text is searchable on its page
    [hit] = search(stack_env, "How often must the coupling insert be replaced?", "--top-k", "1")
    assert hit["key"] == f"{PREFIX}service-bulletin-sb7-scan.pdf" and hit["pages"] == [2]
    assert "every 3 years" in hit["text"]

    # the demo questions as an evaluation set, through `kb eval`; a hit counts only if its text
    # holds the answer (issue 53), so each question carries its answer as the sample says it
    from kb_dev.samples import DEMO_QUESTIONS

    answers = {"aquila-p200-manual.pdf": ["every 2,000 operating hours", "low suction pressure"],
               "archive-digitization-rules-zh.pdf": ["不低于三百点每英寸"],
               "service-bulletin-sb7-scan.pdf": ["every 3 years"]}
    qa = stack_env["KB_STATE_DIR"] + "/qa.jsonl"
    with open(qa, "w", encoding="utf-8") as fh:
        for question, key, page in DEMO_QUESTIONS:
            fh.write(json.dumps({"doc": key, "page": page, "question": question,
                                 "answer_substring": answers[key].pop(0)}) + "\n")
    done = kb(stack_env, "eval", qa, "--mode", "all", "--prefix", FOLDER, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["modes"]) == {"dense", "sparse", "hybrid"}
    assert report["modes"]["hybrid"]["groups"]["all"] == {"n": 4, "recall@5": 1.0, "mrr": 1.0}
    assert report["modes"]["hybrid"]["groups"]["zh"]["n"] == 1

    # the same files again: the run finds nothing new and the index is unchanged
    done = kb(stack_env, "ingest", str(SAMPLES), "--prefix", PREFIX, "--wait", "--timeout", "400")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 indexed" in done.stdout


def test_the_search_page_in_a_real_browser_finds_the_page_and_shows_it_highlighted(stack_env, ingested):
    """Headless Chromium (Debian's) types a question into the search page and finds the
    expected document and page among the results, then opens the page image; on a
    born-digital page, the highlight it shows covers the answer's words where the text
    layer places them."""
    from playwright.sync_api import sync_playwright

    secrets = dict(line.split("=", 1) for line in (Path(stack_env["KB_STATE_DIR"]) / "secrets.env").read_text().split())
    status = json.loads(kb(stack_env, "status", "--json").stdout)
    assert status["search"]["healthy"]
    url = f"{status['search']['url']}/#key={secrets['KB_SEARCH_API_KEY']}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page()
            page.goto(url)
            page.fill("#query", "How often must the coupling insert be replaced?")
            page.click("#go")
            page.wait_for_selector("li.hit", timeout=30_000)
            hits = page.locator("li.hit")
            found = [(hits.nth(i).get_attribute("data-key"), hits.nth(i).get_attribute("data-pages"))
                     for i in range(hits.count())]
            assert (f"{PREFIX}service-bulletin-sb7-scan.pdf", "2") in found, found
            first = hits.nth(found.index((f"{PREFIX}service-bulletin-sb7-scan.pdf", "2")))
            assert first.locator("mark").count() >= 2  # matched terms marked in the snippet
            first.locator("a.page-link").click()
            image = first.locator("img.page")
            image.wait_for(timeout=30_000)
            assert page.evaluate("img => img.naturalWidth", image.element_handle()) > 100

            # a born-digital page: the highlight the page shows lands on the answer's words
            page.fill("#query", "How often must the impeller seal be replaced?")
            page.click("#go")
            page.wait_for_selector(f"li.hit[data-key='{PREFIX}aquila-p200-manual.pdf']", timeout=30_000)
            hit = page.locator(f"li.hit[data-key='{PREFIX}aquila-p200-manual.pdf']").first
            assert hit.get_attribute("data-pages") == "4"
            hit.locator("a.page-link[data-page='4']").click()
            shown = hit.locator("img.page[data-page='4']")
            shown.wait_for(timeout=30_000)
            png = base64.b64decode(page.evaluate(SHOWN_IMAGE_BYTES, shown.element_handle()))
        finally:
            browser.close()
    box = highlighted_box(png)
    assert box is not None, "the page was shown without a highlight"
    with pymupdf.open(REPO / "include" / "samples" / "aquila-p200-manual.pdf") as doc:
        scale = pymupdf.Pixmap(png).width / doc[3].rect.width
        answer = doc[3].search_for("every 2,000 operating hours")
    assert answer and all(overlaps(tuple(v / scale for v in box), tuple(r)) for r in answer)


# the bytes of an <img> the page shows (its src is a blob: URL), as base64
SHOWN_IMAGE_BYTES = """async img => {
  const bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
  let s = ""; for (const b of bytes) s += String.fromCharCode(b); return btoa(s);
}"""


def test_kb_search_asks_the_service_and_falls_back_in_process_with_a_note(stack_env, ingested):
    question = ("search", "What does error code E42 mean?", "--top-k", "1", "--prefix", FOLDER, "--json")
    done = kb(stack_env, *question)
    assert done.returncode == 0 and "note:" not in done.stderr, done.stderr
    assert [(h["key"], h["pages"]) for h in json.loads(done.stdout)] == [(f"{PREFIX}aquila-p200-manual.pdf", [5])]
    # the same question with the service stopped: answered in process, with a one-line note
    from kb_dev.settings import StackSettings
    from kb_dev.stack import search

    settings = StackSettings(state_dir=Path(stack_env["KB_STATE_DIR"]), search_port=int(stack_env["KB_SEARCH_PORT"]))
    assert search.stop(settings)
    try:
        done = kb(stack_env, *question)
        assert done.returncode == 0 and done.stderr.count("\n") == 1 and "not running" in done.stderr
        assert [(h["key"], h["pages"]) for h in json.loads(done.stdout)] == [(f"{PREFIX}aquila-p200-manual.pdf", [5])]
    finally:
        assert kb(stack_env, "up").returncode == 0  # starts what is not running: the search service


def test_a_taken_port_is_a_clear_error_within_a_bounded_wait(stack_env, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        env = dict(stack_env, KB_STATE_DIR=str(tmp_path / "other"), KB_S3_PORT=str(taken))
        started = time.monotonic()
        done = kb(env, "up", "--no-airflow", timeout=60)
    assert done.returncode == 2
    assert f"port {taken}" in done.stderr and "already in use" in done.stderr
    assert time.monotonic() - started < 30
    assert kb(env, "status").returncode == 1  # nothing was left running


def test_down_stops_exactly_what_up_started(stack_env, tmp_path):
    """A second stack (S3 only) on its own ports comes up and goes down without touching the
    first, and leaves none of weed's Unix sockets (a SIGKILLed weed leaves them) nor log files in /tmp."""
    from kb_dev.settings import StackSettings
    from kb_dev.stack.process import log_path
    from kb_dev.stack.s3 import PART, weed_sockets

    env = dict(stack_env, KB_STATE_DIR=str(tmp_path / "second"))
    env.update({f"KB_{k.upper()}": str(v) for k, v in weed_port_set().items()})
    assert kb(env, "up", "--no-airflow").returncode == 0
    pid = json.loads(kb(env, "status", "--json").stdout)["s3"]["pid"]
    assert pid
    settings = StackSettings.from_env(env)
    sockets = weed_sockets(settings)
    assert sockets[0].exists(), f"weed's master made no {sockets[0]}: the names have changed"
    assert kb(env, "down").returncode == 0
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    assert not [p for p in sockets if p.exists()]
    assert not list(Path("/tmp").glob(f"weed.*.{pid}")), "weed wrote its log into /tmp, outside the stack's folder"
    assert log_path(settings, PART).read_text().strip(), "weed's log is not in the stack's folder"
    assert kb(env, "status").returncode == 1
    assert kb(stack_env, "status").returncode == 0  # the first stack is still up
