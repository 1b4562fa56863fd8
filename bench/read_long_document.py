"""How reading a document (``kb.reading.read_document``: running lines, continuity) grows with its length.

    .venv/bin/python bench/read_long_document.py [--pages 250 1000] [--repeat 3]

Builds born-digital documents of generated prose (``kb_dev.samples.prose_pdf``, the
size test's 1,000-page document at other lengths), reads their
text layers once with the engine's ``textlayer`` backend, then times ``read_document`` on
each, the best of ``--repeat`` runs after one untimed warm-up run each. Prints the seconds per
document and, against the shortest, the ratio of seconds to the ratio of pages: near 1 the
reading grows with the length, near the page ratio it grows with its square.
"""

from __future__ import annotations

import argparse
import time

from kb.reading import read_document
from kb_dev.samples import prose_pdf
from ocr_engine.engine import OcrEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, nargs="+", default=[250, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    engine = OcrEngine()
    results = {n: [r.as_dict() for r in engine.parse_pdf(prose_pdf(n), backend="textlayer")] for n in sorted(args.pages)}
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
