"""``kb bench scans``: how scanned pages are read, on documents no reading rule was chosen on.

The set is ``include/scanbench`` (``kb_dev.scanbench``): two-column papers of many classes
and documents with typeset tables, from Debian packages, each in the ``tuning`` or the
``frozen`` split. Each document's used pages are read three ways, in this process, as the
pipeline reads them (``kb.pipeline.index.chunk_pages`` chunks the page results):

- ``text layer``: the born-digital pages, from their text layer (the engine's ``auto`` route);
  the ceiling of what a reading of their scans can reach;
- ``geometry``: image-only copies at each skew (0, 0.5, 1 and 2 degrees), PP-OCR's lines
  ordered by line geometry alone (XY-cut; the engine before the layout model);
- ``model``: the same lines, ordered by the layout model's regions (``ocr_engine.regions``).

PP-OCR reads each copy's lines once; both orderings start from them, and each variant's
seconds are the lines' time plus its own (regions, ordering). Measures, by split, variant,
skew and page kind (``two-column`` pages as the original sets them, pages with ``tables``,
``other``), each against the original PDF (``kb_dev.scanbench.truth``), never against a
reader of this project:

- ``order``: of the tokens (words of three characters or more, Chinese character pairs) that
  stand once on the original page and once in the page's reading (its blocks in order), the
  share in the longest run that keeps the original's order (a longest increasing subsequence),
  pooled over pages.
- ``mixed``: of the chunks holding text of a two-column page, those that hold lines of its two
  columns side by side: their tokens on that page (unique on it) go from one column to the
  other and back (three runs of two tokens or more). Reading a column and then the next is
  one change, and fine.
- ``rows_found``: of the tables' body rows (their cells' text, eight characters or more), those
  some chunk holds whole (fuzzy, 90); ``header_kept``: of the chunks that hold a body row of a
  table printed with a header row, those that hold its header row too (fuzzy, 85).
- ``false_tables``: table blocks the reading claims where the original has no table (no
  hand-checked table under them), per 20 pages.
- ``cer``: the reading's text against the original's words in content order, word spaces
  counted (``ocr_engine.api.text.normalise_spaced``), pooled.
- ``seconds_per_page``: reading a page's lines, regions and order (rendering aside).

Each measure is also given over every page kind together (``all``).
"""

from __future__ import annotations

import json
import re
import sys
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from kb_dev.bench.structure import in_order
from kb_dev.scanbench import SKEWS, SPLITS, TruthPage, tokens

VARIANTS = ("text layer", "geometry", "model")
KINDS = ("two-column", "tables", "other")


# --- measures ---------------------------------------------------------------------------------

def order(truth: TruthPage, reading: str) -> tuple[int, int]:
    """(tokens in the original's order, tokens matched) for one page's reading."""
    ref, hyp = tokens(truth.text), tokens(reading)
    ref_n, hyp_n = Counter(ref), Counter(hyp)
    place = {t: i for i, t in enumerate(ref) if ref_n[t] == 1}
    seq = [place[t] for t in hyp if hyp_n[t] == 1 and t in place]
    return in_order(seq), len(seq)  # places are unique: non-decreasing is increasing


def token_columns(truth: TruthPage) -> dict[str, str]:
    """Token -> the column (L or R) of the one word it stands in on a two-column page. Words of a
    table are left out: a table's cells stand side by side, and a chunk holds them row by row."""
    out: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for w in truth.words:
        for t in tokens(w.text):
            seen[t] += 1
            out[t] = "T" if truth.in_table(w) else w.column
    return {t: c for t, c in out.items() if seen[t] == 1 and c in "LR"}


def mixed(chunk_text: str, chunk_pages: Iterable[int], columns: dict[int, dict[str, str]]) -> bool | None:
    """Whether a chunk holds the two columns of a page side by side; None when it holds no text of
    a two-column page (two tokens or more placed in a column)."""
    pages = [p for p in chunk_pages if p in columns]
    if not pages:
        return None
    runs: dict[int, list[list[str]]] = defaultdict(list)
    placed = 0
    for t in tokens(chunk_text):
        where = [(p, columns[p][t]) for p in pages if t in columns[p]]
        if len(where) != 1:
            continue
        page, column = where[0]
        placed += 1
        page_runs = runs[page]
        if page_runs and page_runs[-1][0] == column:
            page_runs[-1].append(column)
        else:
            page_runs.append([column])
    if placed < 2:
        return None
    for page_runs in runs.values():
        kept: list[str] = []
        for run in page_runs:
            if len(run) >= 2 and (not kept or kept[-1] != run[0]):
                kept.append(run[0])
        if len(kept) >= 3:
            return True
    return False


