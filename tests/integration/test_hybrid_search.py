"""Hybrid retrieval through the real pipeline: dag.test() ingestion, the embedded store (Qdrant Edge)."""

from __future__ import annotations

import pytest

from kb.pipeline.extract import extract
from kb.pipeline.index import index_batch
from kb.pipeline.sense import sense
from tests.integration.stages import context, plan_run
from kb.settings import PipelineSettings
from tests.integration.dagrun import points_by_doc, run_ingest
from tests.pdfs import coded_pages, make_pdf

pytestmark = pytest.mark.integration

ZH_PAGES = [
    "档案数字化规范。纸质档案扫描时，分辨率不低于三百点每英寸，彩色档案使用二十四位色深，原始图像另行保存。",
    "设备维护手册。液压泵每运行五百小时更换一次滤芯，压力低于两巴时必须停机检查密封圈。",
    "机房管理制度。服务器机房温度保持在十八到二十七摄氏度之间，湿度控制在百分之四十到六十。",
]


def _retriever():
    from kb.retrieval import Retriever

    return Retriever(PipelineSettings())


def test_a_chinese_query_finds_its_chinese_chunk_and_a_rerun_keeps_sparse_vectors(kb_env, airflow_db):
    kb_env["store"].put_bytes(kb_env["inbox"], "zh/规范.pdf", make_pdf(ZH_PAGES, fontname="china-s"))
    kb_env["store"].put_bytes(kb_env["inbox"], "en/pump.pdf", make_pdf(coded_pages("pump", 3)))
    _, summary = run_ingest()
    assert summary["documents_indexed"] == 2, summary

    retriever = _retriever()
    for question, page in (("液压泵多久更换一次滤芯？", 2), ("机房温度应该保持在多少度？", 3), ("扫描分辨率最低是多少？", 1)):
        for mode in ("hybrid", "sparse"):
            [top] = retriever.search(question, top_k=1, mode=mode)
            assert (top["key"], top["pages"]) == ("zh/规范.pdf", [page]), (mode, question, top)
        assert any(term in top["snippet"] for term in ("滤芯", "温度", "分辨率"))
    # an exact code is the sparse vector's strength; fused with dense it stays in the top two
    [top] = retriever.search("maintenance code PUMP-002", top_k=1, mode="sparse")
    assert top["key"] == "en/pump.pdf" and top["pages"] == [2]
    assert [2] in [h["pages"] for h in retriever.search("maintenance code PUMP-002", top_k=2)]

    def sparse_vectors():
        points = {}
        for key in ("zh/规范.pdf", "en/pump.pdf"):
            for p in _points_with_vectors(key):
                points[p.id] = (list(p.sparse.indices), list(p.sparse.values))
        return points

    before = sparse_vectors()
    assert before and all(indices for indices, _ in before.values())
    _, summary = run_ingest(force=True)
    assert summary["documents_indexed"] == 2
    assert sparse_vectors() == before


def _points_with_vectors(key: str):
    from kb.ledger import doc_id_for
    from kb.store import open_reader

    settings = PipelineSettings()
    with open_reader(settings) as vs:
        return vs.points(doc_id_for(settings.inbox_bucket, key), with_vectors=True)


def test_a_new_embedder_or_sparse_scheme_is_a_change_the_ledger_sees(kb_env, embedder, monkeypatch, tmp_path):
    ctx = context()
    kb_env["store"].put_bytes(kb_env["inbox"], "manual.pdf", make_pdf(coded_pages("manual", 2)))
    plan = plan_run(ctx, "run-1")
    for rng in plan.ranges:
        extract(ctx, rng)
    index_batch(ctx, plan.documents, run_id="run-1")
    assert sense(ctx).todo == []

    monkeypatch.setenv("KB_SPARSE_TOKENIZER", "jieba")
    assert [o.key for o in sense(context()).todo] == ["manual.pdf"]
    monkeypatch.delenv("KB_SPARSE_TOKENIZER")

    monkeypatch.setenv("KB_EMBED_BACKEND", "torch")  # the same weights on another runtime
    assert [o.key for o in sense(context()).todo] == ["manual.pdf"]
    monkeypatch.delenv("KB_EMBED_BACKEND")

    from tests.embedders import tiny_embedder_dir

    monkeypatch.setenv("KB_EMBED_MODEL_DIR", str(tiny_embedder_dir(tmp_path)))
    assert [o.key for o in sense(context()).todo] == ["manual.pdf"]
    assert points_by_doc("manual.pdf"), "nothing is deleted until the re-index is in"
