"""Alerts: a failed run, a backup not complete by its deadline, a restore drill over its RTO budget.

One notifier, `Alert`, sends through the providers' own notifiers to where an Airflow connection says
(LASTLINE_ALERT_CONN_ID, default `lastline_alerts`):

- a webhook: a connection of type `http` (host `https://hooks.example.com/...`, or host + schema + port), sent by
  the HTTP provider's `HttpNotifier`: a JSON POST `{"text": ..., "event": ..., "dag_id": ..., "run_id": ...}`
  (Slack's and Mattermost's incoming webhooks read "text"); the connection's extras are sent as headers (the
  provider's convention: e.g. an Authorization header);
- mail: a connection of type `smtp` (host, port, login, password; the SMTP provider's extras `from_email`,
  `disable_ssl`, `disable_tls`, `timeout`), sent by the SMTP provider's `SmtpNotifier`, to the extra `to` (a list
  or a comma-separated string).

No such connection: the alert is logged as a warning and nothing else happens (alerts are optional).
The same class runs in the dag-processor (`on_failure_callback`), in `airflow dags test`'s own process (which
hands it the serialized DAG: its message is rendered without the DAG's template settings there) and, awaited, in
the triggerer (a `DeadlineAlert`'s callback). A failed run's alert names the failed task and its reason, as the
task that failed the run (the callback's task instance) recorded them for its last try
(lastline.airflow.failures).
"""
from __future__ import annotations

import asyncio
import html
import json
import logging
import os
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseNotifier, Connection
from airflow.sdk.definitions.callback import AsyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

from lastline.airflow import failures
from lastline.core import alerting

log = logging.getLogger(__name__)
ALERT_CONN_ID = os.environ.get("LASTLINE_ALERT_CONN_ID", "lastline_alerts")  # (defaults imports this module)


def _recipients(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value or []]


def send(event: str, text: str, details: dict[str, Any], conn_id: str = ALERT_CONN_ID) -> str:
    """Send one alert where `conn_id` says, through the provider's notifier; returns where it went ("" when there is
    no such connection, or when sending failed: an alert never fails the task or callback that sends it, and what
    failed is logged by the connection's id and the error's kind only, never a URL or a header that may hold a
    token)."""
    try:
        conn = Connection.get(conn_id)
    except Exception:  # noqa: BLE001 - the SDK raises several types for "not found"
        log.warning("ALERT (%s; no connection %r to send it to): %s", event, conn_id, text)
        return ""
    try:
        return _send(conn, event, text, details, conn_id)
    except Exception as exc:  # noqa: BLE001 - whatever the provider raises: the alert is lost, the work is not
        log.warning("ALERT (%s) could not be sent through connection %r (%s; check the connection): %s", event, conn_id,
                    type(exc).__name__, text)
        return ""


alerting.install(send)  # alerts raised below this layer (a resumed replica, ...) go where this deployment says


def _send(conn: Any, event: str, text: str, details: dict[str, Any], conn_id: str) -> str:
    if conn.conn_type in ("smtp", "email"):
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        to = _recipients((conn.extra_dejson or {}).get("to"))
        if not to:
            raise ValueError(f"connection {conn_id!r} (mail) has no 'to' in its extras")
        page = f"<p>{html.escape(text)}</p><pre>{html.escape(json.dumps(details, indent=2, default=str))}</pre>"
        SmtpNotifier(to=to, subject=f"[lastline] {text.splitlines()[0][:150]}", html_content=page,
                     smtp_conn_id=conn_id).notify({})
        return f"mail to {', '.join(to)}"
    from airflow.providers.http.notifications.http import HttpNotifier

    body = json.loads(json.dumps({"text": text, "event": event, **details}, default=str))  # times and the like as text
    timeout = (conn.extra_dejson or {}).get("timeout", 30)  # the provider's requests wait forever without one
    HttpNotifier(http_conn_id=conn_id, json=body, extra_options={"timeout": timeout}).notify({})
    return f"webhook {conn_id}"


