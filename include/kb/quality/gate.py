"""Running a suite through a GX Checkpoint, in process, and reading what failed.

One ephemeral GX context per process; each validation adds its suite, validation
definition and checkpoint under unique names and removes them afterwards, so a
long-lived worker does not accumulate them. A failed validation gets its Data Docs page
built into a local folder.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)

SITE = "kb"
_names = itertools.count()

# Keyword arguments that say where an expectation looks, not what it demands.
_WHERE = {"batch_id", "column", "result_format", "catch_exceptions", "meta", "row_condition", "condition_parser"}


@dataclass
class Failure:
    expectation: str
    column: str | None
    observed: Any
    threshold: dict[str, Any]

    def line(self) -> str:
        where = f" on {self.column}" if self.column else ""
        expected = ", ".join(f"{k}={v}" for k, v in self.threshold.items()) or "every value to pass"
        return f"{self.expectation}{where}: observed {self.observed}; expected {expected}"


@dataclass
class GateReport:
    suite: str
    success: bool
    evaluated: int
    failures: list[Failure] = field(default_factory=list)
    docs_url: str | None = None
    result: dict[str, Any] = field(default_factory=dict)  # GX's validation result, as JSON

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=None)
def _context(docs_dir: str):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    ctx.add_data_docs_site(site_name=SITE, site_config={
        "class_name": "SiteBuilder",
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": docs_dir},
    })
    source = ctx.data_sources.add_pandas("kb")
    return ctx, source


def _jsonable(value: Any) -> Any:
    """GX results hold numpy scalars and NaN; alerts and the bucket need plain JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _observed(result: dict[str, Any]) -> Any:
    if "observed_value" in result and result["observed_value"] is not None:
        return _jsonable(result["observed_value"])
    if "unexpected_count" in result:
        out = {"unexpected_count": result.get("unexpected_count"),
               "unexpected_percent": round(float(result.get("unexpected_percent") or 0.0), 2),
               "examples": result.get("partial_unexpected_list", [])[:5]}
        return _jsonable(out)
    return _jsonable(result) or None


def validate(frame: pd.DataFrame, suite_name: str, expectations: list, run_name: str, docs_dir: Path) -> GateReport:
    """Run the suite on ``frame`` through a Checkpoint; Data Docs go to ``docs_dir``."""
    import great_expectations as gx

    docs_dir.mkdir(parents=True, exist_ok=True)
    ctx, source = _context(str(docs_dir))
    tag = f"{suite_name}-{next(_names)}"
    asset = source.add_dataframe_asset(tag)
    batch = asset.add_batch_definition_whole_dataframe(tag)
    suite = ctx.suites.add(gx.ExpectationSuite(name=tag, expectations=expectations))
    definition = ctx.validation_definitions.add(gx.ValidationDefinition(name=tag, data=batch, suite=suite))
    # No Data Docs action: building the site costs ~4x the validation itself, and only a
    # failure is ever looked at, so the docs are built below for failures alone.
    checkpoint = ctx.checkpoints.add(gx.Checkpoint(
        name=tag, validation_definitions=[definition], result_format="SUMMARY", actions=[],
    ))
    try:
        outcome = checkpoint.run(batch_parameters={"dataframe": frame},
                                 run_id=gx.RunIdentifier(run_name=run_name))
        identifier, result = next(iter(outcome.run_results.items()))
        failures = [
            Failure(
                expectation=r.expectation_config.type,
                column=r.expectation_config.kwargs.get("column"),
                observed=_observed(dict(r.result or {})) if not r.exception_info.get("raised_exception") else
                f"error: {r.exception_info.get('exception_message')}",
                threshold=_jsonable({k: v for k, v in r.expectation_config.kwargs.items()
                                     if k not in _WHERE and v is not None}),
            )
            for r in result.results if not r.success
        ]
        docs_url = None
        if not result.success:
            ctx.build_data_docs(site_names=[SITE], resource_identifiers=[identifier])
            urls = ctx.get_docs_sites_urls(resource_identifier=identifier, site_names=[SITE])
            docs_url = urls[0]["site_url"] if urls else None
        return GateReport(
            suite=suite_name, success=bool(result.success), evaluated=len(result.results),
            failures=failures, docs_url=docs_url,
            result=_jsonable(json.loads(json.dumps(result.to_json_dict(), default=str))),
        )
    finally:
        ctx.checkpoints.delete(tag)
        ctx.validation_definitions.delete(tag)
        ctx.suites.delete(tag)
        source.delete_asset(tag)
