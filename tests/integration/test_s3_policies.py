"""Each compose identity's MinIO policy is what its service asks of S3, no more and no less.

Every service's own code runs against the real S3 server (weed) through a recording proxy on
loopback: the pipeline (kb_ingest with dag.test(), over new, changed, bad and deleted
documents, with retention at 0 so old versions expire), the OCR service's read of an
``s3://`` reference, the search service's page image, the exporter's scrape. Each request is
read as the IAM action an S3 server authorises it by (``tests.s3_actions``); the identity's
policy (``include/config/minio-init/<policy>.json``) must allow every one of them, and every
action it grants must be one some request needed, or be named below with why.
"""

from __future__ import annotations

import json

import pytest

from kb.ledger import doc_id_for
from kb.ledger_db import Ledger
from kb.settings import PipelineSettings
from tests import s3_actions
from tests.integration.dagrun import run_ingest
from tests.pdfs import coded_pages, image_only_pdf, make_pdf, truncated_pdf
from tests.receivers import recording_s3_proxy

pytestmark = pytest.mark.integration

# Granted although no request here needed it, and why.
NOT_EXERCISED = {
    "kb-pipeline": {
        # a page-results object over minio's 64 MiB single-put limit goes up in parts (not made here)
        ("s3:ListBucketMultipartUploads", "arn:aws:s3:::kb-artifacts"),
        ("s3:AbortMultipartUpload", "arn:aws:s3:::kb-artifacts/*"),
        ("s3:ListMultipartUploadParts", "arn:aws:s3:::kb-artifacts/*"),
    },
}


@pytest.fixture
def recorded(kb_env, airflow_db, monkeypatch, tmp_path):
    """Every identity's requests, with the test's bucket names mapped to the deployment's."""
    made: dict[str, set[s3_actions.Need]] = {}
    buckets = {kb_env["inbox"]: "inbox", kb_env["artifacts"]: "kb-artifacts"}
    store = kb_env["store"]

    def requests_of(proxy) -> set[s3_actions.Need]:
        out = set()
        for method, path, query, body in proxy["calls"]:
            out.update(s3_actions.needs(method, path, query, body, buckets))
        return out

    inbox = kb_env["inbox"]
    store.put_bytes(inbox, "docs/manual.pdf", make_pdf(coded_pages("manual", 3)))
    store.put_bytes(inbox, "docs/scan.pdf", image_only_pdf())
    store.put_bytes(inbox, "docs/broken.pdf", truncated_pdf())
    store.put_bytes(inbox, "docs/gone.pdf", make_pdf(coded_pages("gone", 1)))
    port = kb_env["AIRFLOW_CONN_KB_S3"]
    with recording_s3_proxy(kb_env["KB_S3_ENDPOINT"]) as proxy:
        conn = json.loads(port)
        monkeypatch.setenv("AIRFLOW_CONN_KB_S3", json.dumps({**conn, "port": proxy["port"]}))
        monkeypatch.setenv("KB_S3_ENDPOINT", proxy["endpoint"])
        monkeypatch.setenv("KB_ARTIFACT_RETENTION_DAYS", "0")
        assert run_ingest()[0].state in ("success", "failed")  # broken.pdf is quarantined; the run may fail
        store.put_bytes(inbox, "docs/manual.pdf", make_pdf(coded_pages("manual-v2", 3)))
        store.remove(inbox, "docs/gone.pdf")
        run_ingest()
        run_ingest()  # retention 0: what the last run found unneeded expires now
        made["kb-pipeline"] = requests_of(proxy)

    settings = PipelineSettings()
    with recording_s3_proxy(kb_env["KB_S3_ENDPOINT"]) as proxy:  # the OCR service's read of a reference
        from ocr_engine.service.s3 import read_s3
        from ocr_engine.service.settings import ServiceSettings

        version = store.list_versions(inbox, "docs/manual.pdf")[0].version_id
        ocr = ServiceSettings(s3_endpoint=proxy["endpoint"], s3_access_key=kb_env["KB_S3_ACCESS_KEY"],
                              s3_secret_key=kb_env["KB_S3_SECRET_KEY"])
        assert read_s3(ocr, f"s3://{inbox}/docs/manual.pdf?versionId={version}", 10 * 2**20).startswith(b"%PDF")
        assert read_s3(ocr, f"s3://{inbox}/docs/scan.pdf", 10 * 2**20).startswith(b"%PDF")
        made["kb-ocr-read"] = requests_of(proxy)

    with recording_s3_proxy(kb_env["KB_S3_ENDPOINT"]) as proxy:  # the search service's page image
        from kb.objectstore import ObjectStore
        from kb.search.pages import indexed_entry, render_indexed

        via = ObjectStore.connect(proxy["endpoint"], kb_env["KB_S3_ACCESS_KEY"], kb_env["KB_S3_SECRET_KEY"])
        entry = indexed_entry(Ledger.for_settings(settings), doc_id_for(inbox, "docs/manual.pdf"))
        png = render_indexed(via, entry, 1, None, 72, 1_000_000, max_bytes=10 * 2**20)
        assert png.startswith(b"\x89PNG")
        made["kb-search-read"] = requests_of(proxy)

    with recording_s3_proxy(kb_env["KB_S3_ENDPOINT"]) as proxy:  # the exporter's scrape
        from kb.objectstore import ObjectStore
        from kb.observe.exporter import PipelineCollector

        via = ObjectStore.connect(proxy["endpoint"], kb_env["KB_S3_ACCESS_KEY"], kb_env["KB_S3_SECRET_KEY"])
        collector = PipelineCollector(via, settings, Ledger.for_settings(settings), min_interval_s=0)
        names = {m.name for m in collector.collect()}
        assert {"kb_pipeline_runs", "kb_inbox_pending_documents"} <= names, names
        made["kb-exporter-read"] = requests_of(proxy)
    return made


def test_every_identity_may_do_what_its_service_does_and_no_more(recorded):
    problems = []
    for policy, made in recorded.items():
        statements = s3_actions.policy(policy)
        assert made, f"{policy}: no request was recorded"
        missing = sorted(need for need in made if not s3_actions.allows(statements, need))
        if missing:
            problems.append(f"{policy} lacks {missing}")
        unused = s3_actions.granted(statements) - s3_actions.used(statements, made) - NOT_EXERCISED.get(policy, set())
        if unused:
            problems.append(f"{policy} grants what no request needed: {sorted(unused)}")
    assert not problems, "\n".join(problems)
