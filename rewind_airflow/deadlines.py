"""Late savepoint and DQ runs through Airflow's Deadline Alerts, told by the stream's own notifier.

Why Airflow's deadlines and not a watcher of Rewind's: the scheduler already knows when a run was
queued and whether it ended, and calls back once per run whose deadline passes (Airflow 3.1+,
``DeadlineAlert`` on the DAG). Each run gets a deadline when it is queued
(``DeadlineReference.DAGRUN_QUEUED_AT``, also for runs triggered by hand, whose logical date may be
empty): the savepoint DAG's is ``savepoints.deadline``, by default the schedule's interval (a run
not done before the next is due); the DQ DAG's is its hour.

The callback is an ``AsyncCallback``: it runs in the triggerer, which every Rewind deployment runs
(the supervisor's watch defers to it), whatever the executor. It decides with ``rewind.alerts``
(``late_alert``: a run that ended before its deadline is not late; Airflow drops the deadline of a
run that succeeds in time but keeps that of one that fails, whose failure alert has told already),
then builds the registry's notifier as ``rewind_airflow.notify`` does and awaits it (its
``async_notify``, e.g. SMTP's; a notifier with only ``notify`` runs in a thread).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from rewind.alerts import LATE_EVENTS, MissedDeadline, schedule_interval

log = logging.getLogger(__name__)


def savepoint_deadline(spec: Any) -> timedelta | None:
    """How long a savepoint run may take: ``savepoints.deadline``, else the schedule's interval."""
    from rewind.registry import parse_duration

    if spec.savepoints.deadline:
        return parse_duration(spec.savepoints.deadline)
    return schedule_interval(spec.savepoints.airflow_schedule())


def deadline_alerts(spec: Any, role: str, registry: str, interval: timedelta | None) -> list[Any] | None:
    """The ``deadline`` of a stream's DAG of ``role``: None (the DAG as without deadlines) without ``alerts``,
    without the role's late event in ``alerts.on`` (asked again when it fires: the registry may change)
    or without an interval."""
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    if spec.alerts is None or interval is None or LATE_EVENTS[role][0] not in spec.alerts.on:
        return None
    callback = AsyncCallback(notify_missed_deadline, kwargs={"role": role, "registry": registry, "stream": spec.name})
    return [DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=interval, callback=callback,
                          name=f"rewind {LATE_EVENTS[role][0]}")]


def _epoch(value: Any) -> float | None:
    """An Airflow time (a datetime, or ISO text from a serialized run) as epoch seconds."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return float(value.timestamp())


def missed_deadline(stream: str, role: str, context: dict[str, Any]) -> MissedDeadline:
    """What Airflow's deadline context says (``dag_run``: the run as its REST API shows it; ``deadline``)."""
    run = context.get("dag_run") or {}
    deadline_at = _epoch((context.get("deadline") or {}).get("deadline_time")) or time.time()
    conf = run.get("conf") or {}
    return MissedDeadline(stream, role, str(run.get("dag_run_id") or ""), str(run.get("state") or "unknown"),
                          _epoch(run.get("queued_at")) or deadline_at, deadline_at, _epoch(run.get("end_date")),
                          restore=role == "savepoint" and conf.get("action") == "restore")


def run_url(dag_id: str, run_id: str) -> str:
    """The run in Airflow's UI (``[api] base_url``), or empty without one."""
    from urllib.parse import quote

    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return f"{base}/dags/{quote(dag_id)}/runs/{quote(run_id)}" if base and dag_id and run_id else ""


async def notify_missed_deadline(role: str, registry: str, stream: str, context: dict[str, Any] | None = None) -> str:
    """Airflow's callback for a missed deadline: send the late run to the stream's notifier when its
    ``alerts.on`` has the event. Returns what was done (Airflow keeps it with the callback)."""
    from airflow.sdk import BaseNotifier

    from rewind.alerts import late_alert
    from rewind.registry import load_registry
    from rewind_airflow.notify import notifier_class, notifier_for, page_url

    context = dict(context or {})
    spec = (await asyncio.to_thread(load_registry, registry)).get(stream)
    missed = missed_deadline(spec.name, role, context)
    if spec.alerts is None:
        return f"{stream} has no alerts"
    dag_id = str((context.get("dag_run") or {}).get("dag_id") or "")
    alert = late_alert(missed, spec.alerts.on, time.time(), dag_id=dag_id, page_url=page_url(spec.alerts.page_url),
                       log_url=run_url(dag_id, missed.run_id))
    if alert is None:
        return f"{stream}: run {missed.run_id} ({missed.state}) is no subscribed late event"
    notifier = notifier_for(notifier_class(spec.alerts.notifier_class()), spec.alerts.notifier_args())
    context["rewind_alert"] = {**asdict(alert), "subject": alert.subject(), "text": alert.text(), "html": alert.html()}
    log.warning("Rewind alert: %s", alert.subject())
    if isinstance(notifier, BaseNotifier) and type(notifier).async_notify is not BaseNotifier.async_notify:
        notifier.context = context  # type: ignore[assignment]  # awaited, a notifier reads it as an attribute
        await notifier
    else:
        await asyncio.to_thread(notifier, context)
    return alert.subject()
