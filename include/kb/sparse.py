"""Sparse lexical vectors: BM25-style term weights computed here, IDF applied by Qdrant.

A document's vector holds, per term, BM25's saturated term frequency
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``; the collection's sparse vector
is declared with ``Modifier.IDF``, so Qdrant multiplies in the inverse document frequency
from its own statistics at query time. Together that is BM25, without a corpus pass here.

Tokens: Latin words and numbers, lower-cased (NFKC), with a few English function words
dropped; CJK text either as overlapping character bigrams (``bigram``, the default, no
dictionary) or as words from the jieba segmenter's search mode (``jieba``). Term ids are a
stable 32-bit hash of the token, so the same text always gets the same vector, in any
process and on any machine.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

# kana, CJK ideographs (extension A and the unified block), compatibility ideographs
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUNS = re.compile(rf"[{CJK}]+|[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was were will with "
    "what which how who when where why does do can you your".split()
)
TOKENIZERS = ("bigram", "jieba")


@lru_cache(maxsize=1)
def _jieba():
    import jieba

    jieba.setLogLevel(60)
    jieba.initialize()
    return jieba


def _cjk_bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def tokenize(text: str, tokenizer: str = "bigram") -> list[str]:
    """Terms of ``text`` in order (repeats kept: they are the term frequencies)."""
    text = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    for run in _RUNS.findall(text):
        if "a" <= run[0] <= "z" or run[0].isdigit():
            if run not in _STOP:
                out.append(run)
        elif tokenizer == "jieba":
            out.extend(w for w in _jieba().cut_for_search(run) if w.strip())
        else:
            out.extend(_cjk_bigrams(run))
    return out


def term_id(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "big")


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]

    def __len__(self) -> int:
        return len(self.indices)


@dataclass(frozen=True)
class SparseEncoder:
    tokenizer: str = "bigram"
    k1: float = 1.2
    b: float = 0.75
    avg_len: float = 150.0  # terms in a typical chunk; length normalisation is relative to it

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"unknown sparse tokenizer {self.tokenizer!r}; choose one of {TOKENIZERS}")

    @property
    def signature(self) -> str:
        """Names the scheme: a change of it is a change of the index the ledger must see."""
        return f"bm25-{self.tokenizer}-k1={self.k1}-b={self.b}-L={self.avg_len}-v1"

    def _vector(self, weights: dict[int, float]) -> SparseVector:
        indices = sorted(weights)
        return SparseVector(indices, [round(weights[i], 6) for i in indices])

    def encode_document(self, text: str) -> SparseVector:
        tokens = tokenize(text, self.tokenizer)
        norm = self.k1 * (1 - self.b + self.b * len(tokens) / self.avg_len)
        weights: dict[int, float] = {}
        for token, tf in Counter(tokens).items():
            # two tokens sharing a hash add up, as they would in any hashed index
            tid = term_id(token)
            weights[tid] = weights.get(tid, 0.0) + tf * (self.k1 + 1) / (tf + norm)
        return self._vector(weights)

    def encode_query(self, text: str) -> SparseVector:
        """Each distinct query term once: BM25 scores a term's presence in the query, not its count."""
        return self._vector({term_id(t): 1.0 for t in set(tokenize(text, self.tokenizer))})
