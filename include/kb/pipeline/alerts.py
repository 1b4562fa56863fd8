"""Which alerts a run owes the ops team: one per document version and event, per channel.

Events: a version quarantined (bad input, a failed gate, a refusal by the OCR service),
or indexed without some pages; a run whose deletions the retire guard held; and a run past
the searchable-within promise (Airflow's deadline alert on kb_ingest). Markers under
``alerts/`` make the sending exactly once: a retried alert task, or a later run that meets
the same version (or the same held documents) again, sends nothing twice. Every alert goes
out through ``deliver``: one message, each channel once, a failed channel not stopping the others.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Protocol

from kb import channels
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


class Message(Protocol):
    """What every alert gives the channels: a subject, an HTML body (mail), a webhook payload."""

    @property
    def subject(self) -> str: ...

    def html(self) -> str: ...

    def slack(self) -> dict[str, Any]: ...


@dataclass
class Delivery:
    sent: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # channel -> error


def deliver(message: Message, channels: Iterable[str], send: Send,
            on_sent: Callable[[str], None] | None = None) -> Delivery:
    """Send ``message`` once on each channel; ``on_sent(channel)`` right after each one that went
    out (where the caller writes its marker). A channel that fails is logged and does not stop
    the others; the caller decides what a failure means (a task raises, so its retry sends
    only those)."""
    done = Delivery()
    for channel in channels:
        try:
            send(channel, message.subject, message.html(), message.slack())
        except Exception as exc:  # noqa: BLE001 - the other channels still go out
            log.error("alert %r on %s failed: %s", message.subject, channel, exc)
            done.failed[channel] = str(exc)
            continue
        if on_sent is not None:
            on_sent(channel)
        done.sent.append(channel)
    return done


class LinesMessage:
    """A run-level alert written as a subject and lines: the mail lists the lines, the webhook
    posts them as one Slack section, with ``payload()`` under ``kb`` for machines. A subclass
    gives ``subject``, ``lines`` and ``payload``."""

    def lines(self) -> list[str]:
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        raise NotImplementedError

    def html(self) -> str:
        return channels.html_body(self.subject, self.lines())

    def slack(self) -> dict[str, Any]:
        return channels.slack_payload(self.subject, self.lines(), self.payload())


@dataclass
class RetireHeldAlert(LinesMessage):
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

    def payload(self) -> dict[str, Any]:
        return {"event": AlertEvent.RETIRE_HELD.value, "run_id": self.run_id, **self.hold.as_dict()}


def send_retire_held_alert(ctx: Context, hold: RetireHold, channels: list[str], send: Send, run_id: str) -> int:
    """One alert per held set of documents on each channel not yet sent; returns how many
    went out. A channel that fails does not stop the others, and raises at the end so the
    task's retry sends only it."""
    markers = {c: ArtifactKeys.retire_held_marker(hold.fingerprint, c) for c in channels}
    todo = [c for c, m in markers.items() if not ctx.store.exists(ctx.artifacts, m)]
    done = deliver(RetireHeldAlert(hold, run_id), todo, send, lambda c: mark_alerted(ctx, markers[c], run_id))
    if done.failed:
        errors = [f"{c}: {e}" for c, e in done.failed.items()]
        raise RuntimeError(f"{len(errors)} retire guard alert(s) not sent; the retry sends only those: {errors}")
    return len(done.sent)


@dataclass
class DeadlineMissed(LinesMessage):
    """A run of the ingest DAG still unfinished past the searchable-within promise
    (``KB_SEARCHABLE_WITHIN_S``, counted from when the run was queued). Times are ISO 8601 UTC;
    nothing here is a secret (no connection, no document text)."""

    dag_id: str
    run_id: str
    promise_s: float
    queued_at: str | None
    start_date: str | None
    deadline_time: str | None
    missed_at: str
    running_s: float | None  # seconds from queued_at to missed_at
    state: str | None  # the run's state when the miss was handled
    prefix: str | None  # the run's `prefix` param, where it had one

    @property
    def subject(self) -> str:
        return (f"[kb] {self.dag_id} run {self.run_id} missed its promise: "
                f"not done {self.promise_s:.0f} s after it was queued")

    def lines(self) -> list[str]:
        out = [f"Run: {self.dag_id} {self.run_id} ({self.state or 'state unknown'})",
               f"Promise: searchable within {self.promise_s:.0f} s of landing (KB_SEARCHABLE_WITHIN_S), "
               "counted from when the run was queued",
               f"Queued at: {self.queued_at}; started at: {self.start_date}; deadline: {self.deadline_time}"]
        if self.running_s is not None:
            out.append(f"Going for: {self.running_s:.0f} s at {self.missed_at}")
        if self.prefix:
            out.append(f"Prefix: {self.prefix}")
        out.append("Documents this run picked up are not searchable yet. Look at the run in Airflow: a task "
                   "waiting on the gpu_ocr pool or the OCR service, or retries, is the usual cause.")
        return out

    def payload(self) -> dict[str, Any]:
        return {"event": AlertEvent.DEADLINE_MISSED.value, **self.as_dict()}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def send_deadline_alert(ctx: Context, missed: DeadlineMissed, channels: list[str], send: Send) -> Delivery:
    """Record the miss under ``alerts/deadline-missed/<run>.json``, then alert once on each channel
    and add what went out to the record. The record comes first, so a channel that hangs or
    fails (or none configured) still leaves the miss on file; a failed channel raises at the end."""
    key = ArtifactKeys.deadline_alert(missed.run_id)
    record = {"event": AlertEvent.DEADLINE_MISSED.value, **missed.as_dict(), "channels": list(channels)}
    ctx.store.put_json(ctx.artifacts, key, record)
    if not channels:
        log.warning("deadline missed by run %s, and no alert channel is configured: the record %s is all "
                    "there is", missed.run_id, key)
        return Delivery()
    done = deliver(missed, channels, send)
    ctx.store.put_json(ctx.artifacts, key, {**record, "sent": done.sent, "failed": sorted(done.failed)})
    if done.failed:
        raise RuntimeError(f"deadline alert for run {missed.run_id} not sent on {sorted(done.failed)}")
    return done
