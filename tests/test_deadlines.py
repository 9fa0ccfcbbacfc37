"""Deadlines (fast, no services): when a savepoint or DQ run is late, the registry keys, the DAGs' deadline
alerts, and the callback Airflow calls when one is missed.

The mail itself, from a real Airflow's scheduler and triggerer to a real SMTP server, is in test_operations.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rewind.alerts import MissedDeadline, late_alert, late_event, schedule_interval
from rewind.registry import RegistryError, load_registry
from tests.harness.registry_templates import demo_stream, write_registry

NOTIFIER = "{class: harness.notifier.RecordingNotifier, channel: '#oncall'}"


@pytest.mark.parametrize("schedule,expected", [
    ("@hourly", timedelta(hours=1)), ("@daily", timedelta(days=1)), ("@monthly", timedelta(days=28)),
    ("*/30 * * * *", timedelta(minutes=30)),
    ("0 9 * * 1-5", timedelta(days=1)),  # weekdays at 9: its shortest gap, a day (not Friday's three)
    ("0 3 1 * *", timedelta(days=28)),  # monthly by cron: February's gap
    (timedelta(minutes=20), timedelta(minutes=20)),  # a duration schedule (SavepointSpec.airflow_schedule)
    (None, None), ("@once", None), ("@continuous", None),
])
def test_a_schedules_interval(schedule: Any, expected: timedelta | None) -> None:
    assert schedule_interval(schedule) == expected


def missed(state: str = "running", ended: float | None = None, role: str = "savepoint", **kw: Any) -> MissedDeadline:
    return MissedDeadline("demo", role, "scheduled__r1", state, queued_at=1000.0, deadline_at=4600.0, ended_at=ended,
                          **kw)


@pytest.mark.parametrize("case,expected,words", [
    (missed(), "savepoint_late", "savepoint run has not finished 60 min after it was queued (still running)"),
    (missed("queued"), "savepoint_late", "(still queued)"),  # never started (no worker slot): late all the same
    (missed(restore=True), "savepoint_late", "the restore run has not finished"),
    (missed(role="dq"), "proof_late", "DQ proof run has not finished 60 min"),
    (missed("success", ended=4700.0), "savepoint_late", "ended success, 100 s past its deadline"),
    (missed("failed", ended=2000.0), None, ""),  # failed in time: savepoint_failed told it, Airflow calls back anyway
    (missed("success", ended=4600.0), None, ""),
    (missed(role="replay"), None, ""),
])
def test_which_missed_deadlines_are_late_runs(case: MissedDeadline, expected: str | None, words: str) -> None:
    found = late_event(case)
    assert (found[0] if found else None) == expected, found
    assert found is None or words in found[1], found


def test_a_late_alert_names_the_stream_the_run_its_deadline_and_what_to_do() -> None:
    alert = late_alert(missed(), ["savepoint_late"], 5000.0, dag_id="rewind_demo_savepoint",
                       page_url="http://af/rewind/", log_url="http://af/dags/rewind_demo_savepoint/runs/scheduled__r1")
    assert alert is not None and alert.subject().startswith("[rewind] demo: savepoint late: the savepoint run")
    text = alert.text()
    for words in ("rewind_demo_savepoint (run scheduled__r1)", "queued at 1970-01-01 00:16:40 UTC",
                  "deadline 1970-01-01 01:16:40 UTC", "rewind savepoint list demo", "Rewind page: http://af/rewind/",
                  "Airflow run: http://af/dags/rewind_demo_savepoint/runs/scheduled__r1"):
        assert words in text, text
    assert "The run in Airflow" in alert.html() and "rewind dq demo" in late_alert(  # type: ignore[union-attr]
        missed(role="dq"), ["proof_late"], 5000.0).text()
    assert late_alert(missed(), ["proof_late", "savepoint_failed"], 5000.0) is None  # not subscribed


def test_the_registry_takes_the_late_events_and_a_deadline_that_leaves_the_config_hash(tmp_path: Path) -> None:
    alerts = f"{{on: [savepoint_late, proof_late], notifier: {NOTIFIER}}}"
    a = load_registry(write_registry(tmp_path / "r.yaml", demo_stream(
        "a", "t", tmp_path, alerts=alerts, savepoints="{schedule: '@daily', deadline: 2h}"))).get("a")
    assert a.alerts is not None and a.alerts.on == ["savepoint_late", "proof_late"] and a.savepoints.deadline == "2h"
    plain = load_registry(write_registry(tmp_path / "p.yaml", demo_stream(
        "a", "t", tmp_path, savepoints="{schedule: '@daily'}"))).get("a")
    assert a.config_hash() == plain.config_hash()  # a deadline is not the job's configuration: savepoints keep it
    with pytest.raises(RegistryError, match="streams.a.savepoints.deadline") as err:
        load_registry(write_registry(tmp_path / "bad.yaml",
                                     demo_stream("a", "t", tmp_path, savepoints="{deadline: 2 hourz}")))
    assert "not a duration" in str(err.value)


def _dags(tmp_path: Path, on: str = "[savepoint_late, proof_late]", **savepoints: str) -> dict[str, Any]:
    from rewind_airflow.dags.factory import build_dags

    sp = "{" + ", ".join(f"{k}: {v}" for k, v in savepoints.items()) + "}"
    entry = demo_stream("a", "t", tmp_path, alerts=f"{{on: {on}, notifier: {NOTIFIER}}}",
                        **({"savepoints": sp} if savepoints else {}))
    return build_dags(str(write_registry(tmp_path / f"r{len(list(tmp_path.iterdir()))}.yaml", entry)))


def _deadline(dag: Any) -> tuple[str, timedelta, str, dict[str, Any]] | None:
    if not dag.deadline:
        return None
    (alert,) = dag.deadline
    return alert.reference.reference_name, alert.interval, alert.callback.path, alert.callback.kwargs


def test_the_savepoint_and_dq_dags_carry_deadlines_from_the_registry(tmp_path: Path) -> None:
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.serialization.serialized_objects import DagSerialization

    dags = _dags(tmp_path)
    path = "rewind_airflow.deadlines.notify_missed_deadline"
    registry = dags["rewind_a_dq"].deadline[0].callback.kwargs["registry"]
    assert _deadline(dags["rewind_a_savepoint"]) == (  # the registry's default schedule, @hourly
        "DagRunQueuedAtDeadline", timedelta(hours=1), path, {"role": "savepoint", "registry": registry, "stream": "a"})
    assert _deadline(dags["rewind_a_dq"]) == (
        "DagRunQueuedAtDeadline", timedelta(hours=1), path, {"role": "dq", "registry": registry, "stream": "a"})
    assert isinstance(dags["rewind_a_dq"].deadline[0].callback, AsyncCallback)  # the triggerer runs it
    assert _deadline(dags["rewind_a_supervisor"]) is None and _deadline(dags["rewind_replay"]) is None
    serialized = DagSerialization.to_dict(dags["rewind_a_savepoint"])["dag"]["deadline"]
    assert serialized[0]["callback"]["__data__"]["path"] == path, serialized
    assert _deadline(_dags(tmp_path, schedule="'*/20 * * * *'")["rewind_a_savepoint"])[1] == timedelta(minutes=20)  # type: ignore[index]
    assert _deadline(_dags(tmp_path, schedule="'@daily'", deadline="'90 min'")["rewind_a_savepoint"])[1] == \
        timedelta(minutes=90)  # type: ignore[index]
    assert _deadline(_dags(tmp_path, schedule="null")["rewind_a_savepoint"]) is None  # no schedule, no interval
    assert _deadline(_dags(tmp_path, schedule="null", deadline="'5 min'")["rewind_a_savepoint"])[1] == \
        timedelta(minutes=5)  # type: ignore[index]
    only_failures = _dags(tmp_path, on="[savepoint_failed, proof_failed]")
    assert _deadline(only_failures["rewind_a_savepoint"]) is None and _deadline(only_failures["rewind_a_dq"]) is None
    assert _deadline(_dags(tmp_path, on="[proof_late]")["rewind_a_savepoint"]) is None


def _context(state: str, end: str | None, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """What Airflow 3.3's ``Deadline.handle_miss`` hands the callback: the run (REST form) and the deadline."""
    from datetime import UTC, datetime

    return {"dag_run": {"dag_id": "rewind_a_savepoint", "dag_run_id": "manual__1", "state": state,
                        "queued_at": "2026-11-28T10:00:00Z", "end_date": end, "conf": conf or {}},
            "deadline": {"id": "d1", "deadline_time": datetime(2026, 11, 28, 11, tzinfo=UTC)}}