def _flat(text: str) -> str:
    """Text without spaces, pipes and Markdown rules, lower case: a table chunk is a pipe table."""
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"\s+|\||-{3,}", "", text)


@dataclass
class TableCount:
    rows: int = 0
    rows_found: int = 0
    row_chunks: int = 0  # (chunk, table) pairs: the chunk holds a body row of the table
    with_header: int = 0  # of those, the chunk holds the header row too

    def add(self, other: "TableCount") -> None:
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)


def tables(truth: list[TruthPage], chunks: list[dict[str, Any]]) -> TableCount:
    from rapidfuzz import fuzz

    count = TableCount()
    flat = [(_flat(c["text"]), set(c["pages"])) for c in chunks]
    for page in truth:
        for table in page.tables:
            header = _flat("".join(table.header))
            rows = [r for r in (_flat("".join(cells)) for cells in table.rows) if len(r) >= 8]
            holding = [text for text, pages in flat if page.page in pages]
            count.rows += len(rows)
            found = [[fuzz.partial_ratio(r, text) >= 90 for text in holding] for r in rows]
            count.rows_found += sum(1 for hits in found if any(hits))
            if not header:  # a table printed without a header row has none to keep
                continue
            for k, text in enumerate(holding):
                if any(hits[k] for hits in found):
                    count.row_chunks += 1
                    count.with_header += fuzz.partial_ratio(header, text) >= 85
    return count


def false_tables(truth: list[TruthPage], results: list[Any]) -> int:
    """Table blocks no hand-checked table of their page stands under (a third of the smaller box shared)."""
    by_page = {p.page: p for p in truth}
    claimed = 0
    for r in results:
        page = by_page.get(r.page)
        for b in r.blocks:
            if b.type != "table" or page is None:
                continue
            area = (b.bbox[2] - b.bbox[0]) * (b.bbox[3] - b.bbox[1])
            if not any(_shared(b.bbox, t.bbox) >= min(area, _box_area(t.bbox)) / 3 for t in page.tables):
                claimed += 1
    return claimed


def _box_area(b: tuple[float, float, float, float]) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def _shared(a, b) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def cer_parts(truth: TruthPage, reading: str) -> tuple[int, int]:
    """(edits, reference characters), word spaces counted."""
    from rapidfuzz.distance import Levenshtein

    from ocr_engine.api.text import normalise_spaced

    ref, hyp = normalise_spaced(truth.text), normalise_spaced(reading)
    return Levenshtein.distance(hyp, ref), len(ref)


def page_text(result: Any) -> str:
    """A page's reading: its blocks' text in their order."""
    return "\n".join(b.text for b in result.blocks)


# --- tallies ----------------------------------------------------------------------------------

@dataclass
class Tally:
    pages: int = 0
    in_order: int = 0
    matched: int = 0
    chunks: int = 0  # chunks holding text of a two-column page
    mixed: int = 0
    table: TableCount = field(default_factory=TableCount)
    false_tables: int = 0
    edits: int = 0
    ref_chars: int = 0
    seconds: float = 0.0

    def add(self, other: "Tally") -> None:
        for k, v in vars(other).items():
            if k == "table":
                self.table.add(v)
            else:
                setattr(self, k, getattr(self, k) + v)

    def figures(self) -> dict[str, Any]:
        def share(a: float, b: float) -> float | None:
            return round(a / b, 4) if b else None

        t = self.table
        return {"pages": self.pages, "order": share(self.in_order, self.matched), "matched": self.matched,
                "mixed": share(self.mixed, self.chunks), "chunks": self.chunks,
                "rows_found": share(t.rows_found, t.rows), "rows": t.rows,
                "header_kept": share(t.with_header, t.row_chunks), "row_chunks": t.row_chunks,
                "false_tables_per_20_pages": share(20 * self.false_tables, self.pages),
                "cer": share(self.edits, self.ref_chars),
                "seconds_per_page": share(self.seconds, self.pages)}


