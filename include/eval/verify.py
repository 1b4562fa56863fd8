"""Check that every answer in qa.jsonl is on its page, verbatim.

    python include/eval/verify.py [--docs .kb/eval-docs] [--corpus .kb/corpus/born-digital]
                                  [--questions include/eval/qa.jsonl]

"Verbatim" ignores only whitespace (PDF text breaks lines and pads CJK with spaces) and
NFKC width forms. A line with ``"pages": [p, p+1]`` (the ``cross-page`` group) has an answer
that runs over a page break: it must be on neither page alone, and split at some point
with at least 15 characters on each side into a start on page p and an end on page p+1
(a word hyphenated across the break may keep its hyphen or drop it).
The Debian Reference PDFs are under --docs (sha256 from fetch.py); the corpus PDFs under
--corpus (sha256 from include/corpus/documents.json; fetch them with include/corpus/fetch.py).
Also checks that no question is repeated.
Exit status 1, with each problem listed, if anything fails.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch import PDFS, sha256  # noqa: E402

CORPUS_LIST = Path(__file__).resolve().parents[1] / "corpus" / "documents.json"
MIN_SIDE = 15  # normalised characters on each side of a page break


def normalise(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def corpus_digests() -> dict[str, str]:
    return {d["file"]: d["sha256"] for d in json.loads(CORPUS_LIST.read_text(encoding="utf-8"))["documents"]}


def split_point(answer: str, first: str, second: str) -> int | None:
    """The first k with answer[:k] on ``first`` and answer[k:] on ``second`` (all normalised),
    at least MIN_SIDE characters each side. A word hyphenated over the break needs no special
    case: answer[:k] ending in "filesys" is found in "... filesys-" as well."""
    for k in range(MIN_SIDE, len(answer) - MIN_SIDE + 1):
        if answer[k:] in second and answer[:k] in first:
            return k
    return None


def check_cross_page(n: int, q: dict, pages: list[str]) -> str | None:
    span = q["pages"]
    numbers = isinstance(span, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in span)
    if not numbers or len(span) != 2 or span[1] != span[0] + 1:
        return f"line {n}: pages must be two consecutive page numbers, not {span!r}"
    if q["page"] != span[0]:
        return f"line {n}: page {q['page']} is not the first of pages {span}"
    if not 1 <= span[0] < len(pages):
        return f"line {n}: pages {span} outside 1..{len(pages)}"
    answer = normalise(q["answer_substring"])
    first, second = pages[span[0] - 1], pages[span[1] - 1]
    alone = [p for p, t in zip(span, (first, second)) if answer in t]
    if alone:
        return (f"line {n}: {q['answer_substring']!r} is on {q['doc']} p.{alone[0]} alone, "
                f"not across p.{span[0]}-{span[1]}")
    if split_point(answer, first, second) is None:
        return (f"line {n}: {q['answer_substring']!r} does not run from {q['doc']} p.{span[0]} onto p.{span[1]} "
                f"(no split with {MIN_SIDE}+ characters on each side)")
    return None


def verify(docs: Path, questions: Path, corpus: Path = Path(".kb/corpus/born-digital")) -> list[str]:
    import pymupdf

    lines = [(n, json.loads(line)) for n, line in enumerate(questions.read_text(encoding="utf-8").splitlines(), 1)
             if line.strip()]
    wanted = {q["doc"] for _, q in lines}
    sources = {name: (docs, digest, "include/eval/fetch.py") for name, (_, digest) in PDFS.items()}
    for name, digest in corpus_digests().items():
        if name in wanted and name not in sources:
            sources[name] = (corpus, digest, "include/corpus/fetch.py")
    problems, texts, seen = [], {}, set()
    for name, (folder, digest, fetcher) in sources.items():
        path = folder / name
        if not path.exists():
            problems.append(f"{path}: missing (run {fetcher})")
            continue
        if sha256(path) != digest:
            problems.append(f"{path}: sha256 differs from {'SOURCES.md' if name in PDFS else 'documents.json'}")
        with pymupdf.open(path) as doc:
            texts[name] = [normalise(page.get_text()) for page in doc]
    for n, q in lines:
        if q["question"] in seen:
            problems.append(f"line {n}: question repeated: {q['question']}")
        seen.add(q["question"])
        pages = texts.get(q["doc"])
        if pages is None:
            if q["doc"] not in sources:
                problems.append(f"line {n}: unknown doc {q['doc']}")
        elif "pages" in q:
            problem = check_cross_page(n, q, pages)
            if problem:
                problems.append(problem)
        elif not 1 <= q["page"] <= len(pages):
            problems.append(f"line {n}: page {q['page']} outside 1..{len(pages)}")
        elif normalise(q["answer_substring"]) not in pages[q["page"] - 1]:
            where = [i + 1 for i, t in enumerate(pages) if normalise(q["answer_substring"]) in t]
            problems.append(f"line {n}: {q['answer_substring']!r} not on {q['doc']} p.{q['page']} (found on {where[:5]})")
    return problems


def main() -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, default=Path(".kb/eval-docs"))
    parser.add_argument("--corpus", type=Path, default=Path(".kb/corpus/born-digital"))
    parser.add_argument("--questions", type=Path, default=here / "qa.jsonl")
    args = parser.parse_args()
    problems = verify(args.docs, args.questions, args.corpus)
    for p in problems:
        print(p)
    count = sum(1 for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip())
    print(f"{count - len(problems) if problems else count}/{count} answers verified" if not problems else
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
