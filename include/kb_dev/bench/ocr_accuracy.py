"""``python -m kb_dev.bench.ocr ocr-accuracy``: PP-OCR against Tesseract on real PDFs.

The pages come from documents nobody here wrote: the Debian Reference in English and
in Simplified Chinese (Debian packages ``debian-reference-en`` and
``debian-reference-zh-cn``, GPL-2+), fetched with ``apt-get download`` into a cache
folder when first needed, never committed. Each page with a text layer is rendered
at 150 dpi and read by both engines; the text layer is the reference, so layout
differences (headers, tables) count against both alike. CER is aggregate: all edits
over all reference characters, whitespace ignored.

Tesseract comes from Debian: ``apt-get install tesseract-ocr tesseract-ocr-chi-sim``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pymupdf

from ocr_engine.api.text import normalise
from ocr_engine.settings import EngineSettings

SOURCES = {
    "en": ("debian-reference-en", "usr/share/debian-reference/debian-reference.en.pdf", "eng"),
    "zh": ("debian-reference-zh-cn", "usr/share/debian-reference/debian-reference.zh-cn.pdf", "chi_sim+eng"),
}


def fetch_sources(cache: Path) -> dict[str, Path]:
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for lang, (package, member, _) in SOURCES.items():
        target = cache / "x" / member
        if not target.exists():
            done = subprocess.run(["apt-get", "download", package], cwd=cache, capture_output=True, text=True)
            debs = sorted(cache.glob(f"{package}_*.deb"))
            if not debs:
                raise RuntimeError(f"`apt-get download {package}` failed (run `apt-get update` first?): {done.stderr[-500:]}")
            subprocess.run(["dpkg", "-x", str(debs[-1]), str(cache / "x")], check=True)
        out[lang] = target
    return out


def pick_pages(doc: pymupdf.Document, count: int, min_chars: int = 400) -> list[int]:
    """Evenly spread body pages with a substantial text layer (1-based)."""
    candidates = [i + 1 for i in range(doc.page_count) if len(normalise(doc[i].get_text())) >= min_chars]
    if len(candidates) <= count:
        return candidates
    step = len(candidates) / count
    return [candidates[int(k * step)] for k in range(count)]


def _edits(hyp: str, ref: str) -> int:
    from rapidfuzz.distance import Levenshtein

    return Levenshtein.distance(normalise(hyp), normalise(ref))


def _tesseract(png: Path, langs: str) -> str:
    done = subprocess.run(["tesseract", str(png), "stdout", "-l", langs, "--dpi", "150"],
                          capture_output=True, text=True, env={**os.environ, "OMP_THREAD_LIMIT": "2"})
    if done.returncode != 0:
        raise RuntimeError(f"tesseract failed: {done.stderr[-300:]}")
    return done.stdout


def run(pages_per_language: int = 12, dpi: int = 150, cache: Path | None = None) -> dict:
    if not shutil.which("tesseract"):
        raise RuntimeError("tesseract is not installed: apt-get install tesseract-ocr tesseract-ocr-chi-sim")
    from ocr_engine.backends.ppocr import PPOCRBackend
    from ocr_engine.render import render_page

    cache = cache or Path(os.environ.get("KB_STATE_DIR", ".kb")) / "bench-sources"
    sources = fetch_sources(cache)
    ppocr = PPOCRBackend(max_side=EngineSettings().ppocr_max_side)
    report: dict = {"dpi": dpi, "languages": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for lang, path in sources.items():
            doc = pymupdf.open(path)
            pages = pick_pages(doc, pages_per_language)
            ref_chars = pp_edits = ts_edits = 0
            pp_s = ts_s = 0.0
            for n in pages:
                page = doc[n - 1]
                reference = page.get_text()
                rendered = render_page(page, dpi, 40_000_000)
                started = time.perf_counter()
                pp_text = ppocr.recognize(rendered, page.rect.width, page.rect.height).markdown
                pp_s += time.perf_counter() - started
                png = Path(tmp) / f"{lang}-{n}.png"
                pymupdf.Pixmap(pymupdf.csRGB, rendered.image.shape[1], rendered.image.shape[0],
                               rendered.image.tobytes(), False).save(png)
                started = time.perf_counter()
                ts_text = _tesseract(png, SOURCES[lang][2])
                ts_s += time.perf_counter() - started
                ref_chars += len(normalise(reference))
                pp_edits += _edits(pp_text, reference)
                ts_edits += _edits(ts_text, reference)
            report["languages"][lang] = {
                "document": f"{SOURCES[lang][0]}: {path.name}", "pages": pages, "reference_chars": ref_chars,
                "ppocr": {"cer": round(pp_edits / ref_chars, 4), "pages_per_s": round(len(pages) / pp_s, 3)},
                "tesseract": {"cer": round(ts_edits / ref_chars, 4), "pages_per_s": round(len(pages) / ts_s, 3)},
            }
    lines = [f"{'lang':5} {'pages':>5} {'PP-OCR CER':>11} {'Tesseract CER':>14} {'PP-OCR p/s':>11} {'Tesseract p/s':>14}"]
    for lang, r in report["languages"].items():
        lines.append(f"{lang:5} {len(r['pages']):>5} {r['ppocr']['cer']:>11.4f} {r['tesseract']['cer']:>14.4f} "
                     f"{r['ppocr']['pages_per_s']:>11.3f} {r['tesseract']['pages_per_s']:>14.3f}")
    report["table"] = "\n".join(lines)
    return report