def measure(truth: list[TruthPage], results: list[Any], chunks: list[dict[str, Any]], scanned: bool,
            seconds: dict[int, float]) -> dict[str, Tally]:
    """One reading of one document, by page kind."""
    out = {kind: Tally() for kind in KINDS}
    by_page = {r.page: r for r in results}
    for page in truth:
        t = out[page.kind]
        r = by_page.get(page.page)
        text = page_text(r) if r is not None else ""
        t.pages += 1
        a, b = order(page, text)
        t.in_order += a
        t.matched += b
        if scanned:
            e, n = cer_parts(page, text)
            t.edits += e
            t.ref_chars += n
        t.seconds += seconds.get(page.page, 0.0)
        t.false_tables += false_tables([page], [r] if r is not None else [])
    columns = {p.page: token_columns(p) for p in truth if p.two_column}
    for c in chunks:
        m = mixed(c["text"], c["pages"], columns)
        if m is not None:  # counted with the two-column pages, whatever else the chunk spans
            out["two-column"].chunks += 1
            out["two-column"].mixed += m
    for page in truth:
        if page.tables:
            out[page.kind].table.add(tables([page], chunks))
    return out


# --- the run ----------------------------------------------------------------------------------

@dataclass
class Read:
    """One page's PP-OCR lines and layout regions, and the seconds each took."""

    lines: list[Any]
    regions: list[Any]
    lines_s: float
    regions_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"lines": [asdict(ln) for ln in self.lines], "regions": [asdict(r) for r in self.regions],
                "lines_s": self.lines_s, "regions_s": self.regions_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Read":
        from ocr_engine.layout import Line
        from ocr_engine.regions import Region, RegionLabel

        return cls([Line(tuple(x["bbox"]), x["text"], x["confidence"], x["angle"], x.get("chars"),  # type: ignore[arg-type]
                         [tuple(g) for g in x["gaps"]] if x.get("gaps") is not None else None) for x in d["lines"]],
                   [Region(tuple(x["bbox"]), RegionLabel(x["label"]), x["score"]) for x in d["regions"]],  # type: ignore[arg-type]
                   d["lines_s"], d["regions_s"])


def _read_scan(scan: bytes, cache: Path | None, reuse: bool) -> dict[int, tuple[Read, float, float]]:
    """Each page of an image-only copy: its lines and regions (from ``cache`` with ``reuse``), and
    its size in points."""
    import pymupdf

    from ocr_engine.backends.ppocr import PPOCRBackend
    from ocr_engine.layout import page_skew
    from ocr_engine.regions import CdlaRegions
    from ocr_engine.render import render_page
    from ocr_engine.settings import EngineSettings

    settings = EngineSettings()
    backend = _backend(PPOCRBackend, settings.ppocr_max_side)
    finder = _finder(CdlaRegions)
    doc = pymupdf.open(stream=scan, filetype="pdf")
    out = {}
    for i, page in enumerate(doc):
        path = cache / f"{i + 1}.json" if cache else None
        if reuse and path and path.exists():
            read = Read.from_dict(json.loads(path.read_text()))
        else:
            rendered = render_page(page, settings.dpi, settings.max_pixels_per_page)
            t0 = time.perf_counter()
            lines = backend.read_lines(rendered.image, rendered.zoom)
            t1 = time.perf_counter()
            regions = finder.find(rendered.image, rendered.zoom, page_skew(lines)) if lines else []
            read = Read(lines, regions, t1 - t0, time.perf_counter() - t1)
            if path:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(read.as_dict()))
        out[i + 1] = (read, page.rect.width, page.rect.height)
    return out


_MODELS: dict[Any, Any] = {}


def _backend(cls, max_side: int):
    return _MODELS.setdefault(cls, cls(max_side=max_side))


def _finder(cls):
    return _MODELS.setdefault(cls, cls())


def _chunks(results: list[Any], embedder: Any, settings: Any) -> list[dict[str, Any]]:
    from kb.pipeline.index import chunk_pages

    return [{"text": c.text, "pages": c.pages} for c in chunk_pages(results, embedder, settings)]


