"""The scan benchmark's documents, their image-only copies, and what the originals say.

``include/scanbench/documents.json`` lists PDFs from Debian packages that no rule of this
project was chosen on (two-column papers of many classes, and documents with typeset
tables), the pages of each that the benchmark uses, and each document's split (``tuning``:
reading rules may be chosen on it; ``frozen``: measured once, at the end of a piece of work).
``tables.json`` beside it holds, for every used page, its tables as hand-checked (an empty
list: checked, no table). SOURCES.md says how both were made.

Ground truth comes from the original PDF, never from the project's readers: each page's
words in the file's own content order (PyMuPDF ``get_text("words", sort=False)``, which is
reading order for these producers, floats and footnotes aside: checked by eye, SOURCES.md),
their boxes, and the column each stands in.

An image-only copy of a document's pages is made with realistic faults drawn from a hash of
its file name (resolution, blur, speckle, JPEG quality) and turned by a given skew, either
way at random per page (``kb_dev.samples.scanned_copy``), the same bytes every time.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pymupdf

from kb_dev.corpus import CorpusError, download_deb, extract_pdfs, sha256

HOME = Path(__file__).resolve().parents[1] / "scanbench"
LIST = HOME / "documents.json"
TABLES = HOME / "tables.json"
SKEWS = (0.0, 0.5, 1.0, 2.0)  # degrees, the skews the benchmark reads each document at
SPLITS = ("tuning", "frozen")


def split_of(file: str) -> str:
    """The split a file name falls in, once and for all: a third frozen, by its hash."""
    return "frozen" if int(hashlib.sha256(file.encode()).hexdigest(), 16) % 3 == 0 else "tuning"


@dataclass(frozen=True)
class Faults:
    """What a scanner does to a document's pages, besides skew."""

    dpi: int
    blur: float  # Gaussian radius in pixels
    speckle: float  # share of pixels turned to dust
    jpeg_quality: int

    @classmethod
    def of(cls, file: str) -> "Faults":
        h = int(hashlib.sha256(("faults:" + file).encode()).hexdigest(), 16)
        return cls(dpi=(150, 200, 300)[h % 3], blur=(0.0, 0.6, 1.0)[h // 3 % 3],
                   speckle=(0.001, 0.002, 0.003)[h // 9 % 3], jpeg_quality=(60, 75, 90)[h // 27 % 3])


@dataclass(frozen=True)
class BenchDocument:
    file: str
    package: str
    version: str
    deb_sha256: str
    path: str
    sha256: str
    pages_total: int
    pages: tuple[int, ...]  # 1-based, in the original
    kind: str  # two-column | tables
    klass: str  # the LaTeX class, R package or producer
    language: str
    licence: str
    split: str

    @property
    def faults(self) -> Faults:
        return Faults.of(self.file)

    def seed(self, skew: float) -> int:
        return int(hashlib.sha256(f"{self.file}@{skew}".encode()).hexdigest(), 16) % 2**31


def documents(splits: tuple[str, ...] = SPLITS) -> list[BenchDocument]:
    out = []
    for d in json.loads(LIST.read_text(encoding="utf-8"))["documents"]:
        doc = BenchDocument(d["file"], d["package"], d["version"], d["deb_sha256"], d["path"], d["sha256"],
                            d["pages_total"], tuple(d["pages"]), d["kind"], d["class"], d["language"],
                            d["licence"], d["split"])
        # The hash decides, once; a document read while rules were written before the list
        # existed says so (``split_why``) and counts as tuning, never the other way round.
        if doc.split != split_of(doc.file) and not (doc.split == "tuning" and d.get("split_why")):
            raise CorpusError(f"{doc.file}: documents.json says {doc.split}, its hash says {split_of(doc.file)}")
        if doc.split in splits:
            out.append(doc)
    return out


def fetch(dest: Path, docs: list[BenchDocument], echo: Callable[[str], None] = print) -> dict[str, Path]:
    """Each document's original under ``dest/originals`` (checked by digest; .debs kept in ``dest/debs``)."""
    (dest / "originals").mkdir(parents=True, exist_ok=True)
    out = {doc.file: dest / "originals" / doc.file for doc in docs}
    missing: dict[str, dict[BenchDocument, Path]] = {}
    for doc in docs:
        if not (out[doc.file].exists() and sha256(out[doc.file]) == doc.sha256):
            missing.setdefault(doc.package, {})[doc] = out[doc.file]
    for targets in missing.values():  # a package's files in one pass over it
        extract_pdfs(download_deb(next(iter(targets)), dest / "debs", echo), targets)
    return out


def used_pages(original: Path, pages: tuple[int, ...]) -> bytes:
    """The used pages of ``original`` as a PDF of their own, text layer kept: the born-digital
    document the benchmark reads, and the one its image-only copies are made of."""
    src = pymupdf.open(original)
    out = pymupdf.open()
    for n in pages:
        out.insert_pdf(src, from_page=n - 1, to_page=n - 1)
    return out.tobytes(garbage=3, deflate=True, no_new_id=True)  # no random /ID: the same bytes every time


def scanned(doc: BenchDocument, born_digital: bytes, skew: float) -> bytes:
    from kb_dev.samples import scanned_copy

    f = doc.faults
    return scanned_copy(born_digital, f.dpi, skew_deg=skew, exact_skew=True, speckle=f.speckle, blur=f.blur,
                        jpeg_quality=f.jpeg_quality, seed=doc.seed(skew))


# --- what the original says --------------------------------------------------------------------

@dataclass(frozen=True)
class Word:
    bbox: tuple[float, float, float, float]
    text: str
    column: str  # L or R: its line stands wholly left or right of the page's middle; S: across it
    line: tuple[float, float, float, float]  # its line's box: the words of one line share it


@dataclass(frozen=True)
class Table:
    bbox: tuple[float, float, float, float]
    header: list[str]
    rows: list[list[str]]
    caption: str | None


@dataclass
class TruthPage:
    page: int  # in the born-digital document of used pages (1-based)
    original_page: int
    width: float
    height: float
    words: list[Word]  # in the file's content order
    tables: list[Table] = field(default_factory=list)

    @property
    def two_column(self) -> bool:
        """Set in two columns: a dozen lines or more wholly on each side of the middle, and fewer
        than three in ten across it (the rule the set's pages were chosen by, SOURCES.md)."""
        lines = {w.line: w.column for w in self.words}
        sides = list(lines.values())
        return sides.count("L") >= 12 and sides.count("R") >= 12 and sides.count("S") < 0.3 * len(sides)

    def in_table(self, word: Word) -> bool:
        """Whether the word's middle stands inside one of the page's tables."""
        x, y = (word.bbox[0] + word.bbox[2]) / 2, (word.bbox[1] + word.bbox[3]) / 2
        return any(t.bbox[0] <= x <= t.bbox[2] and t.bbox[1] <= y <= t.bbox[3] for t in self.tables)

    @property
    def kind(self) -> str:
        return "two-column" if self.two_column else "tables" if self.tables else "other"

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)


def truth(born_digital: bytes, doc: BenchDocument, tables: dict[str, dict[str, list[dict]]] | None = None
          ) -> list[TruthPage]:
    """Each used page's words in content order with their columns, and its hand-checked tables."""
    tables = _tables() if tables is None else tables
    pdf = pymupdf.open(stream=born_digital, filetype="pdf")
    out = []
    for i, page in enumerate(pdf):
        raw = page.get_text("words", sort=False)
        mid = page.rect.width / 2
        extent: dict[tuple[int, int], list[float]] = {}
        for x0, y0, x1, y1, _, block, line, _ in raw:
            e = extent.setdefault((block, line), [x0, y0, x1, y1])
            e[0], e[1], e[2], e[3] = min(e[0], x0), min(e[1], y0), max(e[2], x1), max(e[3], y1)
        words = []
        for x0, y0, x1, y1, text, block, line, _ in raw:
            e = extent[(block, line)]
            column = "L" if e[2] < mid else "R" if e[0] > mid else "S"
            words.append(Word((x0, y0, x1, y1), text, column, (e[0], e[1], e[2], e[3])))
        original = doc.pages[i]
        out.append(TruthPage(i + 1, original, page.rect.width, page.rect.height, words,
                             [Table(tuple(t["bbox"]), t["header"], t["rows"], t.get("caption"))  # type: ignore[arg-type]
                              for t in tables.get(doc.file, {}).get(str(original), [])]))
    return out


def _tables() -> dict[str, dict[str, list[dict]]]:
    return json.loads(TABLES.read_text(encoding="utf-8")) if TABLES.exists() else {}


# --- tokens, as the measures compare them --------------------------------------------------------

_TOKEN = re.compile(r"[a-z0-9]{3,}|[\u3400-\u9fff]+")


def tokens(text: str) -> list[str]:
    """Latin words and numbers of three characters or more (lower case, NFKC), and Chinese as
    character pairs (its words are not spaced): what a reading and the original are compared by."""
    out = []
    for m in _TOKEN.finditer(unicodedata.normalize("NFKC", text).lower()):
        t = m.group()
        if "\u3400" <= t[0] <= "\u9fff":
            out.extend(t[i:i + 2] for i in range(len(t) - 1))
        else:
            out.append(t)
    return out
