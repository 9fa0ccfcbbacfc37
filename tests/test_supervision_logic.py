"""Pure supervision decisions: health verdicts and restart strategies (no services)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewind.control.status import StreamStatus
from rewind.registry import RestartSpec
from rewind.supervision.health import Thresholds, diagnose
from rewind.supervision.restart_policy import Failure, decide, same_batch_run

NOW = 1_000_000.0


def status(**kw) -> StreamStatus:  # type: ignore[no-untyped-def]
    base = dict(stream="s", state="running", pid=123, heartbeat=NOW - 1, started_at=NOW - 500,
                last_batch_id=7, last_batch_at=NOW - 3, end_offsets={"t": {"0": 10}})
    return StreamStatus(**{**base, **kw})


@pytest.mark.parametrize("st,alive,cause", [
    (None, False, "not_started"),
    (status(state="failed", exception="boom"), False, "query_failed"),
    (status(state="stopped"), False, "stopped"),
    (status(), False, "process_gone"),
    (status(heartbeat=NOW - 500), True, "heartbeat_stale"),
    (status(total_lag=50, last_batch_at=NOW - 400), True, "stalled"),
    (status(total_lag=5000), True, "lag_over_threshold"),
    (status(state="starting", started_at=NOW - 1000), True, "heartbeat_stale"),
    # no batch since this driver started, past the start-up grace (180 s)
    (status(last_batch_at=None, heartbeat=NOW - 200, started_at=NOW - 200), True, "heartbeat_stale"),
    (status(last_batch_at=NOW - 900, heartbeat=NOW - 5, started_at=NOW - 200, total_lag=9), True, "stalled"),
    (status(last_batch_at=None, heartbeat=NOW - 5, started_at=NOW - 200, total_lag=9), True, "stalled"),
])
def test_unhealthy_verdicts_name_the_cause(st, alive, cause) -> None:  # type: ignore[no-untyped-def]
    h = diagnose(st, NOW, alive, Thresholds(max_lag=1000))
    assert not h.healthy and h.cause == cause and h.detail
    assert h.needs_restart == (cause != "lag_over_threshold")


@pytest.mark.parametrize("st", [status(), status(state="starting", started_at=NOW - 10, last_batch_at=None),
                                status(total_lag=0, last_batch_at=NOW - 5000),  # idle, nothing to read
                                status(total_lag=50, last_batch_at=NOW - 5),
                                # the first batch of this driver still running: no event for 100 s is fine
                                status(last_batch_at=None, heartbeat=NOW - 100, started_at=NOW - 110,
                                       total_lag=5000)])
def test_healthy_verdicts(st) -> None:  # type: ignore[no-untyped-def]
    assert diagnose(st, NOW, True, Thresholds(max_lag=1000)).healthy


def test_query_failure_carries_the_exception_and_offsets() -> None:
    h = diagnose(status(state="failed", exception="poison batch 8"), NOW, False)
    assert "poison batch 8" in h.detail and "last batch 7" in h.detail and "'t'" in h.detail


def fails(*batches: int | None, start: float = NOW - 100, step: float = 10.0) -> list[Failure]:
    return [Failure(start + i * step, "process_gone", b, {"t": {"0": 5}}, "killed") for i, b in enumerate(batches)]


def test_exponential_backoff_relaunches_a_lone_crash_at_once_and_doubles_up_to_max_delay() -> None:
    spec = RestartSpec(strategy="exponential-backoff", max_attempts=10, delay="5 seconds", max_delay="30 seconds")
    delays = [decide(spec, fails(*[3] * n), NOW).delay_s for n in range(1, 7)]
    assert delays == [0, 5, 10, 20, 30, 30]
    assert "at once" in decide(spec, fails(3), NOW).reason and "in 5s" in decide(spec, fails(3, 3), NOW).reason
    # progress between failures: each is a lone crash again
    assert decide(spec, fails(1, 2, 3, 4), NOW).delay_s == 0


def test_progress_between_failures_resets_the_count() -> None:
    spec = RestartSpec(strategy="fixed-delay", max_attempts=2, delay="1 seconds")
    d = decide(spec, fails(1, 2, 3, 4, 5), NOW)
    assert d.restart and d.attempt == 1 and d.delay_s == 1
    assert same_batch_run(fails(1, 2, 2)) == fails(1, 2, 2)[1:]


def test_crash_loop_on_one_batch_gives_up_loudly() -> None:
    spec = RestartSpec(strategy="fixed-delay", max_attempts=3, delay="1 seconds")
    assert decide(spec, fails(9, 9, 9), NOW).restart
    d = decide(spec, fails(9, 9, 9, 9), NOW)
    assert not d.restart and "crash loop" in d.reason and "batch 9" in d.reason and "batch 10" in d.reason
    assert "{'t': {'0': 5}}" in d.reason and "Nothing was skipped" in d.reason


def test_failure_rate_counts_failures_in_the_interval() -> None:
    spec = RestartSpec(strategy="failure-rate", max_attempts=3, delay="2 seconds", failure_rate_interval="1 min")
    assert decide(spec, fails(1, 2, 3, start=NOW - 500, step=100), NOW).restart, "old failures fall out"
    d = decide(spec, fails(1, 2, 3, 4, start=NOW - 40), NOW)
    assert not d.restart and "4 failures within 1 min" in d.reason


def test_first_start_is_immediate() -> None:
    assert decide(RestartSpec(), [], NOW) == decide(RestartSpec(), [], NOW + 5)
    assert decide(RestartSpec(), [], NOW).restart and decide(RestartSpec(), [], NOW).delay_s == 0


def test_relaunch_loop_records_each_failure_and_gives_up_on_a_poison_batch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The loop over a fake launcher whose stream fails at once, stuck behind batch 4: two
    restarts (max_attempts 2), then CrashLoop naming the batch and offsets; delays as decided."""
    import os

    from rewind.control.status import write_status
    from rewind.paths import status_path
    from rewind.registry import StreamSpec
    from rewind.supervision.failures import CrashLoop, read_failures
    from rewind.supervision.reconcile import fail, relaunch_until_progress

    spec = StreamSpec.model_construct(name="s", status_dir=str(tmp_path), control=str(tmp_path),
                                      restart=RestartSpec(strategy="fixed-delay", max_attempts=2, delay="3 seconds"))
    path = status_path(tmp_path, "s")
    launches: list[float] = []
    slept: list[float] = []

    def start() -> dict:  # type: ignore[type-arg]
        launches.append(1)
        write_status(path, status(pid=os.getpid(), state="failed", last_batch_id=4, exception="poison record",
                                  end_offsets={"t": {"0": 40}}))
        return {"pid": os.getpid(), "launched_at": 0.0, "running_at": 0.0}

    write_status(path, status(pid=os.getpid(), state="failed", last_batch_id=4, exception="poison record"))
    first = fail(spec, "query_failed", "poison record")  # what the watch + diagnose did
    assert first.restart and first.delay_s == 3
    with pytest.raises(CrashLoop) as err:
        relaunch_until_progress(spec, start, after_batch=4, delay_s=first.delay_s, timeout_s=5, sleep=slept.append)
    assert len(launches) == 2 and slept == [3, 3]
    assert "3 failures in a row without committing past batch 4" in str(err.value)
    assert "{'t': {'0': 40}}" in str(err.value) and "poison record" in str(err.value)
    assert read_failures(spec)["gave_up"] is not None


