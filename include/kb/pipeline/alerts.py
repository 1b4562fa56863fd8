"""Which alerts a run owes the ops team: one per document version and event, per channel.

Events: a version quarantined (bad input, a failed gate, a refusal by the OCR service),
or indexed without some pages. Markers under ``alerts/`` make the sending exactly once:
a retried alert task, or a later run that meets the same version again, sends nothing
twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kb.artifacts import ArtifactKeys
from kb.ledger import now_iso
from kb.objectstore import ObjectInfo
from kb.pipeline.context import Context
from kb.pipeline.messages import DocumentResult
from kb.quality.alerts import Alert

log = logging.getLogger(__name__)


@dataclass
class PendingAlert:
    alert: Alert
    markers: dict[str, str]  # channel not yet sent -> the marker key written once it went out


def pending_alerts(ctx: Context, results: list[DocumentResult], channels: list[str]) -> list[PendingAlert]:
    out, seen = [], set()
    for r in results:
        event = r.alert_event
        if event is None or r.record in seen:
            continue
        seen.add(r.record)
        body = ctx.store.get_json(ctx.artifacts, r.record)
        if body is None:
            log.warning("alert record %s is missing; no alert for %s", r.record, r.key)
            continue
        version = ObjectInfo.from_dict(body).version  # a record names the object as the ledger does
        markers = {c: ArtifactKeys.alert_marker(body["doc_id"], version, event, c) for c in channels}
        todo = {c: m for c, m in markers.items() if not ctx.store.exists(ctx.artifacts, m)}
        if todo:
            out.append(PendingAlert(Alert.from_record(body, ctx.artifacts), todo))
    return out


def mark_alerted(ctx: Context, marker: str, run_id: str) -> None:
    ctx.store.put_json(ctx.artifacts, marker, {"run_id": run_id, "at": now_iso()})
