"""The pipeline's stages called directly (no Airflow), against the real S3 server and the embedded store (Qdrant Edge)."""

from __future__ import annotations

from kb.limits import RangeLimits
from kb.objectstore import ObjectStore
from kb.pipeline import Context
from kb.pipeline.extract import local_engine
from kb.pipeline.messages import Plan
from kb.pipeline.plan import plan
from kb.pipeline.sense import sense
from kb.settings import PipelineSettings, QualitySettings


def context(quality: QualitySettings | None = None) -> Context:
    """A context from the environment the ``kb_env`` fixture set."""
    return Context(ObjectStore.from_settings(), PipelineSettings(), quality or QualitySettings())


def plan_run(ctx: Context, run_id: str, *, force: bool = False, reread: bool = False,
             limits: RangeLimits | None = None) -> Plan:
    """sense, then plan, with the local engine's limits unless others are given."""
    return plan(ctx, sense(ctx, force=force, reread=reread), run_id, limits or RangeLimits.from_engine(local_engine()))