def test_a_launch_is_refused_while_a_driver_holds_the_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A live driver (even a hung one, with an old heartbeat) blocks a second launch on the checkpoint."""
    import subprocess
    import time
    from dataclasses import replace

    import pytest

    from rewind.control.leases import acquire, me
    from rewind.control.location import control_store
    from rewind.control.status import StreamStatus, write_status
    from rewind.paths import status_file
    from rewind.registry import load_registry
    from rewind.supervision.process_control import DriverRunning, ensure_no_driver, launch_stream
    from tests.harness.registry_templates import demo_stream, write_registry

    spec = load_registry(write_registry(tmp_path / "r.yaml", demo_stream("s", "t", tmp_path))).get("s")
    driver = subprocess.Popen(["sleep", "60"])
    try:  # a hung driver: its heartbeat an hour old, its lease held
        write_status(status_file(spec), StreamStatus(stream="s", state="running", pid=driver.pid,
                                                                      heartbeat=time.time() - 3600))
        acquire(control_store(spec), replace(me(), pid=driver.pid), 60.0, 0)
        with pytest.raises(DriverRunning, match=f"pid {driver.pid} on "):
            launch_stream(spec, None, "127.0.0.1:1", tmp_path / "log")
        assert not (tmp_path / "log").exists(), "something was started"
    finally:
        driver.kill()
        driver.wait()
    ensure_no_driver(spec)  # its process gone on this host: no need to wait for the lease to lapse


def test_lag_alerts_once_per_period_and_never_restarts() -> None:
    from rewind.control.status import StreamStatus
    from rewind.supervision.health import Thresholds, evaluate
    from rewind.supervision.observe import Observation

    now = 10_000.0
    st = StreamStatus(stream="s", state="running", pid=1, heartbeat=now - 1, started_at=now - 600,
                      last_batch_id=9, last_batch_at=now - 2, total_lag=5_000)
    t = Thresholds(max_lag=1_000, alert_every_s=600)
    first = evaluate(Observation("s", now, st, True), t)
    assert (first.action, first.health.cause) == ("alert", "lag_over_threshold")
    def at(t_: float) -> StreamStatus:  # the same stream, still committing batches, at time t_
        return StreamStatus(stream="s", state="running", pid=1, heartbeat=t_ - 1, started_at=now - 600,
                            last_batch_id=9, last_batch_at=t_ - 2, total_lag=5_000)

    again = evaluate(Observation("s", now + 60, at(now + 60), True, last_alert_at={"lag_over_threshold": now}), t)
    assert again.action == "none"
    later = evaluate(Observation("s", now + 700, at(now + 700), True, last_alert_at={"lag_over_threshold": now}), t)
    assert later.action == "alert"
    hung = StreamStatus(stream="s", state="running", pid=1, heartbeat=now - 500, started_at=now - 900,
                        last_batch_id=9, last_batch_at=now - 500)
    v = evaluate(Observation("s", now, hung, True), t)
    assert (v.action, v.stop_first) == ("restart", True)
    gave_up = evaluate(Observation("s", now, None, False, gave_up={"at": now, "reason": "crash loop"}), t)
    assert gave_up.action == "none" and "gave up" in gave_up.reason


def _observed(st: StreamStatus | None, alive: bool = False, failures: tuple = (), reset_at: float | None = None):  # type: ignore[no-untyped-def,type-arg]
    from rewind.supervision.observe import Observation

    return Observation("s", NOW, st, alive, None, {}, failures, reset_at)


@pytest.mark.parametrize("obs,dead", [
    (_observed(status()), True),  # said running, process gone, nothing recorded
    (_observed(status(state="starting")), True),
    (_observed(status(state="stopping")), True),  # SIGTERMed, then killed before it could say stopped
    (_observed(status(), failures=({"at": NOW - 60},)), True),  # an earlier death, before this heartbeat
    (_observed(status(), failures=({"at": NOW - 1},)), False),  # the watch recorded this one
    (_observed(status(), reset_at=NOW - 0.5), False),  # a person reset after it died
    (_observed(status(), alive=True), False),  # alive, or a standby taking over
    (_observed(status(state="stopped")), False),
    (_observed(status(state="failed")), False),  # the query failed and said so: the watch's case
    (_observed(None), False),
])
def test_a_death_no_watch_saw_is_found_once(obs, dead) -> None:  # type: ignore[no-untyped-def]
    from rewind.supervision.health import unrecorded_death

    found = unrecorded_death(obs)
    assert (found is not None) == dead
    if found:
        assert found.cause == "process_gone" and "found gone at launch" in found.detail and "batch 7" in found.detail


def test_a_launch_records_a_death_no_watch_saw_and_a_crash_loop_of_them_gives_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A driver that dies between supervisor runs, again and again at the same batch, reaches the
    restart strategy's limit like deaths the watch sees; each is counted once; a reset forgets it."""
    import os
    import subprocess
    import sys
    import time

    from rewind.control.status import read_status, write_status
    from rewind.paths import status_path
    from rewind.registry import StreamSpec
    from rewind.supervision.failures import CrashLoop, read_failures, reset
    from rewind.supervision.reconcile import recover_unseen_death

    spec = StreamSpec.model_construct(name="s", status_dir=str(tmp_path), control=str(tmp_path),
                                      checkpoint=str(tmp_path / "cp"),
                                      restart=RestartSpec(strategy="fixed-delay", max_attempts=2, delay="3 seconds"))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    path = status_path(tmp_path, "s")
    slept: list[float] = []

    def died() -> None:  # a driver of this stream said running at batch 4, then its process vanished
        write_status(path, status(pid=gone.pid, heartbeat=time.time() - 0.01, started_at=time.time() - 5,
                                  last_batch_id=4, end_offsets={"t": {"0": 40}}))

    assert recover_unseen_death(spec, sleep=slept.append) is None  # no status: a first launch
    died()
    first = recover_unseen_death(spec, sleep=slept.append)
    assert first and first["cause"] == "process_gone" and first["checkpoint"]["action"] == "none", first
    assert slept == [3.0] and "restart 1/2" in first["decision"]
    assert recover_unseen_death(spec, sleep=slept.append) is None  # counted once, however many launches look
    assert [f["batch_id"] for f in read_failures(spec)["failures"]] == [4]
    time.sleep(0.02)
    died()
    assert recover_unseen_death(spec, sleep=slept.append)
    time.sleep(0.02)
    died()
    with pytest.raises(CrashLoop, match="3 failures in a row without committing past batch 4"):
        recover_unseen_death(spec, sleep=slept.append)
    assert read_failures(spec)["gave_up"] is not None and slept == [3.0, 3.0]
    reset(spec)
    assert recover_unseen_death(spec, sleep=slept.append) is None  # the person who reset has seen it
    assert read_failures(spec)["failures"] == []
    # alive: a driver holds the lease (liveness is the lease, not the pid), its status written after the reset
    from rewind.control.leases import acquire, me
    from rewind.control.location import control_store

    time.sleep(0.05)
    acquire(control_store(spec), me(), 30.0, 0)
    write_status(path, status(pid=os.getpid(), heartbeat=time.time() - 0.01))
    assert read_failures(spec)["reset_at"] < read_status(path).heartbeat  # type: ignore[union-attr]
    assert recover_unseen_death(spec, sleep=slept.append) is None


