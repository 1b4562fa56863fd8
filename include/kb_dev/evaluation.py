"""``kb eval``: recall@k and MRR of a question set, by language, per search mode.

A question is one JSON line ``{"doc", "page", "question", "answer_substring"}``: ``doc`` is
the document's key in the inbox bucket, ``page`` the 1-based page whose text holds
``answer_substring`` verbatim. An answer that runs over a page break names both pages,
``"pages": [p, p + 1]`` (``page`` is p). A question is found at rank r when the r-th hit
comes from ``doc`` and covers every one of its pages. Groups: ``cross-page`` (the answer
runs over a page break: a hit must cover both pages and its text hold the whole answer),
else ``en`` (English question, English document), ``zh`` (Chinese and Chinese), ``cross``
(the question's language differs from the document's, which is the language of its answer).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from kb.errors import EvalSetError
from kb.points import SearchFilter, language


class Searcher(Protocol):
    """A ``kb.retrieval.Retriever`` in process, or the search service's ``SearchClient``."""

    def search_many(self, queries: list[str], top_k: int = 5, modes: tuple[str, ...] | None = None,
                    where: SearchFilter | None = None) -> dict[str, list[list[dict[str, Any]]]]: ...

GROUPS = ("en", "zh", "cross", "cross-page")
FIELDS = {"doc": str, "page": int, "question": str, "answer_substring": str}


@dataclass(frozen=True)
class Question:
    doc: str
    page: int
    question: str
    answer_substring: str
    pages: tuple[int, ...] = ()  # an answer over a page break: both pages

    @property
    def group(self) -> str:
        if len(self.pages) > 1:
            return "cross-page"
        q, d = language(self.question), language(self.answer_substring)
        return q if q == d else "cross"

    @property
    def wanted_pages(self) -> set[int]:
        return set(self.pages) or {self.page}


def load_questions(path: Path) -> list[Question]:
    if not path.is_file():
        raise EvalSetError(f"{path}: no such file")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalSetError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise EvalSetError(f"{path}:{n}: expected an object")
        for name, kind in FIELDS.items():
            if not isinstance(data.get(name), kind) or isinstance(data.get(name), bool):
                raise EvalSetError(f"{path}:{n}: field {name!r} must be a {kind.__name__}")
        if data["page"] < 1 or not data["question"].strip() or not data["answer_substring"].strip():
            raise EvalSetError(f"{path}:{n}: page must be >= 1 and question and answer_substring non-empty")
        pages = data.get("pages", [data["page"]])
        if (not isinstance(pages, list) or not pages or not all(type(p) is int for p in pages)
                or pages[0] != data["page"] or pages != list(range(pages[0], pages[0] + len(pages)))):
            raise EvalSetError(f"{path}:{n}: pages must be consecutive page numbers starting at page")
        out.append(Question(**{k: data[k] for k in FIELDS}, pages=tuple(pages) if len(pages) > 1 else ()))
    if not out:
        raise EvalSetError(f"{path}: no questions")
    return out


def _normalised(text: str) -> str:
    # as include/eval/verify.py checks answers against the PDF, and hyphens dropped too: the
    # reader may join a word hyphenated over the page break with or without its hyphen
    return re.sub(r"[\s\-\u00ad\u2010\u2011]+", "", unicodedata.normalize("NFKC", text))


def holds_answer(q: Question, hit: dict[str, Any]) -> bool:
    """Whether the hit's text holds the whole answer (whitespace, width forms and hyphens aside)."""
    return _normalised(q.answer_substring) in _normalised(hit.get("text") or "")


def rank_of(q: Question, hits: list[dict[str, Any]], folder: str = "") -> int | None:
    """The rank of the first hit from ``q.doc`` that covers its pages; for an answer over a page
    break, a hit that also holds the whole answer (a chunk of both pages holding only one half
    does not count)."""
    for rank, h in enumerate(hits, 1):
        if h["key"] == folder + q.doc and q.wanted_pages <= set(h["pages"]):
            if q.group != "cross-page" or holds_answer(q, h):
                return rank
    return None


def evaluate(retriever: Searcher, questions: list[Question], top_k: int = 5,
             modes: tuple[str, ...] = ("hybrid",), folder: str = "") -> dict[str, Any]:
    """``folder`` (a key prefix ending in ``/``): search only the documents under it, and
    read each question's ``doc`` as a key relative to it."""
    where = SearchFilter(key_prefix=folder) if folder else None
    results = retriever.search_many([q.question for q in questions], top_k, modes, where)
    report: dict[str, Any] = {"top_k": top_k, "questions": len(questions), "modes": {}}
    for mode in modes:
        ranks = [rank_of(q, hits, folder) for q, hits in zip(questions, results[mode])]
        groups = {}
        for group in GROUPS + ("all",):
            idx = [i for i, q in enumerate(questions) if group == "all" or q.group == group]
            if not idx:
                continue
            found = [ranks[i] for i in idx if ranks[i] is not None]
            groups[group] = {
                "n": len(idx),
                f"recall@{top_k}": round(len(found) / len(idx), 4),
                "mrr": round(sum(1 / r for r in found) / len(idx), 4),
            }
        misses = [
            {**asdict(q), "group": q.group, "top": [{"key": h["key"], "pages": h["pages"]} for h in hits[:3]]}
            for q, hits, r in zip(questions, results[mode], ranks) if r is None
        ]
        report["modes"][mode] = {"groups": groups, "misses": misses}
    return report


def format_report(report: dict[str, Any]) -> str:
    k = report["top_k"]
    modes = list(report["modes"])
    groups = [g for g in GROUPS + ("all",) if any(g in report["modes"][m]["groups"] for m in modes)]
    header = f"{'group':10} {'n':>4} " + " ".join(f"{m + ' R@' + str(k):>12} {m + ' MRR':>11}" for m in modes)
    lines = [header, "-" * len(header)]
    for g in groups:
        n = next(report["modes"][m]["groups"][g]["n"] for m in modes if g in report["modes"][m]["groups"])
        cells = []
        for m in modes:
            row = report["modes"][m]["groups"].get(g)
            cells.append(f"{row[f'recall@{k}']:>12.3f} {row['mrr']:>11.3f}" if row else f"{'-':>12} {'-':>11}")
        lines.append(f"{g:10} {n:>4} " + " ".join(cells))
    last = modes[-1]
    misses = report["modes"][last]["misses"]
    lines.append("")
    lines.append(f"misses ({last}, top {k}): {len(misses)}")
    for m in misses:
        top = ", ".join(f"{h['key']} p.{','.join(map(str, h['pages']))}" for h in m["top"]) or "(no hits)"
        want = "-".join(map(str, m["pages"] or [m["page"]]))
        lines.append(f"  [{m['group']}] {m['question']}  (want {m['doc']} p.{want}; got {top})")
    return "\n".join(lines)
