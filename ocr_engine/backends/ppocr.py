"""The ``ppocr`` backend: Baidu's PP-OCRv4 (Chinese and English) through RapidOCR's
ONNX runtime, on CPU, with the models shipped inside the ``rapidocr-onnxruntime`` wheel."""

from __future__ import annotations

import time
from functools import cached_property

from ocr_engine.layout import Line, to_blocks
from ocr_engine.render import RenderedPage
from ocr_engine.schema import EMPTY, OK, PageResult, count_chars

NAME = "ppocr"


class PPOCRBackend:
    name = NAME

    def __init__(self, max_side: int = 960) -> None:
        self.max_side = max_side

    @cached_property
    def _engine(self):
        from rapidocr_onnxruntime import RapidOCR

        # Detection works on the page scaled to `max_side` pixels: measured on four Debian
        # Reference pages at 150 dpi, 960 keeps CER (0.170, vs 0.171 at full size) and
        # reads 0.70 pages/s instead of 0.37 on 2 cores.
        return RapidOCR(max_side_len=self.max_side)

    @cached_property
    def model_version(self) -> str:
        from importlib.metadata import version

        return f"PP-OCRv4 (rapidocr-onnxruntime {version('rapidocr-onnxruntime')})"

    def recognize(self, rendered: RenderedPage, page_width_pt: float) -> PageResult:
        started = time.perf_counter()
        # No per-line angle classifier: pages arrive upright (rendering applies /Rotate), and
        # on code and table lines it flipped text wrongly (English CER 0.19 with it, 0.17 without).
        result, _ = self._engine(rendered.image, use_cls=False)
        lines = []
        for box, text, score in result or []:
            xs = [p[0] / rendered.zoom for p in box]
            ys = [p[1] / rendered.zoom for p in box]
            if text.strip():
                lines.append(Line((min(xs), min(ys), max(xs), max(ys)), text.strip(), float(score)))
        blocks, markdown = to_blocks(lines, page_width_pt)
        chars = count_chars(markdown)
        confidence = None
        if lines:
            weights = [max(1, len(ln.text)) for ln in lines]
            confidence = round(sum(ln.confidence * w for ln, w in zip(lines, weights)) / sum(weights), 4)
        return PageResult(
            page=rendered.page, markdown=markdown, blocks=blocks, backend=NAME, status=OK if chars else EMPTY,
            chars=chars, confidence=confidence, model_version=self.model_version,
            seconds=round(time.perf_counter() - started, 4),
        )
