"""Check that every answer in qa.jsonl is on its page, verbatim, and the set's format.

    python include/eval/verify.py [--docs .kb/eval-docs] [--corpus .kb/corpus/born-digital]
                                  [--scanbench-cache .kb/scanbench] [--questions include/eval/qa.jsonl]

"Verbatim" ignores only whitespace (PDF text breaks lines and pads CJK with spaces) and
NFKC width forms. A line with ``"pages": [p, p+1]`` (the ``cross-page`` group) has an answer
that runs over a page break: it must be on neither page alone, and split at some point
with at least 15 characters on each side into a start on page p and an end on page p+1
(a word hyphenated across the break may keep its hyphen or drop it).
A ``table-cell`` line's row and answer are on its page and on one line of it (the words of
a table row share a baseline; a line here is every word of the page at that height, so the
cells of a row are joined even where the text layer keeps them in separate blocks). A
``paraphrase`` line repeats at most ``MAX_PARAPHRASE_OVERLAP`` of its answer's content words
(``kb_dev.evaluation.overlap``: words of 4+ letters, lower-cased, and pairs of Han
characters); the figure is printed for each. A ``two-column`` line's page is set in two
columns (``kb_dev.scanbench.TruthPage.two_column``, the scan benchmark's rule) and its answer
lies inside one column: it is found in the words of the page's left column, or of its right
column, in the file's content order (the column is printed). A line about an image-only copy
(``X.scan.pdf``, ``kb_dev.corpus.original_of``) is checked against its born-digital original
(an image has no text layer to check), which must be one that is copied: for the corpus,
documents.json says so; the scan benchmark's documents are all copied by fetch.py.
The Debian Reference PDFs are under --docs (sha256 from fetch.py); the corpus PDFs under
--corpus (sha256 from include/corpus/documents.json; fetch them with include/corpus/fetch.py);
a ``scanbench/<name>.pdf`` line is about the PDF of the used pages of ``<name>`` in
include/scanbench/documents.json, and its page is a page of that PDF (1..k, as fetch.py makes
it and ``kb ingest`` reads it): the original under --scanbench-cache (``originals/``, checked
against documents.json's sha256), its used pages taken by ``kb_dev.scanbench.used_pages``.
A frozen line may only be about a document the scan benchmark's list puts in its frozen split.
The fields (split, kind, row, pages) are checked by ``kb_dev.evaluation.load_questions``,
what ``kb eval`` reads the set with. Also checks that no question is repeated about one document.
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
from fetch import PDFS, SCANBENCH, scanbench_file, sha256  # noqa: E402
from kb.errors import EvalSetError  # noqa: E402
from kb_dev.corpus import original_of  # noqa: E402
from kb_dev.evaluation import MAX_PARAPHRASE_OVERLAP, Question, load_questions, overlap  # noqa: E402

CORPUS_LIST = Path(__file__).resolve().parents[1] / "corpus" / "documents.json"
MIN_SIDE = 15  # normalised characters on each side of a page break


def normalise(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def corpus_documents() -> dict[str, dict]:
    return {d["file"]: d for d in json.loads(CORPUS_LIST.read_text(encoding="utf-8"))["documents"]}


def visual_lines(page) -> list[str]:
    """The page's words grouped by height (centres within 2.5 pt), each group left to right,
    normalised: a table row is one of these, whichever blocks the text layer puts its cells in."""
    words = sorted(page.get_text("words"), key=lambda w: ((w[1] + w[3]) / 2, w[0]))
    lines, current, centre = [], [], 0.0
    for w in words:
        mid = (w[1] + w[3]) / 2
        if current and abs(mid - centre) > 2.5:
            lines.append(current)
            current = []
        if not current:
            centre = mid
        current.append(w)
    if current:
        lines.append(current)
    return [normalise("".join(w[4] for w in sorted(line, key=lambda w: w[0]))) for line in lines]


def check_table_cell(n: int, q: Question, text: str, lines: list[str]) -> str | None:
    row, answer = normalise(q.row), normalise(q.answer_substring)
    for what, value, raw in (("row", row, q.row), ("answer", answer, q.answer_substring)):
        if value not in text:
            return f"line {n}: table-cell {what} {raw!r} not on {q.doc} p.{q.page}"
    if not any(row in line and answer in line for line in lines):
        return f"line {n}: row {q.row!r} and answer {q.answer_substring!r} are on {q.doc} p.{q.page} but on no one line"
    return None


def check_two_column(n: int, q: Question, truth) -> str | None:
    """``truth``: the page's ``kb_dev.scanbench.TruthPage``."""
    if not truth.two_column:
        return f"line {n}: {q.doc} p.{q.page} is not set in two columns (kb_dev.scanbench's rule)"
    answer = normalise(q.answer_substring)
    sides = [side for side in "LR" if answer in normalise("".join(w.text for w in truth.words if w.column == side))]
    if not sides:
        return f"line {n}: {q.answer_substring!r} is on {q.doc} p.{q.page} but in neither column alone"
    print(f"two-column line {n}: {q.doc} p.{q.page}: the {'left' if sides[0] == 'L' else 'right'} column")
    return None


