"""What every stage works against: the object store, the ledger, the settings, the quality thresholds."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from kb.ledger_db import Ledger
from kb.objectstore import ObjectStore
from kb.settings import PipelineSettings, QualitySettings


@dataclass
class Context:
    store: ObjectStore
    settings: PipelineSettings = field(default_factory=PipelineSettings)
    quality: QualitySettings = field(default_factory=QualitySettings)

    @property
    def artifacts(self) -> str:
        return self.settings.artifacts_bucket

    @cached_property
    def ledger(self) -> Ledger:
        return Ledger.for_settings(self.settings, self.store)
