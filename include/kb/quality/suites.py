"""The expectation suites, built from thresholds so a run's overrides apply to it alone.

Each returns the suite's expectations; ``gate.validate`` binds them to a GX suite.
"""

from __future__ import annotations

import great_expectations as gx
import pandas as pd

from kb.settings import QualitySettings

E = gx.expectations


def pages_suite(q: QualitySettings, page_count: int, frame: pd.DataFrame) -> list:
    """What a document's pages must satisfy after OCR. ``frame`` decides only whether the
    optional checks apply (confidence where a backend gives one, CER where pages were audited)."""
    suite: list = []
    # every planned page exactly once
    suite.append(E.ExpectTableRowCountToEqual(value=page_count))
    suite.append(E.ExpectColumnValuesToBeUnique(column="page"))
    suite.append(E.ExpectColumnValuesToBeBetween(column="page", min_value=1, max_value=page_count))
    suite.append(E.ExpectColumnMeanToBeBetween(column="empty", min_value=0, max_value=q.max_empty_page_share))
    # a page that failed alone is left out of the index; a document may lose only a few
    suite.append(E.ExpectColumnMeanToBeBetween(column="failed", min_value=0, max_value=q.max_failed_page_share))
    suite.append(E.ExpectColumnValuesToNotBeInSet(column="status", value_set=["truncated"]))
    suite.append(E.ExpectColumnValuesToBeBetween(column="distinct", min_value=q.min_distinct_ratio))
    # empty and failed pages are NaN here: the shares above already bound them
    suite.append(E.ExpectColumnValuesToBeBetween(column="chars", min_value=q.min_page_chars,
                                                          max_value=q.max_page_chars))
    if frame["confidence"].notna().any():
        suite.append(E.ExpectColumnMeanToBeBetween(column="confidence", min_value=q.min_mean_confidence))
    if frame["cer"].notna().any():
        suite.append(E.ExpectColumnValuesToBeBetween(column="cer", min_value=0, max_value=q.max_cer))
    return suite


def chunks_suite(q: QualitySettings, dimension: int, max_tokens: int) -> list:
    """What chunks must satisfy before they are upserted into a collection of ``dimension``."""
    suite: list = []
    suite.append(E.ExpectColumnValuesToBeUnique(column="id"))
    suite.append(E.ExpectColumnValuesToNotBeNull(column="id"))
    suite.append(E.ExpectColumnValuesToBeBetween(column="text_chars", min_value=1))
    suite.append(E.ExpectColumnValuesToBeBetween(column="tokens", min_value=1, max_value=max_tokens))
    suite.append(E.ExpectColumnValuesToBeBetween(column="dimension", min_value=dimension, max_value=dimension))
    suite.append(E.ExpectColumnValuesToBeInSet(column="finite", value_set=[True]))
    suite.append(E.ExpectColumnValuesToBeBetween(column="norm", min_value=q.min_vector_norm))
    suite.append(E.ExpectColumnValuesToBeBetween(column="pages", min_value=1))
    return suite