def check_paraphrase(n: int, q: Question) -> str | None:
    shared, total = overlap(q)
    share = shared / total if total else 1.0
    print(f"paraphrase line {n}: {q.doc} p.{q.page}: {shared}/{total} of the answer's content words "
          f"in the question ({share:.2f})")
    if not total:
        return f"line {n}: paraphrase answer {q.answer_substring!r} has no content words to measure"
    if share > MAX_PARAPHRASE_OVERLAP:
        return (f"line {n}: paraphrase repeats {share:.2f} of its answer's content words "
                f"(at most {MAX_PARAPHRASE_OVERLAP})")
    return None


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


def scanbench_documents() -> dict[str, object]:
    from kb_dev import scanbench

    return {d.file: d for d in scanbench.documents()}


def verify(docs: Path, questions: Path, corpus: Path = Path(".kb/corpus/born-digital"),
           scanbench_cache: Path = Path(".kb/scanbench")) -> list[str]:
    import pymupdf

    try:
        parsed = load_questions(questions)  # the fields, as `kb eval` reads them
    except EvalSetError as exc:
        return [str(exc)]
    raw = [(n, json.loads(line)) for n, line in enumerate(questions.read_text(encoding="utf-8").splitlines(), 1)
           if line.strip()]
    lines = [(n, q, parsed_q) for (n, q), parsed_q in zip(raw, parsed)]
    problems: list[str] = []
    corpus_list = corpus_documents()
    bench = scanbench_documents() if any(scanbench_file(q.doc) for _, _, q in lines) else {}
    text_of = {}  # a question's doc -> the document whose text layer it is checked against
    for n, _, q in lines:
        bench_file = scanbench_file(q.doc)
        original = original_of(q.doc)
        if bench_file is not None:
            if bench_file not in bench:
                problems.append(f"line {n}: {q.doc}: {bench_file} is not in include/scanbench/documents.json")
                continue
            if q.split == "frozen" and bench[bench_file].split != "frozen":
                problems.append(f"line {n}: a frozen line about {bench_file}, which the scan benchmark "
                                f"puts in {bench[bench_file].split}")
            text_of[q.doc] = SCANBENCH + bench_file
        elif original is None:
            text_of[q.doc] = q.doc
        elif not corpus_list.get(original, {}).get("scanned_copy"):
            problems.append(f"line {n}: {q.doc} is no image-only copy that documents.json lists")
        else:
            text_of[q.doc] = original
    wanted = set(text_of.values())
    # name -> (path, sha256 it must have, what fetches it, the used pages or None for all)
    sources = {name: (docs / name, digest, "include/eval/fetch.py", None) for name, (_, digest) in PDFS.items()
               if name in wanted}
    for name, entry in corpus_list.items():
        if name in wanted and name not in sources:
            sources[name] = (corpus / name, entry["sha256"], "include/corpus/fetch.py", None)
    for name in sorted(wanted):
        if name.startswith(SCANBENCH):
            doc = bench[name.removeprefix(SCANBENCH)]
            sources[name] = (scanbench_cache / "originals" / doc.file, doc.sha256, "include/eval/fetch.py", doc)
    texts, rows, truths, seen = {}, {}, {}, set()
    cells = {(text_of.get(q.doc), q.page) for _, _, q in lines if q.kind == "table-cell"}
    for name, (path, digest, fetcher, bench_doc) in sources.items():
        if not path.exists():
            problems.append(f"{path}: missing (run {fetcher})")
            continue
        if sha256(path) != digest:
            problems.append(f"{path}: sha256 differs from {'SOURCES.md' if name in PDFS else 'documents.json'}")
        if bench_doc is None:
            pdf = pymupdf.open(path)
        else:
            from kb_dev import scanbench

            born = scanbench.used_pages(path, bench_doc.pages)
            pdf = pymupdf.open(stream=born, filetype="pdf")
            truths[name] = scanbench.truth(born, bench_doc, tables={})
        with pdf:
            texts[name] = [normalise(page.get_text()) for page in pdf]
            for (cell_doc, page_no) in cells:
                if cell_doc == name and 1 <= page_no <= len(pdf):
                    rows[name, page_no] = visual_lines(pdf[page_no - 1])
    for n, q, parsed_q in lines:
        if (q["doc"], q["question"]) in seen:
            problems.append(f"line {n}: question repeated about {q['doc']}: {q['question']}")
        seen.add((q["doc"], q["question"]))
        name = text_of.get(q["doc"])
        pages = texts.get(name) if name else None
        if pages is None:
            if name is not None and name not in sources:
                problems.append(f"line {n}: unknown doc {q['doc']}")
        elif "pages" in q:
            problem = check_cross_page(n, q, pages)
            if problem:
                problems.append(problem)
        elif not 1 <= q["page"] <= len(pages):
            problems.append(f"line {n}: page {q['page']} outside 1..{len(pages)}")
        elif parsed_q.kind == "table-cell":
            problem = check_table_cell(n, parsed_q, pages[q["page"] - 1], rows[name, q["page"]])
            if problem:
                problems.append(problem)
        elif normalise(q["answer_substring"]) not in pages[q["page"] - 1]:
            where = [i + 1 for i, t in enumerate(pages) if normalise(q["answer_substring"]) in t]
            problems.append(f"line {n}: {q['answer_substring']!r} not on {q['doc']} p.{q['page']} (found on {where[:5]})")
        elif parsed_q.kind == "two-column":
            if name not in truths:
                problems.append(f"line {n}: a two-column line must be about a scan benchmark document (scanbench/...)")
            else:
                problem = check_two_column(n, parsed_q, truths[name][q["page"] - 1])
                if problem:
                    problems.append(problem)
        if parsed_q.kind == "paraphrase":
            problem = check_paraphrase(n, parsed_q)
            if problem:
                problems.append(problem)
    return problems


def main() -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, default=Path(".kb/eval-docs"))
    parser.add_argument("--corpus", type=Path, default=Path(".kb/corpus/born-digital"))
    parser.add_argument("--scanbench-cache", type=Path, default=Path(".kb/scanbench"),
                        help="where include/eval/fetch.py (or kb bench scans) keeps the scan benchmark's originals")
    parser.add_argument("--questions", type=Path, default=here / "qa.jsonl")
    args = parser.parse_args()
    problems = verify(args.docs, args.questions, args.corpus, args.scanbench_cache)
    for p in problems:
        print(p)
    count = sum(1 for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip())
    print(f"{count - len(problems) if problems else count}/{count} answers verified" if not problems else
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
