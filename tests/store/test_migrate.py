"""Moving a store without re-work: the points move with their vectors and payloads, nothing
is OCR'd or embedded again.

- A store of qdrant-client's local mode, as the previous version wrote it (its writer was
  qdrant-client on ``<state dir>/qdrant``, collection ``kb_chunks``; ``ServerStore`` is that
  code, so it writes the old store here), moves into the embedded store: by ``kb store
  migrate``, and on the first opening of the store.
- The embedded store moves to a Qdrant server (here qdrant-client's in-process mode, which
  takes a server's calls).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pymupdf
import pytest

from kb.settings import PipelineSettings
from kb_dev.samples import ARCHIVE_RULES, PUMP_MANUAL, write_pdf
from tests.stack.kbcli import KB, REPO


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, embedder):
    """Real chunks of the two sample documents: text layer, the chunker, the embedder."""
    from kb.pipeline.index import chunk_pages
    from kb.points import chunk_payload, point_id
    from kb.sparse import SparseEncoder
    from ocr_engine.backends.textlayer import extract_range

    folder = tmp_path_factory.mktemp("migrate-docs")
    settings = PipelineSettings(state_dir=folder)
    encoder = SparseEncoder(settings.sparse_tokenizer)
    ids, vectors, sparse, payloads = [], [], [], []
    for name, (title, pages) in {"manual.pdf": PUMP_MANUAL, "rules.pdf": ARCHIVE_RULES}.items():
        write_pdf(folder / name, title, pages)
        doc = pymupdf.open(folder / name)
        chunks = chunk_pages(extract_range(doc, 1, doc.page_count), embedder, settings)
        doc.close()
        texts = [c.embedding_text() for c in chunks]
        vectors.append(embedder.embed_documents(texts))
        sparse.extend(encoder.encode_document(t) for t in texts)
        for c in chunks:
            ids.append(point_id(name, "sha-" + name, c.index))
            payloads.append({"doc_id": name, "key": f"docs/{name}", "sha256": "sha-" + name, "pages": c.pages,
                             "chunk_index": c.index, "text": c.text, "prefixes": ["docs/", f"docs/{name}"],
                             "language": "zh" if name == "rules.pdf" else "en"})
    assert chunk_payload  # the pipeline's own payload builder exists; these carry its filter fields
    return ids, np.concatenate(vectors), sparse, payloads


def _legacy(state: Path, points) -> None:
    """The store as the previous version left it: qdrant-client's local mode in <state>/qdrant."""
    from qdrant_client import QdrantClient

    from kb.store.server import ServerStore

    store = ServerStore(QdrantClient(path=str(state / "qdrant")), "kb_chunks")
    try:
        store.ensure_collection(points[1].shape[1])
        store.upsert(*points)
    finally:
        store.close()


@pytest.fixture
def no_rework(monkeypatch):
    """Counts every embedding and every OCR call made while it is active."""
    from kb import embedding
    from ocr_engine.backends import textlayer

    calls = {"embed": 0, "ocr": 0}

    def counting(cls, name, kind):
        original = getattr(cls, name)

        def counted(*args, **kwargs):
            calls[kind] += 1
            return original(*args, **kwargs)
        monkeypatch.setattr(cls, name, counted)

    from ocr_engine.backends.ppocr import PPOCRBackend
    from ocr_engine.backends.textlayer import TextLayerBackend

    counting(embedding.Embedder, "embed_documents", "embed")
    counting(embedding.OnnxEmbedder, "embed_documents", "embed")
    counting(textlayer, "extract_range", "ocr")
    counting(PPOCRBackend, "parse", "ocr")
    counting(TextLayerBackend, "parse", "ocr")
    return calls


def _same_points(got, ids, vectors, sparse, payloads) -> None:
    by_id = {p.id: p for p in got}
    assert sorted(by_id) == sorted(ids)
    for i, pid in enumerate(ids):
        p = by_id[pid]
        assert p.payload == payloads[i]
        unit = vectors[i] / np.linalg.norm(vectors[i])
        np.testing.assert_allclose(np.asarray(p.dense) / np.linalg.norm(p.dense), unit, atol=1e-5)
        assert list(p.sparse.indices) == list(sparse[i].indices)
        np.testing.assert_allclose(p.sparse.values, sparse[i].values, rtol=1e-6)


def test_a_local_mode_store_moves_in_on_first_opening_without_rework(indexed, tmp_path, no_rework):
    from kb.store import open_reader
    from kb.store.migrate import MIGRATED_SUFFIX

    _legacy(tmp_path, indexed)
    p = PipelineSettings(state_dir=tmp_path)
    with open_reader(p) as store:
        got = store.points(with_vectors=True)
        hits = store.search(indexed[1][0], indexed[2][0], top_k=3)
    _same_points(got, *indexed)
    assert hits[0].id == indexed[0][0]
    assert no_rework == {"embed": 0, "ocr": 0}
    assert not (tmp_path / "qdrant").exists() and (tmp_path / f"qdrant{MIGRATED_SUFFIX}").is_dir()
    with open_reader(p) as store:  # once: the second opening finds nothing to move
        assert store.count() == len(indexed[0])


def test_kb_store_migrate_moves_it_by_hand(indexed, tmp_path):
    _legacy(tmp_path, indexed)
    env = {"PATH": str(Path(KB).parent), "KB_STATE_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([KB, "store", "migrate"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"moved {len(indexed[0])} points" in done.stdout
    again = subprocess.run([KB, "store", "migrate"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "nothing to move" in again.stdout


def test_the_embedded_store_moves_to_a_server_without_rework(indexed, tmp_path, no_rework):
    from qdrant_client import QdrantClient

    from kb.store import open_reader, open_writer
    from kb.store.migrate import copy_into
    from kb.store.server import ServerStore

    p = PipelineSettings(state_dir=tmp_path / "embedded")
    with open_writer(p) as writer:
        writer.ensure_collection(indexed[1].shape[1])
        writer.upsert(*indexed)
    server = ServerStore(QdrantClient(path=str(tmp_path / "server")), "kb_chunks")
    try:
        assert copy_into(p, server) == len(indexed[0])
        _same_points(server.points(with_vectors=True), *indexed)
        with open_reader(p) as embedded:
            for i in (0, 5, len(indexed[0]) - 1):
                q = (indexed[1][i], indexed[2][i])
                assert [h.id for h in server.search(*q, top_k=5)] == [h.id for h in embedded.search(*q, top_k=5)]
    finally:
        server.close()
    assert no_rework["embed"] == 0 and no_rework["ocr"] == 0
