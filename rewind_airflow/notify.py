"""Alerts through Airflow's own notifiers: a task callback that sends a stream's events to its notifier.

Why a callback and not a task: Airflow runs a task's ``on_failure_callback`` / ``on_success_callback``
in the task's own process with the exception in the context, whatever failed the task; a notifier
(``airflow.sdk.BaseNotifier``: SMTP, Slack, PagerDuty providers' notifiers, or one's own) is such a
callback. ``RewindAlerts`` decides with ``rewind.alerts`` whether the outcome is an event the
stream's ``alerts.on`` subscribes, then builds the registry's notifier and calls it.

What the notifier gets: its registry arguments, and for each of its usual message fields left
unset (``subject``, ``html_content``, ``text``, ``message``, ``summary``) a template over
``rewind_alert``, which is put into the context: ``{{ rewind_alert.stream }}``, ``.event``,
``.cause``, ``.detail``, ``.subject``, ``.text``, ``.html``, ``.page_url``, ``.log_url``. Templates in
the registry may use the same names. Values are passed as variables, never as template text, so an
exception message with ``{{`` in it is shown, not evaluated.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import time
from dataclasses import asdict
from typing import Any

log = logging.getLogger(__name__)

#: The notifier's message field -> the attribute of ``rewind_alert`` it shows.
MESSAGE_FIELDS = {"subject": "subject", "html_content": "html", "text": "text", "message": "text",
                  "summary": "subject"}


def notifier_class(path: str) -> type:
    """The notifier class at ``path`` (``module.Class``); an error naming what to install or fix."""
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"alerts.notifier.class {path!r} cannot be imported ({exc}): install the provider that "
                         "ships it (e.g. apache-airflow-providers-slack) or fix the class path") from None
    if not callable(cls):
        raise ValueError(f"alerts.notifier.class {path!r} is not a notifier class")
    return cls


def notifier_for(cls: type, args: dict[str, Any]) -> Any:
    """An instance of ``cls`` with ``args``, its unset message fields templated over ``rewind_alert``."""
    params = inspect.signature(cls).parameters
    filled = dict(args)
    for field, attr in MESSAGE_FIELDS.items():
        if field in params and filled.get(field) is None:
            filled[field] = "{{ rewind_alert." + attr + " }}"
    return cls(**filled)


def page_url(configured: str | None) -> str:
    """The Rewind page: the registry's ``alerts.page_url``, else Airflow's ``[api] base_url`` + ``/rewind/``."""
    if configured:
        return configured
    try:
        from airflow.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # noqa: BLE001 - no configuration: no link
        base = ""
    return f"{base}/rewind/" if base else ""


class RewindAlerts:
    """A task callback: send the task's outcome to the stream's notifier when it is a subscribed event.

    :param role: the DAG's role (``supervisor``, ``savepoint``, ``dq``, ``replay``)
    :param registry: the registry file the DAGs were built from
    :param stream: the stream; None for the replay DAG (the run's ``stream`` parameter names it)
    :param state: ``failed`` (as ``on_failure_callback``) or ``success`` (as ``on_success_callback``)
    """

    def __init__(self, role: str, registry: str, stream: str | None = None, state: str = "failed") -> None:
        self.role, self.registry, self.stream, self.state = role, registry, stream, state

    def __call__(self, context: Any) -> None:
        try:
            self.send(context)
        except Exception:  # noqa: BLE001 - an alert that cannot be sent must not hide the task's own outcome
            log.exception("Rewind: the alert for %s could not be sent", self.stream or "a replay")

    def send(self, context: Any) -> Any:
        """Decide and send; returns the ``rewind.alerts.Alert`` sent, or None."""
        from rewind.alerts import TaskOutcome, alert_for
        from rewind.registry import load_registry
        from rewind.supervision.failures import read_failures

        stream = self.stream or (context.get("params") or {}).get("stream")
        if not stream:
            return None
        spec = load_registry(self.registry).get(str(stream))
        if spec.alerts is None:
            return None
        ti = context.get("ti")
        started = getattr(ti, "start_date", None)
        outcome = TaskOutcome(spec.name, self.role, getattr(ti, "task_id", ""), self.state,
                              str(context.get("exception") or ""),
                              started.timestamp() if started is not None else 0.0, read_failures(spec))
        dag_run = context.get("dag_run")
        alert = alert_for(outcome, spec.alerts.on, time.time(), dag_id=getattr(ti, "dag_id", ""),
                          run_id=str(getattr(dag_run, "run_id", "") or getattr(ti, "run_id", "")),
                          page_url=page_url(spec.alerts.page_url), log_url=str(getattr(ti, "log_url", "") or ""))
        if alert is None:
            return None
        notifier = notifier_for(notifier_class(spec.alerts.notifier_class()), spec.alerts.notifier_args())
        context["rewind_alert"] = {**asdict(alert), "subject": alert.subject(), "text": alert.text(),
                                   "html": alert.html()}
        log.warning("Rewind alert: %s", alert.subject())
        notifier(context)
        return alert


def alert_callbacks(spec: Any, role: str, registry: str) -> dict[str, Any]:
    """``default_args`` for a stream's DAG: its failures go to ``RewindAlerts`` (nothing without ``alerts``).

    The notifier class is imported here, when the DAGs are built, so a class that is missing shows as
    the DAG file's import error naming it, not as an alert that silently never arrives."""
    if spec is None or spec.alerts is None:
        return {}
    notifier_class(spec.alerts.notifier_class())
    return {"on_failure_callback": [RewindAlerts(role, registry, spec.name)]}
