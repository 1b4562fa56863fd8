"""The numbers ops is paged on, read from the settings that own them.

- the quarantine share: ``AlertSettings.quarantine_share`` (``KB_ALERT_QUARANTINE_SHARE``);
- the landing-to-searchable promise: ``PipelineSettings.searchable_within_s``
  (``KB_SEARCHABLE_WITHIN_S``), which kb_ingest's deadline also reads; no successful run for
  half of it pages too.

The alert rules, their promtool cases (``kb_dev.observe.alert_rules``) and the dashboards
(``kb_dev.observe.dashboards``) are all rendered from one ``Thresholds``. The committed files
hold the defaults; a deployment that sets either variable renders them again with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kb.settings import AlertSettings, PipelineSettings


@dataclass(frozen=True)
class Thresholds:
    quarantine_share: float
    promise_s: float

    @classmethod
    def defaults(cls) -> "Thresholds":
        """The settings' defaults: what the committed rule files and dashboards hold."""
        return cls(AlertSettings.model_fields["quarantine_share"].default,
                   PipelineSettings.model_fields["searchable_within_s"].default)

    @classmethod
    def from_environment(cls) -> "Thresholds":
        """This deployment's values (``KB_ALERT_QUARANTINE_SHARE``, ``KB_SEARCHABLE_WITHIN_S``)."""
        return cls(AlertSettings().quarantine_share, PipelineSettings().searchable_within_s)
