"""Which task outcomes are alerts, and what an alert says: pure decisions over plain data.

Why: a red DAG run is an alert only to someone looking at Airflow. A stream's registry entry (or
the registry's top-level ``alerts:``) names the events someone must be told of and an Airflow
notifier to tell them through (``rewind.registry.AlertsSpec``); ``rewind_airflow.notify`` attaches
it to the DAGs' tasks and sends what this module composes. No Airflow here: the events are decided
from the task's outcome and the supervisor's memory (``<stream>.failures.json``).

| event | when |
|---|---|
| ``crash_loop`` | a supervisor task fails and its give-up verdict stands (the restart strategy gave up, or a |
| | launch is refused until ``rewind supervisor reset``) |
| ``recovery`` | the supervisor's ``relaunch`` succeeds: the stream committed a batch again after a failure |
| ``proof_failed`` | a DQ proof task fails (the DQ DAG's ``proof``, the supervisor's ``prove``) |
| ``replay_failed`` | a task of the replay DAG fails (a refused plan, a failed job, a failed proof of the range) |
| ``lag`` | the supervisor's watch raised a lag alert (``supervision.max_lag``) |
| ``savepoint_failed`` | a task of the savepoint DAG fails (a savepoint, retention, a restore) |
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

EVENTS = ("crash_loop", "recovery", "proof_failed", "replay_failed", "lag", "savepoint_failed")
#: DAG roles, as ``rewind.paths.dag_ids`` names a stream's DAGs.
ROLES = ("supervisor", "savepoint", "dq", "replay")
PROOF_TASKS = ("proof", "prove")
#: supervisor tasks whose failure, with a give-up verdict standing, is the crash loop
CRASH_LOOP_TASKS = ("launch", "relaunch", "diagnose", "recover_checkpoint")
DETAIL_CHARS = 3000


@dataclass(frozen=True)
class TaskOutcome:
    """One finished task as an alert sees it (gathered by the Airflow callback)."""

    stream: str
    role: str          # one of ROLES
    task_id: str
    state: str         # "failed" or "success"
    error: str = ""    # the exception's text, for a failure
    started_at: float = 0.0
    failures: dict[str, Any] = field(default_factory=dict)  # rewind.supervision.failures.read_failures()


@dataclass(frozen=True)
class Alert:
    """What a notifier is handed: the stream, the event, its cause, the details and where to look."""

    stream: str
    event: str
    cause: str
    detail: str
    at: float
    dag_id: str = ""
    run_id: str = ""
    task_id: str = ""
    page_url: str = ""
    log_url: str = ""

    def subject(self) -> str:
        return f"[rewind] {self.stream}: {self.event.replace('_', ' ')}: {self.cause}"[:250]

    def text(self) -> str:
        when = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines = [self.subject(), "", f"stream:  {self.stream}", f"event:   {self.event}", f"cause:   {self.cause}",
                 f"when:    {when}", f"task:    {self.dag_id} / {self.task_id} (run {self.run_id})"]
        if self.page_url:
            lines.append(f"Rewind page: {self.page_url}")
        if self.log_url:
            lines.append(f"task log:    {self.log_url}")
        return "\n".join([*lines, "", self.detail])

    def html(self) -> str:
        link = (f'<p><a href="{html.escape(self.page_url)}">Open the Rewind page</a></p>' if self.page_url else "")
        log = f'<p><a href="{html.escape(self.log_url)}">Task log</a></p>' if self.log_url else ""
        return (f"<h3>{html.escape(self.subject())}</h3>{link}{log}"
                f"<pre>{html.escape(self.text())}</pre>")


def event_of(outcome: TaskOutcome) -> tuple[str, str] | None:
    """``(event, cause)`` for a task outcome that is an alert, else None."""
    gave_up = outcome.failures.get("gave_up")
    if outcome.state == "success":
        if outcome.role == "supervisor" and outcome.task_id == "relaunch":
            last = (outcome.failures.get("failures") or [{}])[-1]
            return "recovery", f"recovered after {last.get('cause') or 'a failure'}"
        return None
    if outcome.state != "failed":
        return None
    if outcome.role == "supervisor":
        if outcome.task_id in PROOF_TASKS:
            return "proof_failed", "the DQ proof after a recovery failed"
        if gave_up and outcome.task_id in CRASH_LOOP_TASKS:
            return "crash_loop", str(gave_up.get("reason") or "the supervisor gave up")[:200]
        lag = [a for a in outcome.failures.get("alerts") or [] if a.get("at", 0) >= outcome.started_at - 1.0]
        if outcome.task_id == "diagnose" and lag:
            return "lag", str(lag[-1].get("cause") or "lag")
        return None
    if outcome.role == "dq" and outcome.task_id in PROOF_TASKS:
        return "proof_failed", "the DQ proof failed"
    if outcome.role == "replay":
        return "replay_failed", f"the replay's {outcome.task_id} task failed"
    if outcome.role == "savepoint":
        return "savepoint_failed", f"the savepoint DAG's {outcome.task_id} task failed"
    return None


def alert_for(outcome: TaskOutcome, subscribed: Sequence[str], at: float, **where: str) -> Alert | None:
    """The alert to send for ``outcome``, or None when it is no event or not one of ``subscribed``.

    ``where``: ``dag_id``, ``run_id``, ``page_url``, ``log_url`` (the caller knows them)."""
    found = event_of(outcome)
    if found is None or found[0] not in subscribed:
        return None
    event, cause = found
    detail = outcome.error.strip() or cause
    return Alert(outcome.stream, event, cause, detail[:DETAIL_CHARS], at, task_id=outcome.task_id, **where)


def message_fields(alert: Alert) -> dict[str, str]:
    """What a notifier's usual message fields are given, where its registry entry leaves them unset
    (SMTP: subject and html_content; Slack: text; PagerDuty: summary; others: message)."""
    return {"subject": alert.subject(), "html_content": alert.html(), "text": alert.text(),
            "message": alert.text(), "summary": alert.subject()}
