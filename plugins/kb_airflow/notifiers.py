"""Notifiers for the ops team: e-mail through the SMTP provider's notifier and a
Slack-compatible webhook, each configured by an Airflow connection.

Connections (ids from ``AlertSettings``):
- ``kb_alerts_smtp``: an SMTP connection (host, port, login, password; extra
  ``from_email``, ``disable_tls``, ``disable_ssl``), as the SMTP provider documents it.
- ``kb_alerts_webhook``: host is the webhook's base URL (``https://hooks.slack.com/services``),
  password its secret path (``T000/B000/XXXX``); the two are joined with a ``/``.
A channel whose connection does not exist is skipped with a warning: a local stack
without alerting still runs.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from airflow.sdk import BaseHook, BaseNotifier
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowSecretsBackendAccessDenied

from kb import channels
from kb.settings import AlertSettings

log = logging.getLogger(__name__)

EMAIL, WEBHOOK = "email", "webhook"


def webhook_url(conn) -> str:
    host = str(conn.host or "").rstrip("/")
    if "://" not in host:
        host = f"{conn.schema or 'https'}://{host}" + (f":{conn.port}" if conn.port else "")
    return f"{host}/{conn.password.lstrip('/')}" if conn.password else host


class WebhookNotifier(BaseNotifier):
    """POST a Slack-compatible JSON body (``{"text": ...}`` at least) to the webhook."""

    template_fields = ("text",)

    def __init__(self, webhook_conn_id: str, *, text: str | None = None, payload: dict[str, Any] | None = None,
                 timeout_s: float = 10.0) -> None:
        super().__init__()
        self.webhook_conn_id = webhook_conn_id
        self.text = text
        self.payload = payload
        self.timeout_s = timeout_s

    def notify(self, context) -> None:
        conn = BaseHook.get_connection(self.webhook_conn_id)
        body = self.payload if self.payload is not None else {"text": self.text}
        response = httpx.post(webhook_url(conn), json=body, timeout=self.timeout_s)
        if response.status_code >= 300:
            # The URL holds the secret: name the connection, never the URL.
            raise RuntimeError(f"webhook {self.webhook_conn_id!r} answered {response.status_code}")


def configured_channels(settings: AlertSettings | None = None) -> list[str]:
    s = settings or AlertSettings()
    channels = []
    for channel, conn_id in ((EMAIL, s.smtp_conn_id), (WEBHOOK, s.webhook_conn_id)):
        try:
            BaseHook.get_connection(conn_id)
            channels.append(channel)
        except AirflowNotFoundException:
            log.warning("alert channel %s is not configured (no connection %r)", channel, conn_id)
        except AirflowSecretsBackendAccessDenied:
            # Airflow 3.3's deadline callbacks run on the executor with a token the Execution API
            # refuses for connections; only those set as AIRFLOW_CONN_* on the worker (as compose
            # and `kb up` do) resolve there. A connection missing from the environment ends here.
            log.warning("alert channel %s is not configured here (connection %r is not in this process's "
                        "environment, and Airflow refuses this process the Execution API)", channel, conn_id)
    return channels


def send(channel: str, subject: str, html: str, payload: dict[str, Any], context,
         settings: AlertSettings | None = None) -> None:
    s = settings or AlertSettings()
    if channel == EMAIL:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        # subject and body are set, so the notifier renders no template over document text
        SmtpNotifier(to=s.email_to, from_email=s.email_from, subject=subject, html_content=html,
                     smtp_conn_id=s.smtp_conn_id).notify(context)
    elif channel == WEBHOOK:
        WebhookNotifier(s.webhook_conn_id, payload=payload, timeout_s=s.webhook_timeout_s).notify(context)
    else:
        raise ValueError(f"unknown alert channel {channel!r}")


def send_document_alerts(ctx, results, context, run_id: str) -> dict[str, int]:
    """One alert per document version and event (quarantined, indexed without some pages)
    on every configured channel. ``ctx`` is a ``kb.pipeline.Context``; ``results`` are
    ``DocumentResult``s. A channel that fails is retried by the task; channels already
    sent are not repeated.
    """
    from kb.pipeline.alerts import deliver, mark_alerted, pending_alerts

    channels = configured_channels()
    sent, errors = 0, []
    for item in pending_alerts(ctx, results, channels):
        done = deliver(item.alert, item.markers, lambda *message: send(*message, context),
                       lambda channel, markers=item.markers: mark_alerted(ctx, markers[channel], run_id))
        sent += len(done.sent)
        errors += [f"{item.alert.key} on {channel}: {exc}" for channel, exc in done.failed.items()]
    if errors:
        raise RuntimeError(f"{len(errors)} alert(s) not sent; the retry sends only those: {errors[:3]}")
    return {"sent": sent, "channels": len(channels)}


class AlreadyAlerted(AirflowFailException):
    """Fails a task, with no retry, because an upstream task failed for good and has alerted
    already: the failure decides the run's state, and ``TaskFailureNotifier`` sends nothing
    for it, so ops hear of one cause once."""


class TaskFailureNotifier(BaseNotifier):
    """``on_failure_callback``: Airflow calls it once, when a task has failed for good
    (retries go to ``on_retry_callback``, which this project leaves unset)."""

    def notify(self, context) -> None:
        ti = context.get("ti") or context.get("task_instance")
        dag_run = context.get("dag_run")
        exc = context.get("exception")
        if isinstance(exc, AlreadyAlerted):
            log.info("no failure alert for %s: %s", getattr(ti, "task_id", "?"), exc)
            return
        dag_id = getattr(ti, "dag_id", "?")
        task = getattr(ti, "task_id", "?") + (f"[{ti.map_index}]" if getattr(ti, "map_index", -1) not in (-1, None) else "")
        tries = getattr(ti, "try_number", "?")
        run_id = getattr(dag_run, "run_id", None) or context.get("run_id", "?")
        subject = f"[kb] task {dag_id}.{task} failed after {tries} tries"
        lines = [f"Task: {dag_id}.{task}", f"Run: {run_id}", f"Tries: {tries}",
                 f"Error: {type(exc).__name__ + ': ' if exc else ''}{exc}"]
        if getattr(ti, "log_url", None):
            lines.append(f"Log: {ti.log_url}")
        body = channels.html_body(subject, lines)
        payload = channels.slack_payload(subject, lines, {"dag_id": dag_id, "task": task, "run_id": run_id,
                                                          "tries": tries, "error": str(exc)})
        for channel in configured_channels():
            try:
                send(channel, subject, body, payload, context)
            except Exception as err:  # noqa: BLE001 - a callback must not hide the task's own failure
                log.error("failure alert on %s failed: %s", channel, err)
