"""The ``ppocr`` backend: Baidu's PP-OCRv4 (Chinese and English) through RapidOCR's
ONNX runtime, on CPU, with the models shipped inside the ``rapidocr-onnxruntime`` wheel.

Lines are detected on the page scaled down to ``max_side`` pixels, but read from the page
at full resolution, and the word spaces the recogniser drops in Latin text are put back
where the line's image has a gap as wide as a word space (``ocr_engine.spacing``)."""

from __future__ import annotations

import math
import time
from functools import cached_property
from typing import Iterator

import numpy as np
import pymupdf

from ocr_engine.backends.interface import Backend, Call
from ocr_engine.api.names import BackendName
from ocr_engine.layout import Line, page_skew, to_blocks
from ocr_engine.regions import Region, RegionFinder
from ocr_engine.render import RenderedPage
from ocr_engine.api.pages import PageResult, PageStatus, count_chars
from ocr_engine.spacing import ink_gaps, restore_spaces, spaced_positions

NAME = BackendName.PPOCR.value
REC_BATCH = 2  # lines per recogniser call (see _engine; bench/ppocr_rec_batch.py)

def _char_positions(text: str, word_info: list, crop_width: int) -> list[float]:
    """The x of each character of ``text`` in its crop, from the recogniser's CTC columns
    (``word_info`` is RapidOCR's ``[columns, words, word_columns, ...]``; the columns span the
    crop's width)."""
    columns, _, word_columns = word_info[0], word_info[1], word_info[2]
    flat = [c for cols in word_columns for c in cols]
    if len(flat) != len(text) or not columns:
        return []
    return [(c + 0.5) * crop_width / columns for c in flat]


def _places(text: str, spaced: str, xs: list[float], crop: np.ndarray
            ) -> tuple[list[float] | None, list[tuple[float, float]] | None]:
    """Where each character of the stripped ``spaced`` line stands, and the blank stretches of its
    image, as shares of the crop's width (``Line.chars``, ``Line.gaps``)."""
    width = crop.shape[1]
    if len(xs) != len(text) or not width:
        return None, None
    places = spaced_positions(text, spaced, xs)
    lead = len(spaced) - len(spaced.lstrip())
    kept = places[lead:lead + len(spaced.strip())]
    gaps, _ = ink_gaps(crop)
    return [x / width for x in kept], [(a / width, b / width) for a, b in gaps]