def bench_scans(dest: Path, splits: tuple[str, ...] = ("tuning",), skews: tuple[float, ...] = SKEWS,
                reuse_ocr: bool = False, only: list[str] | None = None,
                echo: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict[str, Any]:
    from kb.embedding import make_embedder
    from kb.settings import PipelineSettings
    from kb_dev.scanbench import documents, fetch, scanned, truth, used_pages
    from ocr_engine.backends.ppocr import PPOCRBackend
    from ocr_engine.engine import OcrEngine
    from ocr_engine.settings import EngineSettings

    docs = [d for d in documents(splits) if not only or d.file in only]
    originals = fetch(dest, docs, echo)
    settings = PipelineSettings()
    embedder = make_embedder(settings)
    engine = OcrEngine()
    backend = _backend(PPOCRBackend, EngineSettings().ppocr_max_side)
    tallies: dict[tuple[str, str, float, str], Tally] = defaultdict(Tally)
    per_document: list[dict[str, Any]] = []
    started = time.perf_counter()
    for doc in docs:
        t0 = time.perf_counter()
        born = used_pages(originals[doc.file], doc.pages)
        pages = truth(born, doc)
        results = engine.parse_pdf(born)
        row: dict[str, Any] = {"file": doc.file, "split": doc.split, "kind": doc.kind, "pages": len(pages)}
        doc_total = Tally()
        for kind, t in measure(pages, results, _chunks(results, embedder, settings), False,
                               {r.page: r.seconds for r in results}).items():
            tallies[(doc.split, "text layer", 0.0, kind)].add(t)
            doc_total.add(t)
        row["text layer"] = _brief(doc_total)
        for skew in skews:
            # the copy's bytes follow from the document, its pages, its faults and the skew
            cache = dest / "ocr-cache" / f"{doc.file}@{skew}-{'.'.join(map(str, doc.pages))}"
            reads = _read_scan(scanned(doc, born, skew), cache, reuse_ocr)
            for variant in ("geometry", "model"):
                results, seconds = [], {}
                for n, (read, w, h) in reads.items():
                    regions = read.regions if variant == "model" else None
                    r = backend.page_result(n, read.lines, regions, w, h,
                                            read.lines_s + (read.regions_s if variant == "model" else 0.0))
                    results.append(r)
                    seconds[n] = r.seconds
                by_kind = measure(pages, results, _chunks(results, embedder, settings), True, seconds)
                doc_total = Tally()
                for kind, t in by_kind.items():
                    tallies[(doc.split, variant, skew, kind)].add(t)
                    doc_total.add(t)
                row[f"{variant}@{skew}"] = _brief(doc_total)
        per_document.append(row)
        echo(f"{doc.file} ({doc.split}, {len(pages)} pages): {time.perf_counter() - t0:.1f} s")
    for (split, variant, skew, kind), t in list(tallies.items()):  # every page kind together
        tallies[(split, variant, skew, "all")].add(t)
    rows = []
    for (split, variant, skew, kind), t in sorted(tallies.items(), key=lambda kv: (
            SPLITS.index(kv[0][0]), VARIANTS.index(kv[0][1]), kv[0][2], (KINDS + ("all",)).index(kv[0][3]))):
        if t.pages:
            rows.append({"split": split, "variant": variant, "skew": skew, "kind": kind, **t.figures()})
    report = {"documents": len(docs), "splits": list(splits), "skews": list(skews), "reused_ocr": reuse_ocr,
              "rows": rows, "per_document": per_document, "seconds": round(time.perf_counter() - started, 1)}
    report["table"] = format_table(report)
    return report


def _brief(t: Tally) -> dict[str, Any]:
    return {k: v for k, v in t.figures().items() if k in ("order", "mixed", "header_kept", "false_tables_per_20_pages", "cer")}


def format_table(report: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return "" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    cols = ("split", "variant", "skew", "kind", "pages", "order", "mixed", "chunks", "rows_found", "header_kept",
            "row_chunks", "false_tables_per_20_pages", "cer", "seconds_per_page")
    lines = ["| " + " | ".join(c.replace("_", " ") for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in report["rows"]:
        lines.append("| " + " | ".join(f(r.get(c)) for c in cols) + " |")
    note = " (PP-OCR lines and regions reused from an earlier run: seconds are that run's)" if report["reused_ocr"] else ""
    return "\n".join(lines) + f"\n\n{report['documents']} documents, {report['seconds']} s{note}"
