"""Text and its quality measures, as the engine and the pipeline's data-quality gates both
count them: characters, CJK, character error rates, distinct-n."""

from __future__ import annotations

import re
import unicodedata

from rapidfuzz.distance import Levenshtein



def is_cjk(ch: str) -> bool:
    """Whether ``ch`` is written without word spaces: CJK ideographs, kana, CJK punctuation,
    fullwidth forms."""
    return "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\uff00" <= ch <= "\uffef"


def normalise(text: str) -> str:
    """NFKC, no whitespace: OCR and text layers differ in spacing and line breaks, not in content."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def cer(hypothesis: str, reference: str) -> float:
    """Character error rate: edit distance over the reference's length (whitespace ignored)."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return Levenshtein.distance(hyp, ref) / len(ref)


def normalise_spaced(text: str) -> str:
    """NFKC, every whitespace run as one space, and no space next to a CJK character: word
    spaces count (a Latin line read as "somethingthat" is wrong), Chinese spacing does not."""
    spaced = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()
    # After strip() a space always has a character on each side.
    return "".join(ch for i, ch in enumerate(spaced)
                   if ch != " " or not (is_cjk(spaced[i - 1]) or is_cjk(spaced[i + 1])))


def cer_spaced(hypothesis: str, reference: str) -> float:
    """Character error rate with word spaces: edit distance over the reference's length, both
    normalised by ``normalise_spaced``."""
    ref, hyp = normalise_spaced(reference), normalise_spaced(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return Levenshtein.distance(hyp, ref) / len(ref)


def distinct_ratio(tokens: list[int] | list[str], n: int) -> float:
    """Distinct n-grams over all n-grams (1.0 when there are fewer than n tokens).

    The Unlimited OCR paper's distinct-n: a repetition loop drives it towards 0.
    """
    if len(tokens) < n:
        return 1.0
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams)
