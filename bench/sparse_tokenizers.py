"""Which CJK tokenization makes the better sparse vectors: character bigrams or jieba words?

    KB_STATE_DIR=... .venv/bin/python bench/sparse_tokenizers.py include/eval/qa.jsonl [--top-k 5]

Reads the embedded store (chunk texts and dense vectors as the pipeline made them; stop the
search service first, it holds the store), writes one copy per tokenizer with the sparse
vectors recomputed (``$KB_STATE_DIR/sparse-bigram``, ``.../sparse-jieba``), and evaluates
sparse and hybrid search on each, in one run. The copies are left for inspection; rerunning
overwrites them.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np

from kb_dev.evaluation import evaluate, format_report, load_questions
from kb.retrieval import Retriever
from kb.settings import PipelineSettings
from kb.sparse import SparseEncoder
from kb.store import open_reader


def copy_with(settings: PipelineSettings, tokenizer: str) -> tuple[PipelineSettings, float, int]:
    """A copy of the store under ``<state dir>/sparse-<tokenizer>`` with the sparse vectors
    made again by ``tokenizer`` (the dense ones and the payloads as they are)."""
    target = settings.model_copy(update={"state_dir": settings.state_dir / f"sparse-{tokenizer}",
                                         "sparse_tokenizer": tokenizer})
    encoder = SparseEncoder(tokenizer)
    with open_reader(settings) as vs:
        records = vs.points(with_vectors=True)
    started = time.perf_counter()
    texts = [f"{r.payload['section']}\n{r.payload['text']}" if r.payload.get("section") else r.payload["text"]
             for r in records]
    sparse = [encoder.encode_document(t) for t in texts]
    seconds = time.perf_counter() - started
    dense = np.asarray([r.dense for r in records], dtype=np.float32)
    shutil.rmtree(target.store_dir, ignore_errors=True)
    with open_reader(target) as copy:  # the embedded store in this process writes as well as it reads
        copy.ensure_collection(dense.shape[1])
        copy.upsert([r.id for r in records], dense, sparse, [r.payload for r in records])
    return target, seconds, len(records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions", type=Path)
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()
    base = PipelineSettings()
    questions = load_questions(args.questions)
    for tokenizer in ("bigram", "jieba"):
        settings, seconds, n = copy_with(base, tokenizer)
        report = evaluate(Retriever(settings), questions, args.top_k, ("sparse", "hybrid"))
        print(f"\n== {tokenizer}: {n} chunks encoded in {seconds:.2f} s ({n / seconds:.0f} chunks/s)")
        print(format_report(report).split("\n\nmisses")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
