"""Text quality measures shared by tests, benchmarks and the data-quality gates."""

from __future__ import annotations

import re
import unicodedata

from rapidfuzz.distance import Levenshtein


def normalise(text: str) -> str:
    """NFKC, no whitespace: OCR and text layers differ in spacing and line breaks, not in content."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def cer(hypothesis: str, reference: str) -> float:
    """Character error rate: edit distance over the reference's length (whitespace ignored)."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return Levenshtein.distance(hyp, ref) / len(ref)
