"""Which alerts a run owes the ops team: one per document version and event, per channel.

Events: a version quarantined (bad input, a failed gate, a refusal by the OCR service),
or indexed without some pages; and a run whose deletions the retire guard held. Markers
under ``alerts/`` make the sending exactly once: a retried alert task, or a later run that
meets the same version (or the same held documents) again, sends nothing twice.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from typing import Any, Callable

from kb.artifacts import AlertEvent, ArtifactKeys
from kb.ledger import now_iso
from kb.objectstore import ObjectInfo
from kb.pipeline.context import Context
from kb.pipeline.messages import DocumentResult, RetireHold
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


# channel, subject, HTML body, webhook payload: the notifier's ``send`` with the task's context bound
Send = Callable[[str, str, str, dict[str, Any]], None]


@dataclass
class RetireHeldAlert:
    """What the ops team receives when the retire guard stops a run's deletions."""

    hold: RetireHold
    run_id: str

    @property
    def subject(self) -> str:
        h = self.hold
        return f"[kb] retire guard: {h.would_retire} of {h.indexed} indexed documents not listed; none retired"

    def lines(self) -> list[str]:
        h = self.hold
        where = f"s3://{h.bucket}/{h.prefix}"
        out = [
            f"Listing: {where} returned {h.listed} object(s)",
            f"Not listed: {h.would_retire} of the {h.indexed} indexed documents there "
            f"(KB_MAX_RETIRE_SHARE={h.max_share} allows {h.allowed})",
            f"Run: {self.run_id}",
        ]
        out += [f"Not listed: {k}" for k in h.keys]
        if h.would_retire > len(h.keys):
            out.append(f"... and {h.would_retire - len(h.keys)} more")
        out.append("Nothing was retired: every document stays searchable. If the listing was wrong, fix the "
                   "bucket or the credentials; if the deletions are meant, trigger kb_ingest with force=true "
                   f"(and prefix={h.prefix!r} to keep the re-index small).")
        return out

    def html(self) -> str:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines())
        return f"<p>{html.escape(self.subject)}</p><ul>{items}</ul>"

    def slack(self) -> dict[str, Any]:
        text = "\n".join(self.lines())
        return {
            "text": f"{self.subject}\n{text}",
            "blocks": [
                {"type": "header", "text": {"type": "plain_text", "text": self.subject[:150]}},
                {"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}},
            ],
            "kb": {"event": AlertEvent.RETIRE_HELD.value, "run_id": self.run_id, **self.hold.as_dict()},
        }


def send_retire_held_alert(ctx: Context, hold: RetireHold, channels: list[str], send: Send, run_id: str) -> int:
    """One alert per held set of documents on each channel not yet sent; returns how many
    went out. A channel that fails does not stop the others, and raises at the end so the
    task's retry sends only it."""
    alert, sent, errors = RetireHeldAlert(hold, run_id), 0, []
    for channel in channels:
        marker = ArtifactKeys.retire_held_marker(hold.fingerprint, channel)
        if ctx.store.exists(ctx.artifacts, marker):
            continue
        try:
            send(channel, alert.subject, alert.html(), alert.slack())
        except Exception as exc:  # noqa: BLE001 - the other channels still go out
            log.error("retire guard alert on %s failed: %s", channel, exc)
            errors.append(f"{channel}: {exc}")
            continue
        mark_alerted(ctx, marker, run_id)
        sent += 1
    if errors:
        raise RuntimeError(f"{len(errors)} retire guard alert(s) not sent; the retry sends only those: {errors}")
    return sent
