"""kb_ingest end to end on the real S3 server, Airflow's dag.test() and the embedded store (Qdrant Edge)."""

from __future__ import annotations

import pytest

from tests.integration.dagrun import points_by_doc, run_ingest
from tests.pdfs import coded_pages, make_pdf

pytestmark = pytest.mark.integration


def _upload(kb_env, key: str, data: bytes):
    return kb_env["store"].put_bytes(kb_env["inbox"], key, data, content_type="application/pdf")


def _pages_of(points, code: str) -> set[int]:
    pages = set()
    for p in points:
        if code in p.payload["text"]:
            pages.update(p.payload["pages"])
    return pages


def test_ingest_rerun_and_new_version(kb_env, airflow_db):
    _upload(kb_env, "alpha.pdf", make_pdf(coded_pages("alpha", 7)))  # 3 ranges at 3 pages per range
    _upload(kb_env, "manuals/beta.pdf", make_pdf(coded_pages("beta", 2)))
    _upload(kb_env, "zh.pdf", make_pdf([f"第{i}页。档案编号是甲乙{i}号，本页内容用于检索测试。" * 3 for i in range(1, 4)],
                                       fontname="china-s"))

    dr, summary = run_ingest()
    assert dr.state == "success"
    assert summary["documents_indexed"] == 3 and summary["pages"] == 12

    alpha = points_by_doc("alpha.pdf")
    beta = points_by_doc("manuals/beta.pdf")
    zh = points_by_doc("zh.pdf")
    assert alpha and beta and zh
    # every page's code is found in a chunk that cites exactly that page
    for i in range(1, 8):
        assert _pages_of(alpha, f"ALPHA-{i:03d}") == {i}
    assert _pages_of(beta, "BETA-002") == {2}
    assert _pages_of(zh, "甲乙2号") == {2}
    p = alpha[0].payload
    assert {"bucket", "key", "version_id", "sha256", "pages", "chunk_index", "text"} <= set(p)
    assert p["bucket"] == kb_env["inbox"] and p["key"] == "alpha.pdf"

    ids_before = sorted(str(pt.id) for pt in alpha + beta + zh)

    # a second run changes nothing
    dr, summary = run_ingest()
    assert dr.state == "success"
    assert summary["documents_unchanged"] == 3 and summary["documents_indexed"] == 0
    after = points_by_doc("alpha.pdf") + points_by_doc("manuals/beta.pdf") + points_by_doc("zh.pdf")
    assert sorted(str(pt.id) for pt in after) == ids_before

    # a forced backfill re-indexes everything (page results reused) onto the same point ids
    dr, summary = run_ingest(force=True)
    assert dr.state == "success" and summary["documents_indexed"] == 3
    after = points_by_doc("alpha.pdf") + points_by_doc("manuals/beta.pdf") + points_by_doc("zh.pdf")
    assert sorted(str(pt.id) for pt in after) == ids_before

    # a new version of alpha replaces all of its points; the others stay as they were
    new_version = _upload(kb_env, "alpha.pdf", make_pdf(coded_pages("gamma", 2)))
    dr, summary = run_ingest()
    assert dr.state == "success" and summary["documents_indexed"] == 1
    alpha_now = points_by_doc("alpha.pdf")
    assert alpha_now
    assert all(pt.payload["version_id"] == new_version.version_id for pt in alpha_now)
    assert not any("ALPHA-" in pt.payload["text"] for pt in alpha_now)
    assert _pages_of(alpha_now, "GAMMA-002") == {2}
    assert not {str(pt.id) for pt in alpha_now} & {str(pt.id) for pt in alpha}
    assert sorted(str(pt.id) for pt in points_by_doc("manuals/beta.pdf")) == sorted(str(pt.id) for pt in beta)


def test_a_deleted_document_leaves_the_index(kb_env, airflow_db):
    _upload(kb_env, "temp.pdf", make_pdf(coded_pages("temp", 2)))
    dr, _ = run_ingest()
    assert dr.state == "success" and points_by_doc("temp.pdf")
    kb_env["store"].remove(kb_env["inbox"], "temp.pdf")
    dr, summary = run_ingest()
    assert dr.state == "success" and summary["documents_deleted"] == 1
    assert points_by_doc("temp.pdf") == []
