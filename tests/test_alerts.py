"""Alerts (fast, no services): which task outcomes are events, the registry block, the notifier wiring.

The SMTP mails themselves, through a real Airflow and a real SMTP server, are in test_operations.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rewind.alerts import TaskOutcome, alert_for, event_of
from rewind.registry import RegistryError, load_registry
from tests.harness.registry_templates import demo_stream, write_registry


# --------------------------------------------------------------------------- which outcomes are events
def outcome(role: str, task: str, state: str = "failed", **failures: Any) -> TaskOutcome:
    return TaskOutcome("demo", role, task, state, "boom", started_at=100.0,
                       failures={"failures": [], "alerts": [], "gave_up": None, **failures})


@pytest.mark.parametrize("case,expected", [
    (outcome("supervisor", "relaunch", gave_up={"at": 1, "reason": "crash loop: 3 failures"}), "crash_loop"),
    (outcome("supervisor", "launch", gave_up={"at": 1, "reason": "crash loop"}), "crash_loop"),
    (outcome("supervisor", "launch"), None),  # a launch that failed for another reason: the red run says it
    (outcome("supervisor", "relaunch", "success", failures=[{"cause": "process_gone"}]), "recovery"),
    (outcome("supervisor", "prove"), "proof_failed"),
    (outcome("dq", "proof"), "proof_failed"),
    (outcome("dq", "wait_first_batch"), None),
    (outcome("dq", "proof", "success"), None),
    (outcome("replay", "plan"), "replay_failed"),
    (outcome("replay", "replay"), "replay_failed"),
    (outcome("savepoint", "take_savepoint"), "savepoint_failed"),
    (outcome("supervisor", "diagnose", alerts=[{"at": 150.0, "cause": "lag_over_threshold"}]), "lag"),
    (outcome("supervisor", "diagnose", alerts=[{"at": 10.0, "cause": "lag_over_threshold"}]), None),  # an old one
])
def test_events_of_task_outcomes(case: TaskOutcome, expected: str | None) -> None:
    found = event_of(case)
    assert (found[0] if found else None) == expected, found


def test_an_alert_names_stream_cause_and_links_and_only_subscribed_events_are_sent() -> None:
    crash = outcome("supervisor", "relaunch", gave_up={"at": 1, "reason": "crash loop: 3 failures past batch 1"})
    alert = alert_for(crash, ["crash_loop"], time.time(), dag_id="rewind_demo_supervisor", run_id="r1",
                      page_url="http://af/rewind/", log_url="http://af/log")
    assert alert is not None and alert.event == "crash_loop" and "crash loop: 3 failures" in alert.cause
    assert alert.subject().startswith("[rewind] demo: crash loop: ")
    for text in (alert.text(), alert.html()):
        assert "http://af/rewind/" in text and "rewind_demo_supervisor" in text and "boom" in text
    assert alert_for(crash, ["proof_failed"], time.time()) is None


# --------------------------------------------------------------------------- the registry block
def test_registry_alerts_per_stream_and_top_level(tmp_path: Path) -> None:
    body = ("alerts:\n  on: [crash_loop, proof_failed]\n  notifier: {class: smtp, to: oncall@example.com}\n"
            "streams:\n" + demo_stream("a", "t", tmp_path) +
            demo_stream("b", "t", tmp_path, alerts="{on: [lag], notifier: {class: slack, channel: '#x'}}"))
    (tmp_path / "r.yaml").write_text(body)
    reg = load_registry(tmp_path / "r.yaml")
    a, b = reg.get("a").alerts, reg.get("b").alerts
    assert a is not None and a.on == ["crash_loop", "proof_failed"]
    assert a.notifier_class() == "airflow.providers.smtp.notifications.smtp.SmtpNotifier"
    assert a.notifier_args() == {"to": "oncall@example.com"}
    assert b is not None and b.on == ["lag"] and b.notifier_class().endswith("SlackNotifier")
    plain = load_registry(write_registry(tmp_path / "p.yaml", demo_stream("c", "t", tmp_path))).get("c")
    assert plain.alerts is None


@pytest.mark.parametrize("alerts,words", [
    ("{on: [crash_loop], notifier: {to: x}}", "needs `class`"),
    ("{on: [crashloop], notifier: {class: smtp}}", "alerts.on.0: Input should be 'crash_loop'"),
    ("{notifier: {class: smtp}, email: x}", "unknown field"),
])
def test_bad_alert_blocks_are_refused_at_load(tmp_path: Path, alerts: str, words: str) -> None:
    path = write_registry(tmp_path / "r.yaml", demo_stream("a", "t", tmp_path, alerts=alerts))
    with pytest.raises(RegistryError, match="streams.a.alerts") as err:
        load_registry(path)
    assert words in str(err.value)


# --------------------------------------------------------------------------- the Airflow side
def _spec(tmp_path: Path, notifier: str) -> Path:
    return write_registry(tmp_path / "r.yaml", demo_stream(
        "a", "t", tmp_path, alerts=f"{{on: [proof_failed, crash_loop], notifier: {notifier}, "
                                   "page_url: 'http://af.example/rewind/'}"))


def test_the_callback_sends_through_the_registry_notifier(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from rewind_airflow.notify import RewindAlerts

    registry = _spec(tmp_path, "{class: harness.notifier.RecordingNotifier, channel: '#oncall'}")
    ti = SimpleNamespace(task_id="proof", dag_id="rewind_a_dq", run_id="r1", start_date=None, log_url="http://l")
    from harness.notifier import SENT

    SENT.clear()
    context: dict[str, Any] = {"ti": ti, "exception": RuntimeError("FAIL: 3 missing {{ 7 * 7 }}")}
    alert = RewindAlerts("dq", str(registry), "a").send(context)
    assert alert is not None and alert.event == "proof_failed"
    (mail,) = SENT
    assert mail["channel"] == "#oncall" and mail["subject"] == alert.subject()
    assert "3 missing {{ 7 * 7 }}" in mail["text"] and "49" not in mail["text"]  # shown, never evaluated
    assert "rewind_a_dq" in mail["text"] and "http://af.example/rewind/" in mail["text"]
    SENT.clear()
    RewindAlerts("dq", str(registry), "a")({"ti": SimpleNamespace(task_id="wait_first_batch", dag_id="d"),
                                             "exception": RuntimeError("x")})
    assert SENT == []  # not an event


def test_smtp_notifier_gets_subject_and_body_templates() -> None:
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    from rewind_airflow.notify import notifier_for

    n = notifier_for(SmtpNotifier, {"to": "oncall@example.com", "subject": "custom {{ rewind_alert.stream }}"})
    assert n.subject == "custom {{ rewind_alert.stream }}"  # the registry's own template is kept
    assert n.html_content == "{{ rewind_alert.html }}"


def test_dags_carry_the_alerts_and_a_missing_notifier_is_an_import_error(tmp_path: Path) -> None:
    from rewind_airflow.dags.factory import build_dags
    from rewind_airflow.notify import RewindAlerts

    dags = build_dags(str(_spec(tmp_path, "{class: harness.notifier.RecordingNotifier, channel: c}")))
    for dag_id in ("rewind_a_dq", "rewind_a_savepoint", "rewind_a_supervisor", "rewind_replay"):
        for task in dags[dag_id].tasks:
            assert any(isinstance(cb, RewindAlerts) for cb in task.on_failure_callback or []), (dag_id, task.task_id)
    relaunch = dags["rewind_a_supervisor"].get_task("relaunch")
    assert [cb.state for cb in relaunch.on_success_callback] == ["success"]
    with pytest.raises(ValueError, match="nosuch.Notifier.*cannot be imported"):
        build_dags(str(_spec(tmp_path, "{class: nosuch.Notifier}")))