class PPOCRBackend(Backend):
    """Page by page (no call limits, no KV cache); the ONNX models load on the first page."""

    name = NAME
    weights_digest = None  # the models ship inside the wheel: its version names them

    def __init__(self, max_side: int = 960, rec_batch: int = REC_BATCH, regions: RegionFinder | None = None) -> None:
        self.max_side = max_side
        self.rec_batch = rec_batch
        self.regions = regions  # None: the page's lines are ordered by geometry alone

    @cached_property
    def _engine(self):
        from rapidocr_onnxruntime import RapidOCR

        # Detection works on the page scaled to `max_side` pixels: measured on four Debian
        # Reference pages at 150 dpi, 960 keeps CER (0.170, vs 0.171 at full size) and
        # reads 0.70 pages/s instead of 0.37 on 2 cores.
        # The recogniser reads lines two at a time, not RapidOCR's six: a batch is padded to
        # its widest line, and on the CPU the padding costs more than batching saves. On the
        # corpus's 102 scanned pages with a reference (five documents, English and Chinese),
        # 2 cores: 136.5 s instead of 195.8 s, CER 0.2191 instead of 0.2178 (the Chinese
        # manual 0.0805 vs 0.0779): `bench/ppocr_rec_batch.py --batches 6 2`, 2026-12-02.
        return RapidOCR(max_side_len=self.max_side, rec_batch_num=self.rec_batch)

    @cached_property
    def model_version(self) -> str:
        """The recogniser, and the layout model where one orders the lines: a page's reading
        depends on both, so a switch of either is a switch of OCR model (``reread``)."""
        from importlib.metadata import version

        ocr = f"PP-OCRv4 (rapidocr-onnxruntime {version('rapidocr-onnxruntime')})"
        return ocr if self.regions is None else f"{ocr} + {self.regions.model_version}"

    def read_crops(self, crops: list[np.ndarray]) -> list[tuple[str, float, list[float]]]:
        """Each line image's text, score, and its characters' x positions in the image."""
        readings, _ = self._engine.text_rec(crops, True)
        return [(text, float(score), _char_positions(text, word_info, crop.shape[1]))
                for crop, (text, score, word_info) in zip(crops, readings)]

    def read_lines(self, image: np.ndarray, zoom: float) -> list[Line]:
        """The page's lines, boxes in PDF points (pixels over ``zoom``)."""
        engine = self._engine
        # No per-line angle classifier: pages arrive upright (rendering applies /Rotate), and
        # on code and table lines it flipped text wrongly (English CER 0.19 with it, 0.17 without).
        quads, _ = engine(image, use_cls=False, use_rec=False)
        if not quads:
            return []
        quads = np.asarray(quads, dtype=np.float32)
        # RapidOCR's own pipeline reads the lines from the page it detected on, scaled to
        # 960 pixels (87 dpi for a Letter page at 150). Cutting them from the full page
        # instead took the 35 English scanned pages' CER with spaces from 0.110 to 0.093
        # (before spaces were restored) and costs little: each line is scaled to 48 pixels
        # high either way, and with restore_spaces these pages took 112.5 s against 110.6 s.
        crops = engine.get_crop_img_list(image, quads)
        lines = []
        for quad, crop, (text, score, xs) in zip(quads, crops, self.read_crops(crops)):
            if score < engine.text_score or not text.strip():
                continue
            spaced = restore_spaces(crop, text, xs)
            top, bottom = quad[1] - quad[0], quad[2] - quad[3]
            angle = math.atan2(top[1] + bottom[1], top[0] + bottom[0])
            x0, y0 = quad.min(axis=0) / zoom
            x1, y1 = quad.max(axis=0) / zoom
            lines.append(Line((float(x0), float(y0), float(x1), float(y1)), spaced.strip(), score, angle,
                              *_places(text, spaced, xs, crop)))
        return lines

    def find_regions(self, rendered: RenderedPage, lines: list[Line]) -> list[Region] | None:
        """The layout model's regions on the page turned upright by its lines' skew; None
        without a model, or without lines to read."""
        if self.regions is None or not lines:
            return None
        return self.regions.find(rendered.image, rendered.zoom, page_skew(lines))

    def recognize(self, rendered: RenderedPage, page_width_pt: float,
                  page_height_pt: float | None = None) -> PageResult:
        started = time.perf_counter()
        lines = self.read_lines(rendered.image, rendered.zoom)
        if page_height_pt is None:
            page_height_pt = rendered.image.shape[0] / rendered.zoom
        regions = self.find_regions(rendered, lines)
        return self.page_result(rendered.page, lines, regions, page_width_pt, page_height_pt,
                                time.perf_counter() - started)

    def page_result(self, page: int, lines: list[Line], regions: list[Region] | None, page_width_pt: float,
                    page_height_pt: float, seconds: float = 0.0) -> PageResult:
        """The page's result from its lines and regions (``regions`` None: by geometry alone);
        ``seconds`` spent reading them, to which ordering them is added."""
        started = time.perf_counter()
        blocks, markdown = to_blocks(lines, page_width_pt, regions, page_height_pt)
        chars = count_chars(markdown)
        confidence = None
        if lines:
            weights = [max(1, len(ln.text)) for ln in lines]
            confidence = round(sum(ln.confidence * w for ln, w in zip(lines, weights)) / sum(weights), 4)
        return PageResult(
            page=page, markdown=markdown, blocks=blocks, backend=NAME, status=PageStatus.OK if chars else PageStatus.EMPTY,
            chars=chars, confidence=confidence, model_version=self.model_version,
            seconds=round(seconds + time.perf_counter() - started, 4), width=page_width_pt, height=page_height_pt,
        )

    def parse(self, doc: pymupdf.Document, pages: list[int], call: Call) -> Iterator[PageResult]:
        tick = time.perf_counter()
        for rendered in call.render(doc, pages):
            call.check_cancel()
            rect = doc.load_page(rendered.page - 1).rect
            try:
                result = self.recognize(rendered, rect.width, rect.height)
            except Exception as exc:  # one unreadable page fails alone
                result = PageResult.failed(rendered.page, NAME, exc)
            # a page's time is what a caller waits for it: rendering included
            now = time.perf_counter()
            result.seconds, tick = round(now - tick, 4), now
            yield result
