"""``kb eval``: recall@k and MRR of a question set, by language, per search mode.

A question is one JSON line ``{"doc", "page", "question", "answer_substring"}``: ``doc`` is
the document's key in the inbox bucket, ``page`` the 1-based page whose text holds
``answer_substring`` verbatim. An answer that runs over a page break names both pages,
``"pages": [p, p + 1]`` (``page`` is p). A question is found at rank r when the r-th hit
comes from ``doc``, covers every one of its pages and its text holds the answer (issue 53:
in every group; a hit of the right page that has lost the answer does not count). Groups:
``cross-page`` (the answer runs over a page break: a hit must cover both pages and hold the
whole answer, so a chunk of both pages holding one half does not count), else ``en`` (English
question, English document), ``zh`` (Chinese and Chinese), ``cross`` (the question's language
differs from the document's, which is the language of its answer).

Two optional fields split the set and name the groups written for it (issues 36 and 53):
``"split"``: ``"tuning"`` (the default) or ``"frozen"``, a set measured out of sample, never
used to choose anything; ``"kind"``: ``"table-cell"``, ``"paraphrase"`` or ``"two-column"``,
which is then the question's group. A ``table-cell`` question's answer is one cell of a
table, and its ``"row"`` a verbatim substring of that table's row (its label, say): a hit
must hold both the row and the answer. A ``paraphrase`` question says what its answer passage
says in other words; ``include/eval/verify.py`` holds it to at most
``MAX_PARAPHRASE_OVERLAP`` of the passage's content words (``overlap``). A ``two-column``
question's answer is a passage of running text inside one column of a page set in two
columns. A question about an image-only copy names the copy's file (``X.scan.pdf``,
``kb_dev.corpus.original_of``, the one rule); the report counts it apart, as the
``scanned`` row under its group.

How a hit "holds" a text (the answer, and a table cell's row), decided in issue 53 before
any question it applies to was measured, the same for every group:

* normalised first, both sides: NFKC (width forms, ligatures), then whitespace and hyphens
  (``-``, soft hyphen, U+2010, U+2011) removed, since the reader may join a line or a word
  broken over a line or page with or without its hyphen and OCR spaces words its own way;
* a hit on a born-digital document (its text read from the text layer) holds it when the
  normalised text is a substring of the hit's;
* a hit on an image-only copy (``q.scanned``: its text is OCR, which misreads a letter here
  and there) holds it when it is a substring, or when ``rapidfuzz.fuzz.partial_ratio`` of
  the normalised text against the hit's normalised text is at least ``SCANNED_MATCH`` (90):
  the best-aligned stretch of the hit differs from it by at most about one character in
  twenty (partial_ratio is an Indel similarity: one wrong character costs two edits of the
  two lengths together). So a misread letter in a sentence still counts, and a wrong digit
  in a short number does not (one of six characters: 83). A hit shorter than the text is
  compared whole (``fuzz.ratio``), so a fragment never holds a longer answer.
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
from kb_dev.corpus import original_of


class Searcher(Protocol):
    """A ``kb.retrieval.Retriever`` in process, or the search service's ``SearchClient``."""

    def search_many(self, queries: list[str], top_k: int = 5, modes: tuple[str, ...] | None = None,
                    where: SearchFilter | None = None) -> dict[str, list[list[dict[str, Any]]]]: ...

SPLITS = ("tuning", "frozen")
KINDS = ("table-cell", "paraphrase", "two-column")
GROUPS = ("en", "zh", "cross", "cross-page") + KINDS
FIELDS = {"doc": str, "page": int, "question": str, "answer_substring": str}
OPTIONAL = {"pages": list, "split": str, "kind": str, "row": str}
SCANNED_MATCH = 90  # rapidfuzz partial_ratio, normalised, for a hit on an image-only copy (docstring)
MAX_PARAPHRASE_OVERLAP = 0.25  # share of the answer's content words that the question may repeat
# words of 4+ letters that carry no content; left out of both sides of ``overlap``
FUNCTION_WORDS = frozenset(
    "also been does each from have into more most much only other same some such than that their them "
    "then there these they this those very were what when where which while will with would your".split())


