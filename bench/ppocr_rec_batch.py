"""How many lines PP-OCR's recogniser should read per call: CER and seconds for each batch size.

    .venv/bin/python bench/ppocr_rec_batch.py [--dest .kb/corpus] [--batches 6 1 2] [--every 4]

Reads the image-only copies of the real corpus (fetched to ``--dest`` when missing, as
``kb bench corpus`` does) with one PP-OCR backend per batch size, page by page in turn, so
each variant sees the same rendered page right after the others (the machine's noise falls
on all of them alike; the first page warms every variant up before anything is timed). A
page's reference is its born-digital original's text layer; pages with under 50 characters
of it are skipped. Prints per document and in total: CER (the engine's normalisation) and
the seconds ``read_lines`` took.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pymupdf
from rapidfuzz.distance import Levenshtein

from kb_dev.corpus import documents, fetch
from ocr_engine.backends.ppocr import PPOCRBackend
from ocr_engine.api.text import normalise
from ocr_engine.render import render_page
from ocr_engine.settings import EngineSettings

MIN_REFERENCE_CHARS = 50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=Path(".kb/corpus"))
    ap.add_argument("--batches", type=int, nargs="+", default=[6, 1, 2])
    ap.add_argument("--every", type=int, default=1, help="read every n-th page of each document")
    args = ap.parse_args()
    fetch(args.dest, echo=lambda _m: None)
    settings = EngineSettings()
    backends = {b: PPOCRBackend(max_side=settings.ppocr_max_side, rec_batch=b) for b in args.batches}
    total = {b: [0, 0, 0.0] for b in args.batches}  # edits, reference chars, seconds
    warm = False
    pages = 0
    for doc in (d for d in documents() if d.scanned_copy):
        scan = pymupdf.open(args.dest / "scanned" / doc.scan_file)
        text = pymupdf.open(args.dest / "born-digital" / doc.file)
        per_doc = {b: [0, 0] for b in args.batches}
        for i in range(0, scan.page_count, args.every):
            reference = normalise(text[i].get_text())
            if len(reference) < MIN_REFERENCE_CHARS:
                continue
            page = render_page(scan.load_page(i), settings.dpi, settings.max_pixels_per_page)
            if not warm:  # model loads and first-call allocations, for every variant alike
                for backend in backends.values():
                    backend.read_lines(page.image, page.zoom)
                warm = True
            pages += 1
            for b, backend in backends.items():
                started = time.perf_counter()
                lines = backend.read_lines(page.image, page.zoom)
                seconds = time.perf_counter() - started
                edits = Levenshtein.distance(normalise("".join(line.text for line in lines)), reference)
                total[b][0] += edits
                total[b][1] += len(reference)
                total[b][2] += seconds
                per_doc[b][0] += edits
                per_doc[b][1] += len(reference)
        print(f"{doc.file}: CER " + ", ".join(f"batch {b} {e / max(1, n):.4f}" for b, (e, n) in per_doc.items()),
              flush=True)
    for b, (edits, chars, seconds) in total.items():
        print(f"batch {b}: CER {edits / max(1, chars):.4f} on {pages} pages ({chars} reference characters), "
              f"{seconds:.1f} s")


if __name__ == "__main__":
    main()
