"""How reading a document (``kb.reading.read_document``: running lines, continuity) grows with its length.

    .venv/bin/python bench/read_long_document.py [--pages 250 1000] [--repeat 3]

Builds born-digital documents of generated prose (``kb_dev.samples.prose_pages``, a
heading and four paragraphs a page, as the size test's 1,000-page document), reads their
text layers once with the engine's ``textlayer`` backend, then times ``read_document`` on
each, the best of ``--repeat`` runs after one untimed warm-up run each. Prints the seconds per
document and, against the shortest, the ratio of seconds to the ratio of pages: near 1 the
reading grows with the length, near the page ratio it grows with its square.
"""

from __future__ import annotations

import argparse
import time

import pymupdf

from kb.reading import read_document
from kb_dev.samples import PAGE_H, PAGE_W, prose_pages
from ocr_engine.engine import OcrEngine


def document(pages: int) -> bytes:
    doc = pymupdf.open()
    for heading, paragraphs in prose_pages(pages, seed=11):
        page = doc.new_page(width=PAGE_W, height=PAGE_H)
        page.insert_textbox(pymupdf.Rect(60, 60, PAGE_W - 60, PAGE_H - 60), heading + "\n\n" + "\n\n".join(paragraphs),
                            fontsize=10, fontname="helv")
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, nargs="+", default=[250, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    engine = OcrEngine()
    results = {n: [r.as_dict() for r in engine.parse_pdf(document(n), backend="textlayer")] for n in sorted(args.pages)}
    seconds = {}
    for n, pages in results.items():
        read_document(pages)  # warm-up, the same for every length
        runs = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            read_document(pages)
            runs.append(time.perf_counter() - started)
        seconds[n] = min(runs)
    shortest = min(seconds)
    print(f"{'pages':>6} {'seconds':>9} {'pages ratio':>12} {'seconds ratio':>14}")
    for n, s in seconds.items():
        print(f"{n:>6} {s:>9.3f} {n / shortest:>12.1f} {s / seconds[shortest]:>14.1f}")


if __name__ == "__main__":
    main()
