"""Word spaces in OCR'd Latin lines: put back where the line's image has a word-wide gap.

PP-OCR's recogniser often writes two Latin words together ("somethingthat", "Requiredaction")
on 150 dpi scans. Its per-character positions (CTC columns) alone cannot tell a word gap from
a letter gap; the ink between the characters can.
"""

from __future__ import annotations

import bisect

import cv2
import numpy as np

from ocr_engine.api.text import is_cjk

# No space goes before a closing mark or after an opening one, nor next to a slash: such gaps
# are mostly side bearings in monospaced code ("c(A , C)", "http: //"). On the 35 English
# scanned pages, 116 of them were as wide as a word space, and 46 of those held one.
_CLOSING = set(".,;:!?)]}'\"’”/")
_OPENING = set("([{‘“/")


def ink_gaps(crop: np.ndarray) -> tuple[list[tuple[int, int]], int]:
    """The blank column runs between a line image's first and last ink, and its x-height.

    Ink is Otsu's threshold of the grey crop, less components of one or two pixels: the scans'
    speckle lies in word gaps, and a single dot would split one. The x-height is the number of
    rows holding at least 40% of the busiest row's ink (ascenders and descenders hold less)."""
    grey = crop.mean(axis=2).astype(np.uint8) if crop.ndim == 3 else crop
    _, ink = cv2.threshold(grey, 0, 1, cv2.THRESH_BINARY_INV | cv2.THRESH_OTSU)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    keep = stats[:, cv2.CC_STAT_AREA] >= 3
    keep[0] = False  # the background
    ink = keep[labels]
    rows = ink.sum(axis=1)
    inked = np.flatnonzero(ink.any(axis=0))
    if not len(inked):
        return [], 0
    x_height = int((rows >= 0.4 * rows.max()).sum())
    blank = ~ink[:, inked[0] : inked[-1] + 1].any(axis=0)
    edges = np.diff(blank.astype(np.int8), prepend=0, append=0)  # +1 where a run starts, -1 after it
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(inked[0] + a), int(inked[0] + b)) for a, b in zip(starts, ends)], x_height


def _word_gap(a: str, b: str, x_height: int, median_gap: float) -> float:
    """The narrowest gap, in pixels, that is a word space between characters ``a`` and ``b``.

    Measured on the 35 English scanned pages (99,321 pairs of characters read together;
    15,768 spaces in the text layer, 2,082 of them dropped by the recogniser, 6 spaces added):
    0.45 x-heights between letters finds 1,809 of the dropped spaces and adds 18 wrong ones
    (0.4: 85 wrong; 0.5: 5 fewer found). Next to punctuation the glyph's side bearing widens
    the gap, so 0.6 (0.5: 90 wrong; 0.7: 54 fewer found); between digits 0.8 (0.45: 5 more
    wrong; "11" in Times stands 0.6 apart). Twice the line's median gap keeps monospaced code
    whole (Courier's letters stand 4-5 px apart, 0.7 x-height)."""
    if a.isdigit() and b.isdigit():
        share = 0.8
    elif a.isalnum() and b.isalnum():
        share = 0.45
    else:
        share = 0.6
    return max(share * x_height, 2 * median_gap)


def spaced_positions(text: str, spaced: str, xs: list[float]) -> list[float]:
    """Each character's x of ``spaced`` (``text`` with spaces put back by ``restore_spaces``): a
    character's own, a space put back the middle of its neighbours'."""
    out: list[float] = []
    j = 0
    for ch in spaced:
        if j < len(text) and ch == text[j]:
            out.append(xs[j])
            j += 1
        else:
            out.append((xs[j - 1] + xs[j]) / 2 if 0 < j < len(xs) else xs[min(j, len(xs) - 1)])
    return out


def restore_spaces(crop: np.ndarray, text: str, xs: list[float]) -> str:
    """``text`` with a space put back wherever its line image ``crop`` has a gap as wide as a
    word space between two Latin characters the recogniser wrote together.

    ``xs`` are the characters' x positions in the crop (their CTC columns). Those alone do not
    tell a word space: "with ligatures" came out as "withligatures", and the h->l step was a
    letter's (10 px). The ink does: at 150 dpi letters stand 0-3 px apart and words 5-10 px.
    A gap belongs between the two characters whose positions enclose its middle. No space goes
    next to a CJK character, before a closing mark, after an opening one, or after a full stop
    unless a capital follows ("0.12", "read.csv"; 289 of 291 wide gaps after a full stop and
    before a capital held a space, 27 of 57 before anything else). On the 35 English scanned
    pages this took CER with spaces from 0.093 to 0.079."""
    if len(xs) != len(text) or not any(ch.isascii() and ch.isalnum() for ch in text):
        return text
    gaps, x_height = ink_gaps(crop)
    if not gaps:
        return text
    median_gap = float(np.median([g1 - g0 for g0, g1 in gaps]))
    narrowest = _word_gap("a", "a", x_height, median_gap)  # no pair's threshold is lower
    spaced: set[int] = set()
    for g0, g1 in gaps:
        if g1 - g0 < narrowest:
            continue
        middle = (g0 + g1) / 2
        k = bisect.bisect_left(xs, middle)  # the gap lies between text[k - 1] and text[k]
        # A full stop or comma of one or two pixels is no ink here (see ink_gaps), so the gap
        # after "data." runs from the "a" and can hold the stop: the space goes after it.
        while k < len(text) and text[k] in _CLOSING and xs[k] <= g1:
            k += 1
        while k > 0 and text[k - 1] in _OPENING and xs[k - 1] >= g0:
            k -= 1
        if not 0 < k < len(text):
            continue
        a, b = text[k - 1], text[k]
        if a.isspace() or b.isspace() or is_cjk(a) or is_cjk(b) or b in _CLOSING or a in _OPENING:
            continue
        if a == "." and not b.isupper():
            continue
        if g1 - g0 >= _word_gap(a, b, x_height, median_gap):
            spaced.add(k)
    return "".join(" " + ch if i in spaced else ch for i, ch in enumerate(text))