class Alert(BaseNotifier):
    """A notifier for lastline's DAGs: `on_failure_callback=Alert("failed")`, or a DeadlineAlert's callback."""

    template_fields = ("message",)

    def __init__(self, event: str = "failed", message: str = "", conn_id: str = ALERT_CONN_ID, context: Any = None,
                 **details: Any) -> None:
        super().__init__(context)  # the triggerer passes a deadline's context here, then awaits the notifier
        self.event, self.message, self.conn_id, self.details = event, message, conn_id, details

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """The message rendered with the DAG's template settings where the DAG has them; `dags test` passes the
        serialized DAG, which has none: a plain sandboxed environment then (the message uses no DAG setting)."""
        dag = context.get("dag") if hasattr(context, "get") else None
        if jinja_env is None and dag is not None and not hasattr(dag, "get_template_env"):
            jinja_env = self.get_template_env(dag=None)
        super().render_template_fields(context, jinja_env)

    def _details(self, context: Any) -> dict[str, Any]:
        context = context or {}
        run = context.get("dag_run")
        out = dict(self.details)
        if isinstance(run, dict):  # a deadline's context holds the run as its API form
            out.update(dag_id=run.get("dag_id"), run_id=run.get("dag_run_id") or run.get("run_id"),
                       state=str(run.get("state", "")))
        elif run is not None:
            out.update(dag_id=getattr(run, "dag_id", None), run_id=getattr(run, "run_id", None),
                       state=str(getattr(run, "state", "")))
        ti = context.get("ti") or context.get("task_instance")
        if ti is not None:
            out["task_id"] = getattr(ti, "task_id", None)
        reason = context.get("reason")
        if reason:
            out["reason"] = str(reason)
        if self.event == "failed" and out.get("dag_id") and out.get("run_id") and ti is not None:
            index = getattr(ti, "map_index", -1)
            said = failures.recorded(str(out["dag_id"]), str(out["run_id"]), str(ti.task_id),
                                     -1 if index is None else int(index))
            tries = getattr(ti, "try_number", None)
            if said and said.get("reason") and (not tries or said.get("tries") in (None, tries)):
                # what the failed task said in this try, not the scheduler's "task_failure"
                out.update(reason=said["reason"], what_to_do=said.get("what_to_do", ""), log=said.get("log", ""))
        return out

    def _text(self, details: dict[str, Any]) -> str:
        if self.message:
            return self.message
        what = f"{details.get('dag_id', '?')} run {details.get('run_id', '?')}"
        if self.event == "failed":
            task = f" (task {details['task_id']})" if details.get("task_id") else ""
            if details.get("what_to_do"):
                return f"lastline: {what} failed{task}: {details['reason']}\n{details['what_to_do']}"
            return f"lastline: {what} failed{task}: open its log in Airflow; each step is safe to re-run"
        return f"lastline: {what}: {self.event}"

    def notify(self, context: Any) -> None:
        details = self._details(context)
        where = send(self.event, self._text(details), details, self.conn_id)
        if where:
            log.info("alert %s sent: %s", self.event, where)

    async def async_notify(self, context: Any) -> None:
        await asyncio.to_thread(self.notify, context)


def backup_deadline() -> DeadlineAlert | None:
    """The nightly backups' deadline: a run not complete LASTLINE_BACKUP_DEADLINE_MINUTES (default 240)
    after it was queued alerts (0 turns it off)."""
    minutes = float(os.environ.get("LASTLINE_BACKUP_DEADLINE_MINUTES", "240"))
    if minutes <= 0:
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(minutes=minutes),
        callback=AsyncCallback(Alert, kwargs={"event": "deadline_missed",
                                              "message": f"lastline: a backup was not complete {minutes:g} minutes after it "
                                                         "was queued; look at its run in Airflow",
                                              "deadline_minutes": minutes}),
    )
