"""Check that every answer in qa.jsonl is on its page, verbatim.

    python include/eval/verify.py [--docs .kb/eval-docs] [--questions include/eval/qa.jsonl]

"Verbatim" ignores only whitespace (PDF text breaks lines and pads CJK with spaces) and
NFKC width forms. Also checks the PDFs' sha256 and that no question is repeated.
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


def normalise(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def verify(docs: Path, questions: Path) -> list[str]:
    import pymupdf

    problems, texts, seen = [], {}, set()
    for name, (_, digest) in PDFS.items():
        path = docs / name
        if not path.exists():
            problems.append(f"{path}: missing (run include/eval/fetch.py)")
            continue
        if sha256(path) != digest:
            problems.append(f"{path}: sha256 differs from SOURCES.md")
        with pymupdf.open(path) as doc:
            texts[name] = [normalise(page.get_text()) for page in doc]
    for n, line in enumerate(questions.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        q = json.loads(line)
        if q["question"] in seen:
            problems.append(f"line {n}: question repeated: {q['question']}")
        seen.add(q["question"])
        pages = texts.get(q["doc"])
        if pages is None:
            problems.append(f"line {n}: unknown doc {q['doc']}")
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
    parser.add_argument("--questions", type=Path, default=here / "qa.jsonl")
    args = parser.parse_args()
    problems = verify(args.docs, args.questions)
    for p in problems:
        print(p)
    count = sum(1 for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip())
    print(f"{count - len(problems) if problems else count}/{count} answers verified" if not problems else
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