def test_the_callback_tells_a_late_run_and_not_one_that_failed_in_time(tmp_path: Path) -> None:
    from harness.notifier import SENT

    from rewind_airflow.deadlines import notify_missed_deadline

    registry = write_registry(tmp_path / "r.yaml", demo_stream(
        "a", "t", tmp_path, alerts=f"{{on: [savepoint_late], notifier: {NOTIFIER}, page_url: 'http://af/rewind/'}}"))
    SENT.clear()
    done = asyncio.run(notify_missed_deadline("savepoint", str(registry), "a", context=_context("running", None)))
    (mail,) = SENT
    assert mail["channel"] == "#oncall" and mail["subject"] == done
    assert done.startswith("[rewind] a: savepoint late: the savepoint run has not finished 60 min after"), done
    assert "manual__1" in mail["text"] and "http://af/rewind/" in mail["text"], mail["text"]
    SENT.clear()
    failed = _context("failed", "2026-11-28T10:05:00+00:00")
    assert "no subscribed late event" in asyncio.run(notify_missed_deadline("savepoint", str(registry), "a",
                                                                            context=failed))
    assert "no subscribed late event" in asyncio.run(notify_missed_deadline("dq", str(registry), "a",
                                                                            context=_context("running", None)))
    assert SENT == []  # failed in time: its savepoint_failed alert told it; proof_late: not subscribed
    restore = _context("running", None, {"action": "restore", "savepoint_id": "x"})
    assert "the restore run has not finished" in asyncio.run(notify_missed_deadline("savepoint", str(registry), "a",
                                                                                     context=restore))
