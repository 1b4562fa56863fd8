"""One contract, both stores: the embedded one (Qdrant Edge; written directly, and written
through its log as index tasks write it) and a Qdrant server through qdrant-client. No
Qdrant server binary can be installed here, so the server's side runs against qdrant-client's
in-process mode, which takes the same client calls a server does.

The points are realistic: sparse vectors from real sentences (the samples' text), dense
vectors with clusters, payloads as the pipeline writes them, and duplicates that tie.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from kb.errors import IndexMismatch
from kb.points import SearchFilter, key_prefixes, language, point_id
from kb.settings import PipelineSettings, StoreSettings
from kb.sparse import SparseEncoder
from kb.store.model import MODES

DIM = 32
SENTENCES = [
    "Replace the mechanical impeller seal every 2,000 operating hours.",
    "Check the bearing temperature weekly; above 80 degrees, stop the pump.",
    "The gearbox oil is ISO VG 220, changed every 7,500 hours.",
    "Scanned archives are digitized at 300 dpi in grayscale.",
    "Each page image is checked for skew and cropped to the paper edge.",
    "档案数字化的扫描分辨率不低于300dpi。",
    "纸质档案扫描前应拆除装订物，并检查页码是否连续。",
    "The warranty does not cover seals damaged by dry running.",
    "Torque the casing bolts to 45 Nm in a cross pattern.",
    "A service bulletin supersedes the manual where they differ.",
]


def _points(n_docs: int = 12, chunks: int = 6, seed: int = 0):
    """(ids, dense, sparse, payloads) of ``n_docs`` documents in three folders."""
    rng = np.random.default_rng(seed)
    encoder = SparseEncoder("bigram")
    centers = rng.standard_normal((4, DIM)).astype(np.float32)
    ids, dense, sparse, payloads = [], [], [], []
    for d in range(n_docs):
        folder = ("manuals", "scans", "rules")[d % 3]
        key = f"{folder}/doc-{d:02d}.pdf"
        doc_id, sha = f"doc{d:02d}", f"sha{d:02d}"
        for c in range(chunks):
            text = " ".join(SENTENCES[(d + c + k) % len(SENTENCES)] for k in range(2))
            vector = centers[(d + c) % 4] + 0.3 * rng.standard_normal(DIM).astype(np.float32)
            ids.append(point_id(doc_id, sha, c))
            dense.append(vector)
            sparse.append(encoder.encode_document(text))
            payloads.append({"doc_id": doc_id, "bucket": "inbox", "key": key, "version_id": "v1", "sha256": sha,
                             "pages": [c + 1, c + 2], "chunk_index": c, "text": text, "section": None,
                             "prefixes": key_prefixes(key), "language": language(text), "kind": "text",
                             "boxes": [{"page": c + 1, "bbox": [0, 0, 10, 10]}]})
    # two points with the same vectors as another: exact ties, told apart by id alone
    for extra in range(2):
        ids.append(str(uuid.UUID(int=extra + 1)))
        dense.append(dense[0].copy())
        sparse.append(sparse[0])
        payloads.append({**payloads[0], "doc_id": f"twin{extra}", "chunk_index": 0, "sha256": "twin"})
    return ids, np.asarray(dense, dtype=np.float32), sparse, payloads


@contextmanager
def _edge(tmp: Path) -> Iterator:
    from kb.store.edge import EdgeStore

    store = EdgeStore.open(tmp / "shard", StoreSettings())
    try:
        yield store, store
    finally:
        store.close()


@contextmanager
def _server(tmp: Path) -> Iterator:
    from qdrant_client import QdrantClient

    from kb.store.server import ServerStore

    store = ServerStore(QdrantClient(path=str(tmp / "server")), "kb_chunks")
    try:
        yield store, store
    finally:
        store.close()


class _LogThenRead:
    """The embedded store as the pipeline uses it: each write a row of the log, each read
    from a copy caught up with it (``kb.store.open_reader``)."""

    def __init__(self, p: PipelineSettings) -> None:
        self.p = p

    def __getattr__(self, name):
        from kb.store import open_reader

        def read(*args, **kwargs):
            with open_reader(self.p) as store:
                return getattr(store, name)(*args, **kwargs)
        return read


@contextmanager
def _log(tmp: Path) -> Iterator:
    from kb.store import open_writer

    p = PipelineSettings(state_dir=tmp)
    with open_writer(p) as writer:
        yield writer, _LogThenRead(p)


STORES = {"edge": _edge, "server": _server, "edge-through-log": _log}


@pytest.fixture(params=sorted(STORES))
def store(request, tmp_path):
    with STORES[request.param](tmp_path) as pair:
        yield pair


def _loaded(pair):
    writer, reader = pair
    ids, dense, sparse, payloads = _points()
    writer.ensure_collection(DIM)
    writer.upsert(ids, dense, sparse, payloads)
    return writer, reader, (ids, dense, sparse, payloads)


def test_upsert_count_and_payload_reads(store):
    writer, reader, (ids, dense, sparse, payloads) = _loaded(store)
    assert reader.dimension() == DIM
    assert reader.count() == len(ids) and reader.count("doc03") == 6
    assert reader.payload(ids[7]) == payloads[7]
    assert reader.payload(str(uuid.UUID(int=999))) is None
    points = reader.points("doc03", with_vectors=True)
    assert sorted(p.id for p in points) == sorted(ids[18:24])
    one = next(p for p in points if p.id == ids[18])
    assert one.payload == payloads[18]
    np.testing.assert_allclose(one.dense / np.linalg.norm(one.dense), dense[18] / np.linalg.norm(dense[18]), atol=1e-5)
    assert list(one.sparse.indices) == list(sparse[18].indices)
    # writing the same points again changes nothing (a rerun)
    writer.upsert(ids, dense, sparse, payloads)
    assert reader.count() == len(ids)


def test_another_dimension_is_refused(store):
    writer, _reader, _ = _loaded(store)
    with pytest.raises(IndexMismatch):
        writer.ensure_collection(DIM + 1)


def test_deletes_by_document_version_and_all_but(store):
    writer, reader, (ids, dense, sparse, payloads) = _loaded(store)
    writer.delete_version("doc01", "sha01")
    assert reader.count("doc01") == 0 and reader.count("doc02") == 6
    writer.delete_version("doc02", "another-sha")  # another version's: none of these
    assert reader.count("doc02") == 6
    writer.delete_all_but("doc02", ids[12:14])
    assert sorted(p.id for p in reader.points("doc02")) == sorted(ids[12:14])
    writer.delete_document("doc04")
    assert reader.count("doc04") == 0
    assert reader.count() == len(ids) - 6 - 4 - 6


def test_every_mode_answers_and_filters_hold(store):
    _writer, reader, (ids, dense, sparse, payloads) = _loaded(store)
    encoder = SparseEncoder("bigram")
    query = encoder.encode_query("impeller seal operating hours")
    for mode in MODES:
        hits = reader.search(dense[0], query, top_k=5, mode=mode)
        assert 1 <= len(hits) <= 5, mode
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True), mode
    top = reader.search(dense[0], None, top_k=1, mode="dense")[0]
    assert top.payload["doc_id"] in ("doc00", "twin0", "twin1")
    sparse_hits = reader.search(None, query, top_k=3, mode="sparse")
    assert all("impeller" in h.text for h in sparse_hits)
    scans = reader.search(dense[0], query, top_k=10, where=SearchFilter(key_prefix="scans/"))
    assert scans and all(h.key.startswith("scans/") for h in scans)
    one = reader.search(dense[0], query, top_k=10, where=SearchFilter(key_prefix="rules/doc-02.pdf"))
    assert one and {h.key for h in one} == {"rules/doc-02.pdf"}
    zh = reader.search(dense[0], encoder.encode_query("档案扫描"), top_k=10, where=SearchFilter(language="zh"))
    assert zh and all(h.payload["language"] == "zh" for h in zh)
    pages = reader.search(dense[0], query, top_k=20, where=SearchFilter(pages=(6, 7)))
    assert pages and all(any(6 <= p <= 7 for p in h.pages) for h in pages)
    assert reader.search(None, encoder.encode_query("zzzz qqqq"), top_k=3, mode="sparse") == []
    with pytest.raises(ValueError):
        reader.search(dense[0], query, mode="fuzzy")


def test_both_stores_answer_alike_ids_order_and_ties(tmp_path):
    """The same points, the same queries: the same ids in the same order (ties by id), and
    the same scores, on Edge and on the server's client."""
    encoder = SparseEncoder("bigram")
    queries = ["impeller seal", "gearbox oil hours", "scan resolution dpi", "档案扫描分辨率", "casing bolts torque"]
    answers = {}
    for name in ("edge", "server"):
        with STORES[name](tmp_path / name) as pair:
            _writer, reader, (ids, dense, _sparse, _payloads) = _loaded(pair)
            answers[name] = [
                [(h.id, round(h.score, 4)) for h in reader.search(dense[i], encoder.encode_query(q), top_k=8,
                                                                 mode=mode, dense_weight=w, where=where)]
                for i, q in enumerate(queries) for mode in MODES for w in (1.0, 0.5)
                for where in (None, SearchFilter(key_prefix="manuals/"))
            ]
    tied = [a for a in answers["edge"] if len({s for _, s in a}) < len(a)]
    assert tied, "the points were meant to make ties"
    for edge, server in zip(answers["edge"], answers["server"]):
        assert [i for i, _ in edge] == [i for i, _ in server]
        np.testing.assert_allclose([s for _, s in edge], [s for _, s in server], rtol=1e-3, atol=1e-4)