@dataclass(frozen=True)
class Question:
    doc: str
    page: int
    question: str
    answer_substring: str
    pages: tuple[int, ...] = ()  # an answer over a page break: both pages
    split: str = "tuning"
    kind: str = ""  # "table-cell", "paraphrase", "two-column" or none
    row: str = ""  # table-cell: a verbatim substring of the answer's table row

    @property
    def group(self) -> str:
        if self.kind:
            return self.kind
        if len(self.pages) > 1:
            return "cross-page"
        q, d = language(self.question), language(self.answer_substring)
        return q if q == d else "cross"

    @property
    def wanted_pages(self) -> set[int]:
        return set(self.pages) or {self.page}

    @property
    def scanned(self) -> bool:
        """About an image-only copy (its file named as ``kb_dev.corpus.original_of`` says)."""
        return original_of(self.doc) is not None


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
        for name, kind in OPTIONAL.items():
            if name in data and not isinstance(data[name], kind):
                raise EvalSetError(f"{path}:{n}: field {name!r} must be a {kind.__name__}")
        unknown = sorted(set(data) - set(FIELDS) - set(OPTIONAL))
        if unknown:
            raise EvalSetError(f"{path}:{n}: unknown field(s) {', '.join(map(repr, unknown))}")
        if data["page"] < 1 or not data["question"].strip() or not data["answer_substring"].strip():
            raise EvalSetError(f"{path}:{n}: page must be >= 1 and question and answer_substring non-empty")
        pages = data.get("pages", [data["page"]])
        if (not pages or not all(type(p) is int for p in pages)
                or pages[0] != data["page"] or pages != list(range(pages[0], pages[0] + len(pages)))):
            raise EvalSetError(f"{path}:{n}: pages must be consecutive page numbers starting at page")
        split, kind, row = data.get("split", "tuning"), data.get("kind", ""), data.get("row", "")
        if split not in SPLITS:
            raise EvalSetError(f"{path}:{n}: split must be one of {', '.join(SPLITS)}, not {split!r}")
        if "kind" in data and kind not in KINDS:
            raise EvalSetError(f"{path}:{n}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if kind and len(pages) > 1:
            raise EvalSetError(f"{path}:{n}: a {kind} question is about one page, not pages {pages}")
        if (kind == "table-cell") != ("row" in data):
            raise EvalSetError(f"{path}:{n}: a table-cell question needs a row, and only a table-cell question has one")
        if kind == "table-cell" and not row.strip():
            raise EvalSetError(f"{path}:{n}: row must be non-empty")
        out.append(Question(**{k: data[k] for k in FIELDS}, pages=tuple(pages) if len(pages) > 1 else (),
                            split=split, kind=kind, row=row))
    if not out:
        raise EvalSetError(f"{path}: no questions")
    return out


def _normalised(text: str) -> str:
    # as include/eval/verify.py checks answers against the PDF, and hyphens dropped too: the
    # reader may join a word hyphenated over the page break with or without its hyphen
    return re.sub(r"[\s\-\u00ad\u2010\u2011]+", "", unicodedata.normalize("NFKC", text))


def holds(q: Question, text: str, hit: dict[str, Any]) -> bool:
    """Whether the hit's text holds ``text`` (the question's answer or its row), by the rule
    of the module docstring: a substring after normalising, or for a hit on an image-only
    copy, a fuzzy partial match of at least ``SCANNED_MATCH``."""
    from rapidfuzz import fuzz

    want, got = _normalised(text), _normalised(hit.get("text") or "")
    if want in got:
        return True
    if not q.scanned or not want or not got:
        return False
    score = fuzz.partial_ratio(want, got) if len(got) >= len(want) else fuzz.ratio(want, got)
    return score >= SCANNED_MATCH


def holds_answer(q: Question, hit: dict[str, Any]) -> bool:
    """Whether the hit's text holds the whole answer (``holds``)."""
    return holds(q, q.answer_substring, hit)


def holds_row(q: Question, hit: dict[str, Any]) -> bool:
    """Whether the hit's text holds the table-cell question's row substring (``holds``)."""
    return holds(q, q.row, hit)


def rank_of(q: Question, hits: list[dict[str, Any]], folder: str = "") -> int | None:
    """The rank of the first hit from ``q.doc`` that covers its pages and holds its answer
    (``holds``), in every group: a chunk of the page that has lost the answer, or for an
    answer over a page break a chunk of both pages holding one half, does not count; for a
    table cell the hit holds its row too (a chunk of the page holding only the caption, or a
    slice of the table without that row, does not count)."""
    for rank, h in enumerate(hits, 1):
        if h["key"] == folder + q.doc and q.wanted_pages <= set(h["pages"]) and holds_answer(q, h):
            if q.group == "table-cell" and not holds_row(q, h):
                continue
            return rank
    return None


def content_words(text: str) -> set[str]:
    """What ``overlap`` compares: words of 4+ Latin letters, lower-cased (function words aside),
    and the pairs of adjacent Han characters (Chinese has no spaces to find words by)."""
    text = unicodedata.normalize("NFKC", text).lower()
    words = {w for w in re.findall(r"[a-z]{4,}", text) if w not in FUNCTION_WORDS}
    for run in re.findall(r"[\u4e00-\u9fff]{2,}", text):
        words.update(run[i:i + 2] for i in range(len(run) - 1))
    return words


def overlap(q: Question) -> tuple[int, int]:
    """(how many of the answer's content words the question repeats, how many the answer has)."""
    answer = content_words(q.answer_substring)
    return len(answer & content_words(q.question)), len(answer)


def _scores(ranks: list[int | None], top_k: int) -> dict[str, Any]:
    found = [r for r in ranks if r is not None]
    return {"n": len(ranks), f"recall@{top_k}": round(len(found) / len(ranks), 4),
            "mrr": round(sum(1 / r for r in found) / len(ranks), 4)}


def _groups(questions: list[Question], ranks: list[int | None], top_k: int) -> dict[str, Any]:
    """Each group's scores, and ``<group> born-digital`` / ``<group> scanned`` beside a group that
    has questions about image-only copies."""
    groups: dict[str, Any] = {}
    for group in GROUPS + ("all",):
        idx = [i for i, q in enumerate(questions) if group == "all" or q.group == group]
        if not idx:
            continue
        groups[group] = _scores([ranks[i] for i in idx], top_k)
        if group != "all" and any(questions[i].scanned for i in idx):
            for origin, scanned in (("born-digital", False), ("scanned", True)):
                part = [ranks[i] for i in idx if questions[i].scanned == scanned]
                if part:
                    groups[f"{group} {origin}"] = _scores(part, top_k)
    return groups


def evaluate(retriever: Searcher, questions: list[Question], top_k: int = 5,
             modes: tuple[str, ...] = ("hybrid",), folder: str = "") -> dict[str, Any]:
    """``folder`` (a key prefix ending in ``/``): search only the documents under it, and
    read each question's ``doc`` as a key relative to it.

    Per mode: ``splits`` (each split's groups) and ``groups``, the tuning split's alone: what a
    benchmark may compare and tune against, so a frozen question never leaks into it."""
    where = SearchFilter(key_prefix=folder) if folder else None
    results = retriever.search_many([q.question for q in questions], top_k, modes, where)
    report: dict[str, Any] = {"top_k": top_k, "questions": len(questions), "modes": {}}
    for mode in modes:
        ranks = [rank_of(q, hits, folder) for q, hits in zip(questions, results[mode])]
        splits = {}
        for split in SPLITS:
            idx = [i for i, q in enumerate(questions) if q.split == split]
            if idx:
                splits[split] = {"groups": _groups([questions[i] for i in idx], [ranks[i] for i in idx], top_k)}
        misses = [
            {**asdict(q), "group": q.group, "top": [{"key": h["key"], "pages": h["pages"]} for h in hits[:3]]}
            for q, hits, r in zip(questions, results[mode], ranks) if r is None
        ]
        report["modes"][mode] = {"splits": splits, "groups": splits.get("tuning", {}).get("groups", {}),
                                 "misses": misses}
    return report


def format_report(report: dict[str, Any]) -> str:
    """A table per split (tuning first), a row per group, the modes side by side; then the misses."""
    k = report["top_k"]
    modes = list(report["modes"])
    lines: list[str] = []
    for split in SPLITS:
        tables = {m: report["modes"][m]["splits"].get(split, {}).get("groups", {}) for m in modes}
        names = list(dict.fromkeys(g for m in modes for g in tables[m]))
        if not names:
            continue
        width = max(10, *(len(g) for g in names))
        header = f"{'group':{width}} {'n':>4} " + " ".join(f"{m + ' R@' + str(k):>12} {m + ' MRR':>11}" for m in modes)
        if lines:
            lines.append("")
        lines += [f"split {split}", header, "-" * len(header)]
        for g in names:
            n = next(tables[m][g]["n"] for m in modes if g in tables[m])
            cells = []
            for m in modes:
                row = tables[m].get(g)
                cells.append(f"{row[f'recall@{k}']:>12.3f} {row['mrr']:>11.3f}" if row else f"{'-':>12} {'-':>11}")
            lines.append(f"{g:{width}} {n:>4} " + " ".join(cells))
    last = modes[-1]
    misses = report["modes"][last]["misses"]
    lines.append("")
    lines.append(f"misses ({last}, top {k}): {len(misses)}")
    for m in misses:
        top = ", ".join(f"{h['key']} p.{','.join(map(str, h['pages']))}" for h in m["top"]) or "(no hits)"
        want = "-".join(map(str, m["pages"] or [m["page"]]))
        row = f", row {m['row']!r}" if m.get("row") else ""
        lines.append(f"  [{m['split']} {m['group']}] {m['question']}  (want {m['doc']} p.{want}{row}; got {top})")
    return "\n".join(lines)
