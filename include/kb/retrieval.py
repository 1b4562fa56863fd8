"""Answering a query: dense and sparse query vectors, Qdrant's fusion, and a snippet per hit.

The snippet is the stretch of the chunk (about ``width`` characters) that holds the most
distinct query terms, with the same tokenizer the sparse vectors use, so it shows why a
hit matched in Chinese as in English.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, ContextManager, Protocol

from kb.points import SearchFilter, language
from kb.settings import PipelineSettings
from kb.sparse import CJK, SparseEncoder, tokenize

_CJK_RUN = re.compile(rf"[{CJK}]+")


_WORDS = re.compile(r"[a-z0-9]+", re.IGNORECASE | re.ASCII)  # the sparse tokenizer's words


@lru_cache(maxsize=256)
def _query_terms(query: str, tokenizer: str) -> tuple[frozenset[str], frozenset[str], tuple[int, ...]]:
    """The query's words, its CJK terms, and the CJK terms' lengths: worked out once a query,
    not once a hit."""
    terms = frozenset(tokenize(query, tokenizer))
    words = frozenset(t for t in terms if t.isascii())
    others = terms - words
    return words, others, tuple(sorted({len(t) for t in others}))


def _occurrences(text: str, query: str, tokenizer: str) -> dict[str, list[int]]:
    """Where each of the query's terms (as the sparse vectors see them: words,
    case-insensitive, and CJK bigrams or words) that ``text`` holds starts, ascending.

    One pass over ``text`` whatever the query's length: words are looked up in the query's
    set, and CJK terms by the few term lengths there are. (A regex per term was compiled for
    each hit: a 2,000-character Chinese query over 50 hits took 4.2 s.)"""
    words, others, lengths = _query_terms(query, tokenizer)
    out: dict[str, list[int]] = {}
    if words:
        for m in _WORDS.finditer(text):
            word = m.group().lower()
            if word in words:
                out.setdefault(word, []).append(m.start())
    if others:
        for run in _CJK_RUN.finditer(text):
            end = run.end()
            for i in range(run.start(), end):
                for n in lengths:
                    if i + n > end:
                        break
                    piece = text[i:i + n]
                    if piece in others:
                        out.setdefault(piece, []).append(i)
    return out


def snippet(text: str, query: str, tokenizer: str = "bigram", width: int = 160) -> str:
    """About ``width`` characters of ``text``: the stretch with the most distinct query terms."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    found = _occurrences(flat, query, tokenizer)
    step = max(1, width // 8)
    windows = len(range(0, len(flat) - width + step, step))  # window k starts at k * step
    # A window's score is the number of distinct terms with an occurrence wholly inside it.
    # Each occurrence covers a run of windows; a term's runs are merged and counted once, on
    # a difference array: linear in occurrences and windows, not their product.
    diff = [0] * (windows + 1)
    for term, starts in found.items():
        last_end = -1
        for begin in starts:
            first_k = max(0, -(-(begin + len(term) - width) // step))
            last_k = min(windows - 1, begin // step)
            if first_k > last_k:
                continue
            first_k = max(first_k, last_end + 1)
            if first_k <= last_k:
                diff[first_k] += 1
                diff[last_k + 1] -= 1
                last_end = last_k
    best, best_score, score = 0, -1, 0
    for k in range(windows):
        score += diff[k]
        if score > best_score:
            best, best_score = k * step, score
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


def mark_terms(text: str, query: str, tokenizer: str = "bigram") -> str:
    """``text`` as HTML-escaped text with the query's terms inside ``<mark>``."""
    import html

    spans = sorted((start, start + len(term)) for term, starts in _occurrences(text, query, tokenizer).items()
                   for start in starts)
    out, at = [], 0
    for start, end in _merged(spans):
        out.append(html.escape(text[at:start]) + "<mark>" + html.escape(text[start:end]) + "</mark>")
        at = end
    return "".join(out) + html.escape(text[at:])


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class Stores(Protocol):
    def __call__(self) -> ContextManager[Any]: ...


@dataclass
class Retriever:
    """Holds the embedder and the sparse encoder; ``stores`` gives a store reader per query
    batch (by default the store opened and closed each time; the search service passes
    its own long-lived one)."""

    settings: PipelineSettings
    stores: Stores | None = None
    embed_threads: int | None = None

    @cached_property
    def embedder(self):
        from kb.embedding import make_embedder

        return make_embedder(self.settings, threads=self.embed_threads)

    @cached_property
    def encoder(self) -> SparseEncoder:
        return SparseEncoder(self.settings.sparse_tokenizer)

    def _store(self) -> ContextManager[Any]:
        if self.stores is not None:
            return self.stores()
        from kb.store import open_reader

        return open_reader(self.settings)

    def search_many(self, queries: list[str], top_k: int = 5, modes: tuple[str, ...] | None = None,
                    where: SearchFilter | None = None) -> dict[str, list[list[dict[str, Any]]]]:
        """For each mode, the hits of each query (one store opening for all of them)."""
        modes = modes or (self.settings.search_mode,)
        dense = self.embedder.embed_queries(queries) if any(m != "sparse" for m in modes) else [None] * len(queries)
        sparse = [self.encoder.encode_query(q) for q in queries]
        out: dict[str, list[list[dict[str, Any]]]] = {m: [] for m in modes}
        with self._store() as vs:
            for i, query in enumerate(queries):
                weight = self.dense_weight(query)
                for mode in modes:
                    hits = vs.search(dense[i], sparse[i], top_k=top_k, mode=mode, dense_weight=weight, where=where)
                    out[mode].append([self._hit(h, query) for h in hits])
        return out

    def dense_weight(self, query: str) -> float:
        """1 for a query in a language the dense model knows, else the off-language weight."""
        known = language(query) in self.settings.dense_languages
        return 1.0 if known else self.settings.offlanguage_dense_weight

    def search(self, query: str, top_k: int = 5, mode: str | None = None,
               where: SearchFilter | None = None) -> list[dict[str, Any]]:
        mode = mode or self.settings.search_mode
        return self.search_many([query], top_k, (mode,), where)[mode][0]

    def _hit(self, h, query: str) -> dict[str, Any]:
        # boxes: [{"page", "bbox"}] in PDF points of the displayed page (none in chunks
        # indexed before chunks were located); kind: "text" or "table"
        return {"id": h.id, "score": round(h.score, 4), "key": h.key, "pages": h.pages, "text": h.text,
                "snippet": snippet(h.text, query, self.encoder.tokenizer), "section": h.payload.get("section"),
                "version_id": h.payload.get("version_id"), "doc_id": h.payload.get("doc_id"),
                "kind": h.payload.get("kind", "text"), "boxes": h.payload.get("boxes", [])}

