"""The ONNX Runtime embedder against sentence-transformers on torch, same model folder."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kb.embedding import OnnxEmbedder
from kb_dev.samples import ARCHIVE_RULES, PUMP_MANUAL

TEXTS = [p for _, pages in (PUMP_MANUAL, ARCHIVE_RULES) for _, paras in pages for p in paras] + [
    "How often must the impeller seal be replaced?", "档案扫描分辨率不低于多少？", "E42", "x " * 400,
]


@pytest.fixture(scope="module")
def onnx(tmp_path_factory):
    return OnnxEmbedder(cache_dir=tmp_path_factory.mktemp("models"), batch_size=4)


def test_onnx_vectors_match_torch_within_cosine_0_999(onnx, embedder):
    a, b = onnx.embed_documents(TEXTS), embedder.embed_documents(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cosine = (a * b).sum(axis=1)
    assert cosine.min() >= 0.999, cosine.min()
    assert onnx.embed_documents([]).shape == (0, 384)


def test_both_runtimes_count_tokens_alike_and_have_distinct_ids(onnx, embedder):
    assert onnx.max_tokens == embedder.max_tokens == 256 and onnx.dimension == embedder.dimension
    assert [onnx.count_tokens(t) for t in TEXTS] == [embedder.count_tokens(t) for t in TEXTS]
    assert onnx.model_id == embedder.model_id + "+onnx", "a new runtime must re-embed the index once"


def test_the_export_is_cached_and_a_query_process_never_imports_torch(onnx):
    onnx.embed_documents(["load"])
    stamp = onnx.onnx_path.stat().st_mtime_ns
    probe = (
        "import sys; from pathlib import Path; from kb.embedding import OnnxEmbedder; "
        f"e = OnnxEmbedder(cache_dir=Path({str(onnx.cache_dir)!r})); v = e.embed_queries(['pump seal']); "
        "print(v.shape, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == "False" and onnx.onnx_path.stat().st_mtime_ns == stamp


def test_the_session_does_not_spin_between_batches(onnx):
    """An index task shares its CPU with the OCR service (bench/ort_spinning.py)."""
    options = onnx.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
