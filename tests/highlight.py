"""Where a page image's highlight is: the pixels the page endpoint tints amber."""

from __future__ import annotations

import numpy as np
import pymupdf


def highlighted_box(png: bytes) -> tuple[float, float, float, float] | None:
    """The bounding box, in pixels, of the amber-tinted pixels (None when there are none).
    White paper under the fill comes out about (255, 242, 166): no grey or black pixel of a
    page rendering is that yellow."""
    pix = pymupdf.Pixmap(png)
    image = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.height, pix.width, pix.n)[..., :3].astype(int)
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    amber = (r > 200) & (g > 180) & (b < 200) & (r - b > 45)
    ys, xs = np.nonzero(amber)
    if not len(xs):
        return None
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


def overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
