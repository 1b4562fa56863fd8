"""The search service's in-memory store ranks exactly as Qdrant's local mode does, on the
same points: dense, sparse (IDF) and hybrid (RRF, weighted too), with filters."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from kb.objectstore import ObjectStore
from kb.points import SearchFilter
from kb.retrieval import Retriever
from kb_dev.samples import ARCHIVE_RULES, PUMP_MANUAL, write_pdf, write_prose_documents
from kb.search.memory import MemoryStore
from kb.settings import PipelineSettings
from kb.vectorstore import VectorStore
from tests.integration.stages import context
from tests.search.test_search_service import ingest

pytestmark = pytest.mark.integration
QUERIES = ["How often must the impeller seal be replaced?", "pressure sensor calibration firmware", "valve bearing",
           "档案扫描分辨率不低于多少？", "inventory warehouse shipment invoice", "数字化成果备份", "E42 suction"]


def test_the_memory_store_ranks_as_qdrant_local_mode_does(kb_env, tmp_path):
    store: ObjectStore = kb_env["store"]
    for name, (title, pages) in {"manual.pdf": PUMP_MANUAL, "rules/zh.pdf": ARCHIVE_RULES}.items():
        write_pdf(tmp_path / name.replace("/", "-"), title, pages)
        store.put_bytes(kb_env["inbox"], name, (tmp_path / name.replace("/", "-")).read_bytes())
    for path in write_prose_documents(tmp_path / "bench", documents=3, pages_per_document=8):
        store.put_bytes(kb_env["inbox"], f"bench/{path.name}", path.read_bytes())
    assert {r.status for r in ingest(context(), "run-1")} == {"indexed"}

    settings = PipelineSettings()
    with VectorStore.open(settings) as qdrant:
        memory = MemoryStore.load(qdrant)
        assert len(memory) == qdrant.count() > 50
        on_disk, in_memory = Retriever(settings, stores=lambda: nullcontext(qdrant)), Retriever(settings, stores=lambda: nullcontext(memory))
        filters = [None, SearchFilter(key_prefix="bench/"), SearchFilter(language="zh"), SearchFilter(pages=(2, 3)),
                   SearchFilter(key_prefix="manual.pdf", pages=(4, 6))]
        compared = 0
        for where in filters:
            for mode in ("dense", "sparse", "hybrid"):
                a = on_disk.search_many(QUERIES, 8, (mode,), where)[mode]
                b = in_memory.search_many(QUERIES, 8, (mode,), where)[mode]
                for q, x, y in zip(QUERIES, a, b):
                    assert [(h["key"], h["pages"], h["text"]) for h in x] == [(h["key"], h["pages"], h["text"]) for h in y], \
                        (mode, where, q)
                    assert [h["score"] for h in x] == pytest.approx([h["score"] for h in y], rel=1e-3, abs=1e-4)
                    compared += len(x)
        assert compared > 300
        # Chinese queries weight the dense list down (weighted RRF): the same there too
        assert in_memory.dense_weight("数字化成果备份") < 1

