"""One DataFrame row per page or per chunk: the numbers the suites put bounds on."""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np
import pandas as pd

from kb.sparse import CJK
from ocr_engine.api.pages import PageResult, PageStatus, count_chars
from ocr_engine.api.text import cer, distinct_ratio

# A CJK character is a token of its own; other text splits on whitespace.
_TOKEN = re.compile(rf"[{CJK}]|[^\s{CJK}]+")


def text_tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def page_frame(pages: Sequence[PageResult], distinct_n: int) -> pd.DataFrame:
    """Columns: page, status, failed (0/1: the page failed alone and is left out), empty
    (0/1, a page read with no text), chars (NaN on empty and failed pages), confidence (NaN
    where the backend gives none), distinct (distinct-n of the page's tokens; NaN on failed
    pages), cer (NaN unless the page was audited: OCR'd as well as read from its text layer)."""
    rows = []
    for p in pages:
        text = p.markdown or ""
        chars = count_chars(text)
        failed = p.is_failed
        empty = not failed and (p.status == PageStatus.EMPTY or chars == 0)
        rows.append({
            "page": p.page,
            "status": str(p.status),
            "failed": int(failed),
            "empty": int(empty),
            "chars": math.nan if empty or failed else float(chars),
            "confidence": math.nan if p.confidence is None else float(p.confidence),
            "distinct": math.nan if failed else distinct_ratio(text_tokens(text), distinct_n),
            "cer": math.nan if p.audit is None else float(p.audit.cer),
        })
    columns = ["page", "status", "failed", "empty", "chars", "confidence", "distinct", "cer"]
    return pd.DataFrame(rows, columns=columns)


def audit_cer(reference_text: str, ocr_text: str) -> float:
    return round(cer(ocr_text, reference_text), 4)


def chunk_frame(ids: Sequence[str], payloads: Sequence[dict[str, Any]], vectors: np.ndarray) -> pd.DataFrame:
    """Columns: id, text_chars, tokens, pages (how many), dimension, finite, norm."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        vectors = vectors.reshape(len(ids), -1)
    rows = []
    for i, (pid, payload) in enumerate(zip(ids, payloads)):
        v = vectors[i]
        finite = bool(np.isfinite(v).all())
        rows.append({
            "id": pid,
            "text_chars": count_chars(payload.get("text") or ""),
            "tokens": int(payload.get("tokens") or 0),
            "pages": len(payload.get("pages") or []),
            "dimension": int(v.shape[0]),
            "finite": finite,
            "norm": float(np.linalg.norm(v)) if finite else math.nan,
        })
    columns = ["id", "text_chars", "tokens", "pages", "dimension", "finite", "norm"]
    return pd.DataFrame(rows, columns=columns)
