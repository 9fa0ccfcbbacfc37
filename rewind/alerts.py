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
| ``asset_drift`` | the supervisor's watch found a table's Asset events behind its committed batches: the oldest |
| | one not announced is older than two ``assets.interval`` (``rewind.assets.drift``; no watcher: never) |
| ``savepoint_failed`` | a task of the savepoint DAG fails (a savepoint, retention, a restore) |
| ``savepoint_late`` | a savepoint DAG run has not finished within its deadline after it was queued (Airflow's |
| | Deadline Alerts; ``savepoints.deadline``, default the schedule's interval: before the next one is due) |
| ``proof_late`` | a DQ DAG run (hourly) has not finished within the hour after it was due |

A late run that fails later is two events (late, then failed): both are true. A run that ends
before its deadline is never late: Airflow keeps the deadline of a run that *failed* in time and
calls back when it passes (it drops it only on success), so ``late_event`` refuses a run that
ended in time, which its ``*_failed`` alert has told already.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

#: The events a registry's ``alerts.on`` may name (``rewind.registry.AlertsSpec`` validates against it).
AlertEvent = Literal["crash_loop", "recovery", "proof_failed", "replay_failed", "lag", "asset_drift",
                     "savepoint_failed", "savepoint_late", "proof_late"]
EVENTS: tuple[AlertEvent, ...] = get_args(AlertEvent)
#: The cause the watch records an Asset drift alert under (``rewind.supervision.failures.record_alert``).
ASSET_DRIFT = "asset_drift"
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
                 f"when:    {when}", f"task:    {self.dag_id} / {self.task_id} (run {self.run_id})" if self.task_id
                 else f"run:     {self.dag_id} (run {self.run_id})"]
        if self.page_url:
            lines.append(f"Rewind page: {self.page_url}")
        if self.log_url:
            lines.append(f"task log:    {self.log_url}" if self.task_id else f"Airflow run: {self.log_url}")
        return "\n".join([*lines, "", self.detail])

    def html(self) -> str:
        link = (f'<p><a href="{html.escape(self.page_url)}">Open the Rewind page</a></p>' if self.page_url else "")
        label = "Task log" if self.task_id else "The run in Airflow"
        log = f'<p><a href="{html.escape(self.log_url)}">{label}</a></p>' if self.log_url else ""
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
        raised = [a for a in outcome.failures.get("alerts") or [] if a.get("at", 0) >= outcome.started_at - 1.0]
        if outcome.task_id == "diagnose" and raised:  # the watch's alert, recorded by this task
            if raised[-1].get("cause") == ASSET_DRIFT:
                detail = str(raised[-1].get("detail") or "").strip() or "Asset events behind"
                return ASSET_DRIFT, detail.splitlines()[0][:200]
            return "lag", str(raised[-1].get("cause") or "lag")
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


# --------------------------------------------------------------------------- late runs (Airflow's Deadline Alerts)
#: A preset's interval; the calendar ones by their shortest period, so a run is late before the next is due.
PRESET_INTERVALS = {"@hourly": timedelta(hours=1), "@daily": timedelta(days=1), "@weekly": timedelta(days=7),
                    "@monthly": timedelta(days=28), "@quarterly": timedelta(days=90), "@yearly": timedelta(days=365)}
CRON_BASE = datetime(2026, 1, 1, tzinfo=UTC)  # fixed: the same DAG at every parse (no new DAG version)
CRON_SAMPLES = 400  # a year of a daily schedule: weekends, month ends
#: The DAG role -> the event of a run of it that missed its deadline, and what such a run is called.
LATE_EVENTS = {"savepoint": ("savepoint_late", "savepoint run"), "dq": ("proof_late", "DQ proof run")}
#: What to do, per event: the first look and the command that shows more.
LATE_ADVICE = {
    "savepoint_late": "Until this run ends no new savepoint is taken (one run at a time), so the newest restore point "
                      "ages. Open the run's task log (a copy to S3 that hangs, a stream without a complete batch), "
                      "then the Rewind page; `rewind savepoint list {stream}` shows the newest savepoint.",
    "restore_late": "A restore stops the stream first: until it ends the stream may not be running. Open the run's "
                    "task log, then the Rewind page; `rewind supervisor status {stream}` shows the stream.",
    "proof_late": "The stream's output has no proof for this hour, and the next proof waits for this one (one run at "
                  "a time). Open the run's task log (a proof waiting for its first batch, a slow sink or Kafka), "
                  "then the Rewind page; `rewind dq {stream}` runs the proof from a shell.",
}


def schedule_interval(schedule: str | timedelta | None) -> timedelta | None:
    """The time from one scheduled run to the next, which a run must finish within to be on time.

    A preset, a cron expression (its shortest gap: ``0 9 * * 1-5`` is one day, a run still going when
    the next could be due is late) or a duration. None, ``@once``, ``@continuous``: no interval."""
    if isinstance(schedule, timedelta) or schedule is None:
        return schedule
    if schedule in PRESET_INTERVALS:
        return PRESET_INTERVALS[schedule]
    if schedule.startswith("@"):
        return None
    from croniter import croniter

    it = croniter(schedule, CRON_BASE)
    times = [it.get_next(datetime) for _ in range(CRON_SAMPLES)]
    return min(b - a for a, b in zip(times, times[1:], strict=False))


@dataclass(frozen=True)
class MissedDeadline:
    """A DAG run whose deadline passed, as Airflow's deadline callback reports it (epoch seconds)."""

    stream: str
    role: str             # a key of LATE_EVENTS
    run_id: str
    state: str            # the run's state when Airflow called back: queued, running, success, failed
    queued_at: float
    deadline_at: float
    ended_at: float | None = None
    restore: bool = False  # a savepoint DAG run triggered with action=restore


def _took(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def late_event(missed: MissedDeadline) -> tuple[str, str] | None:
    """``(event, cause)`` for a run past its deadline; None for a run that ended in time (its failure is
    its own alert) or a DAG without a late event."""
    found = LATE_EVENTS.get(missed.role)
    if found is None or (missed.ended_at is not None and missed.ended_at <= missed.deadline_at):
        return None
    event, what = found
    what = "restore run" if missed.restore else what
    allowed = _took(missed.deadline_at - missed.queued_at)
    if missed.ended_at is not None:
        return event, (f"the {what} ended {missed.state}, {_took(missed.ended_at - missed.deadline_at)} past its "
                       f"deadline ({allowed} after it was queued)")
    return event, f"the {what} has not finished {allowed} after it was queued (still {missed.state})"


def late_alert(missed: MissedDeadline, subscribed: Sequence[str], at: float, **where: str) -> Alert | None:
    """The alert for a missed deadline, or None when it is no event or not one of ``subscribed``.

    ``where``: ``dag_id``, ``page_url``, ``log_url`` (the caller knows them)."""
    found = late_event(missed)
    if found is None or found[0] not in subscribed:
        return None
    event, cause = found
    stamp = "%Y-%m-%d %H:%M:%S UTC"
    times = (f"queued at {datetime.fromtimestamp(missed.queued_at, UTC).strftime(stamp)}, deadline "
             f"{datetime.fromtimestamp(missed.deadline_at, UTC).strftime(stamp)}.")
    advice = LATE_ADVICE["restore_late" if missed.restore else event].format(stream=missed.stream)
    return Alert(missed.stream, event, cause, f"Run {missed.run_id}: {times}\n{advice}", at, run_id=missed.run_id,
                 **where)
