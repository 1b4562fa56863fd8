"""ONNX Runtime's spinning intra-op threads, on and off, for the embedder and for PP-OCR.

    .venv/bin/python bench/ort_spinning.py [--dest .kb/corpus] [--rounds 2]

Each measurement runs in a fresh process, the two settings taking turns round after round
(the machine's noise falls on both alike), each warmed up the same way before it is timed:
- the embedder alone: 300 prose chunks, batches of 16;
- PP-OCR alone: 8 pages of a scanned corpus paper, two requests at once (the OCR service's
  two slots, threads in one process);
- both at once: the same OCR beside an embedding process, as an index task runs beside the
  OCR service on one machine.
With spinning on (ORT's default) an idle thread spins before it sleeps; on a busy CPU those
spins take time slices from the processes beside it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _set_spinning(on: bool) -> None:
    """Every ORT session this process makes spins (ORT's default) or not; set last, so it
    overrides the embedder's own setting."""
    import onnxruntime as ort

    from kb.embedding import SPIN_WAIT_KEY

    make = ort.InferenceSession.__init__

    def init(self, path, sess_options=None, *args, **kwargs):
        sess_options = sess_options or ort.SessionOptions()
        sess_options.add_session_config_entry(SPIN_WAIT_KEY, "1" if on else "0")
        make(self, path, sess_options, *args, **kwargs)

    ort.InferenceSession.__init__ = init


def _embed(wait_for_go: bool) -> float:
    from kb.embedding import make_embedder
    from kb.settings import PipelineSettings
    from kb_dev.samples import prose_pages

    embedder = make_embedder(PipelineSettings(embed_cache_dir=REPO / ".kb" / "models"))
    texts = [str(page)[:1200] for page in prose_pages(300, seed=3, paragraphs=2)]
    embedder.embed_documents(texts[:16])  # warm-up: the session loads
    if wait_for_go:
        print("ready", flush=True)
        sys.stdin.readline()
    started = time.perf_counter()
    embedder.embed_documents(texts)
    return time.perf_counter() - started


def _ocr(scan: Path, beside_embedding: bool, on: bool) -> tuple[float, float | None]:
    from ocr_engine.engine import OcrEngine

    engine, data = OcrEngine(), scan.read_bytes()
    engine.parse_pdf(data, first=1, last=1, backend="ppocr")  # warm-up: the models load
    other = None
    if beside_embedding:
        other = subprocess.Popen([sys.executable, __file__, "--child", "embed-beside", "--spin", str(int(on))],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert other.stdout.readline().strip() == "ready"
        other.stdin.write("go\n")
        other.stdin.flush()
    started = time.perf_counter()
    slots = [threading.Thread(target=lambda pages: [engine.parse_pdf(data, first=p, last=p, backend="ppocr")
                                                    for p in pages], args=(pages,)) for pages in ([2, 4, 6, 8], [3, 5, 7, 9])]
    for slot in slots:
        slot.start()
    for slot in slots:
        slot.join()
    ocr_s = time.perf_counter() - started
    embed_s = float(other.stdout.readline()) if other else None
    return ocr_s, embed_s


def child(what: str, on: bool, scan: Path | None) -> None:
    _set_spinning(on)
    if what == "embed":
        print(_embed(False))
    elif what == "embed-beside":
        print(_embed(True), flush=True)
    else:
        ocr_s, embed_s = _ocr(scan, what == "both", on)
        print(ocr_s, embed_s if embed_s is not None else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=REPO / ".kb" / "corpus")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--spin", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--scan", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, bool(args.spin), args.scan)
        return
    from kb_dev.corpus import fetch

    fetch(args.dest, echo=lambda _m: None)
    scan = args.dest / "scanned" / "fitdistrplus-paper2JSS.scan.pdf"
    results: dict[tuple[str, bool], list[list[float]]] = {}
    for _ in range(args.rounds):
        for what in ("embed", "ocr", "both"):
            for on in (True, False):
                done = subprocess.run([sys.executable, __file__, "--child", what, "--spin", str(int(on)),
                                       "--scan", str(scan)], capture_output=True, text=True, check=True)
                results.setdefault((what, on), []).append([float(x) for x in done.stdout.split()])
    labels = {"embed": "embedder alone, 300 chunks", "ocr": "PP-OCR alone, 8 pages two at once",
              "both": "PP-OCR 8 pages | embedder 300 chunks, at once"}
    print(f"{'seconds per round':48s} {'spinning on':>24s} {'spinning off':>24s}")
    for what, label in labels.items():
        cells = [" ".join("/".join(f"{x:.1f}" for x in r) for r in results[(what, on)]) for on in (True, False)]
        print(f"{label:48s} {cells[0]:>24s} {cells[1]:>24s}")


if __name__ == "__main__":
    sys.path[:0] = [str(REPO), str(REPO / "include")]
    main()
