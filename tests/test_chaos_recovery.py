"""Which supervisor recovery answers a chaos kill (pure: ``rewind.chaos.supervisor.recovery_after``).

The case that failed a CI rehearsal (2026-11-26): the supervisor was already relaunching a stalled
driver when the harness killed the new one during its start-up; the recovery's own relaunch loop
replaced it, no new recovery was ever detected, and the harness waited 420 s for one.
"""

from __future__ import annotations

from rewind.chaos.supervisor import Recovery, recovery_after

KILL = 1_000.0


def rec(detected: float, launched: float | None, done: bool = True, cause: str = "process_gone") -> Recovery:
    return Recovery(cause, "", detected, None, launched_at=launched, done=done)


def test_a_recovery_detected_after_the_kill_answers_it() -> None:
    later = rec(KILL + 1.5, KILL + 7)
    assert recovery_after([rec(KILL - 300, KILL - 290), later], KILL) is later


def test_a_recovery_under_way_at_the_kill_that_relaunched_after_it_answers_it() -> None:
    stalled = rec(KILL - 58, KILL + 37, cause="stalled")  # the CI rehearsal's timeline
    assert recovery_after([stalled], KILL) is stalled


def test_a_recovery_finished_before_the_kill_or_not_finished_does_not() -> None:
    assert recovery_after([rec(KILL - 300, KILL - 290)], KILL) is None  # an earlier fault's
    assert recovery_after([rec(KILL - 58, KILL - 20)], KILL) is None  # launched before the kill: not a replacement
    assert recovery_after([rec(KILL + 2, None, done=False)], KILL) is None  # still under way
    assert recovery_after([], KILL) is None