def test_the_supervisor_chains_past_a_lost_driver_but_not_past_a_stop_or_a_verdict(tmp_path: Path) -> None:
    """A driver whose lease lapsed after its run's tasks (killed, or paused on a host cut off) is the
    next run's to record and bring back; a stopped stream or a crash-loop verdict ends the chain."""
    from rewind.control.status import StreamStatus, write_status
    from rewind.paths import status_file
    from rewind.supervision.failures import record_failure
    from rewind_airflow.operators.supervision import chain_enabled
    from tests.harness.registry_templates import demo_stream, write_registry

    registry = write_registry(tmp_path / "r.yaml", demo_stream(
        "s", "t", tmp_path, restart="{strategy: fixed-delay, max_attempts: 1, delay: 1 seconds}"))
    from rewind.registry import load_registry

    spec = load_registry(registry).get("s")
    path = status_file(spec)
    write_status(path, StreamStatus(stream="s", state="running", pid=999_999_999))  # no lease: gone
    assert chain_enabled("s", str(registry), {"chain": True})
    assert not chain_enabled("s", str(registry), {"chain": False})
    write_status(path, StreamStatus(stream="s", state="stopped", pid=999_999_999))
    assert not chain_enabled("s", str(registry), {"chain": True})
    write_status(path, StreamStatus(stream="s", state="running", pid=999_999_999))
    record_failure(spec, "process_gone", "x", 1, {})
    record_failure(spec, "process_gone", "y", 1, {})
    assert not chain_enabled("s", str(registry), {"chain": True})
