"""Answering a query: dense and sparse query vectors, Qdrant's fusion, and a snippet per hit.

The snippet is the stretch of the chunk (about ``width`` characters) that holds the most
distinct query terms, with the same tokenizer the sparse vectors use, so it shows why a
hit matched in Chinese as in English.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kb.settings import PipelineSettings
from kb.sparse import SparseEncoder, tokenize


def snippet(text: str, query: str, tokenizer: str = "bigram", width: int = 160) -> str:
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    terms = set(tokenize(query, tokenizer))
    best, best_score = 0, -1
    step = max(1, width // 8)
    for start in range(0, len(flat) - width + step, step):
        score = len(terms & set(tokenize(flat[start:start + width], tokenizer)))
        if score > best_score:
            best, best_score = start, score
    start = best
    # widen to word boundaries where the text has them
    if start > 0 and flat[start - 1] != " ":
        space = flat.rfind(" ", max(0, start - 20), start)
        start = space + 1 if space >= 0 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.find(" ", end, end + 20)
        end = space if space >= 0 else end
    piece = flat[start:end].strip()
    return ("…" if start > 0 else "") + piece + ("…" if end < len(flat) else "")


@dataclass
class Retriever:
    """Holds the embedder and the sparse encoder; opens the store per query batch."""

    settings: PipelineSettings

    @cached_property
    def embedder(self):
        from kb.embedding import Embedder

        return Embedder(self.settings.embed_model_dir)

    @cached_property
    def encoder(self) -> SparseEncoder:
        return SparseEncoder(self.settings.sparse_tokenizer)

    def search_many(self, queries: list[str], top_k: int = 5, modes: tuple[str, ...] | None = None
                    ) -> dict[str, list[list[dict[str, Any]]]]:
        """For each mode, the hits of each query (one store opening for all of them)."""
        from kb.vectorstore import VectorStore

        modes = modes or (self.settings.search_mode,)
        dense = self.embedder.embed(queries) if any(m != "sparse" for m in modes) else [None] * len(queries)
        sparse = [self.encoder.encode_query(q) for q in queries]
        out: dict[str, list[list[dict[str, Any]]]] = {m: [] for m in modes}
        with VectorStore.open(self.settings) as vs:
            for i, query in enumerate(queries):
                weight = self.dense_weight(query)
                for mode in modes:
                    hits = vs.search(dense[i], sparse[i], top_k=top_k, mode=mode, dense_weight=weight)
                    out[mode].append([self._hit(h, query) for h in hits])
        return out

    def dense_weight(self, query: str) -> float:
        """1 for a query in a language the dense model knows, else the off-language weight."""
        known = language(query) in self.settings.dense_languages
        return 1.0 if known else self.settings.offlanguage_dense_weight

    def search(self, query: str, top_k: int = 5, mode: str | None = None) -> list[dict[str, Any]]:
        mode = mode or self.settings.search_mode
        return self.search_many([query], top_k, (mode,))[mode][0]

    def _hit(self, h, query: str) -> dict[str, Any]:
        return {"score": round(h.score, 4), "key": h.key, "pages": h.pages, "text": h.text,
                "snippet": snippet(h.text, query, self.encoder.tokenizer), "section": h.payload.get("section"),
                "version_id": h.payload.get("version_id")}


_CJK = re.compile(r"[\u3400-\u9fff]")


def language(text: str) -> str:
    """``zh`` when CJK characters make up a fifth of the letters, else ``en``."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return "en"
    return "zh" if sum(1 for c in letters if _CJK.match(c)) / len(letters) >= 0.2 else "en"
