"""Rendering PDF pages to images one at a time, within a pixel budget.

A page is rendered at the requested dpi unless its pixel count would exceed the
budget; then the zoom shrinks so the page fits. Only one page's pixels exist at a
time. MuPDF applies the page's /Rotate, so a rotated page comes out upright.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pymupdf

from ocr_engine.api.pdf import zoom_for


@dataclass
class RenderedPage:
    page: int  # 1-based
    image: np.ndarray  # (height, width, 3) uint8 RGB
    zoom: float  # pixels per PDF point: divide pixel coordinates by it for page coordinates
    downscaled: bool


def render_page(page: pymupdf.Page, dpi: int, max_pixels: int) -> RenderedPage:
    zoom, downscaled = zoom_for(page, dpi, max_pixels)
    pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), colorspace=pymupdf.csRGB, alpha=False)
    image = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.height, pix.width, 3).copy()
    return RenderedPage(page=page.number + 1, image=image, zoom=zoom, downscaled=downscaled)


def iter_pages(doc: pymupdf.Document, pages: list[int], dpi: int, max_pixels: int) -> Iterator[RenderedPage]:
    """Render ``pages`` (1-based) in order, each one only when it is asked for."""
    for number in pages:
        yield render_page(doc.load_page(number - 1), dpi, max_pixels)
