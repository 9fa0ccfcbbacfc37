"""The chaos schedule's timeline rules: every action must make sense where it runs (pure).

Why apart from the schedule: making a schedule (`rewind.chaos.schedule`) is a seeded choice;
this is the check that the choice can run. Every run checks its schedule before it starts (the
report's ``schedule_valid`` invariant carries the problems, ``rewind chaos --plan`` prints
them), and the tests check hand-made action sequences with `check_actions`.

The timeline is simulated over the state of the stream (up/down), the broker, the S3 endpoint,
the supervisor (held or not) and the savepoints, and every action must make sense in the state
it meets -- a corruption only while the stream is down and the supervisor held (otherwise it
could relaunch on a half-written file), a kill only of a running stream, a replay only while
the stream runs and the broker is up, a restore-forcing corruption only after a savepoint
exists -- and every fault must leave everything up again before the next one starts (faults do
not overlap).
"""

from __future__ import annotations

from dataclasses import dataclass

from rewind.chaos.schedule import DAMAGES, Action, Schedule


@dataclass
class _World:
    stream_up: bool = True
    broker_up: bool = True
    s3_up: bool = True
    held: bool = False
    savepoint: bool = False  # a complete savepoint exists
    backlog: bool = False  # a backlog was written that the stream has not caught up with yet


def _apply(w: _World, a: Action) -> str | None:
    """Apply `a` to the world; a problem when it makes no sense there."""
    n = a.name
    if n == "sigkill":
        if not w.stream_up:
            return "kills a stream that is already down"
        w.stream_up = False
    elif n == "stop":
        if not w.stream_up:
            return "stops a stream that is already down"
        if not w.held:
            return "stops the stream without holding the supervisor (it would relaunch it before the backlog exists)"
        w.stream_up = False
    elif n == "produce_backlog":
        if w.stream_up:
            return "writes a backlog while the stream runs (it reads the records as they arrive: no backlog)"
        if not w.held:
            return "writes a backlog without holding the supervisor (it may relaunch the stream half-way)"
        if not w.broker_up:
            return "writes a backlog while the broker is down"
        if w.backlog:
            return "writes a backlog before the stream caught up with the previous one"
        w.backlog = True
    elif n == "await_caught_up":
        if not (w.stream_up and w.broker_up) or w.held:
            return "waits for a catch-up while the stream or the broker is down, or the supervisor held"
        if not w.backlog:
            return "waits for a catch-up without a backlog"
        w.backlog = False
    elif n == "corrupt":
        if w.stream_up:
            return "corrupts the checkpoint of a running stream (Spark is writing it)"
        if not w.held:
            return "corrupts the checkpoint without holding the supervisor (it may be relaunching on it)"
        if DAMAGES.get(a.args.get("damage", "")) == "restored" and not w.savepoint:
            return "forces a restore before any savepoint exists"
    elif n == "hold_supervisor":
        if w.held:
            return "holds the supervisor twice"
        w.held = True
    elif n == "release_supervisor":
        if not w.held:
            return "releases a supervisor it does not hold"
        w.held = False
    elif n == "await_recovery":
        if w.stream_up:
            return "waits for a recovery of a stream that is up"
        if w.held:
            return "waits for a recovery while holding the supervisor (deadlock)"
        if not (w.broker_up and w.s3_up):
            return "waits for a recovery while the broker or S3 is down"
        w.stream_up = True
    elif n in ("await_moment", "await_progress", "await_batches"):
        if not (w.stream_up and w.broker_up):
            return f"{n} needs a running stream and broker"
    elif n == "broker_stop":
        if not w.broker_up:
            return "stops a broker that is down"
        w.broker_up = False
    elif n == "broker_start":
        if w.broker_up:
            return "starts a broker that is up"
        w.broker_up = True
    elif n == "savepoint_cut":
        if not (w.s3_up and w.stream_up):
            return "a savepoint cut needs S3 up and a running stream (an online savepoint)"
        w.s3_up = False
    elif n == "await_s3":
        w.s3_up = True
    elif n == "savepoint":
        if not w.s3_up:
            return "takes a savepoint while S3 is down"
        w.savepoint = True
    elif n == "check_savepoints":
        if not w.s3_up:
            return "checks savepoints while S3 is down"
    elif n == "replay":
        if not (w.stream_up and w.broker_up):
            return "replays while the stream or the broker is down (it must run beside the live stream)"
    elif n == "await_settled":
        if w.held or not (w.broker_up and w.s3_up):
            return "waits to settle while the broker/S3 is down or the supervisor held"
        w.stream_up = True  # whatever the fault did, the supervisor brings the stream back
    elif n != "pause":
        return f"unknown action {n!r}"
    return None


def check_actions(actions: list[Action]) -> list[str]:
    """Problems of one flat sequence of actions, starting with everything up (the rules of
    `check_timeline`, for a hand-made sequence)."""
    w = _World()
    problems = [f"{a.name} {p}" for a in actions if (p := _apply(w, a))]
    if not (w.stream_up and w.broker_up and w.s3_up) or w.held or w.backlog:
        problems.append(f"ends with {w}")
    return problems


def check_timeline(schedule: Schedule) -> list[str]:
    """Every problem of the schedule: actions that make no sense where they happen, faults that
    leave something down for the next one, and event bounds that do not advance."""
    problems: list[str] = []
    w = _World()
    previous = schedule.first_release
    for f in schedule.faults:
        if f.starts_after != previous:
            problems.append(f"#{f.index} {f.kind}: starts after {f.starts_after} events, but {previous} were released")
        if not f.starts_after < f.releases:
            problems.append(f"#{f.index} {f.kind}: releases no new events ({f.starts_after} -> {f.releases})")
        previous = f.releases
        for a in f.actions():
            problem = _apply(w, a)
            if problem:
                problems.append(f"#{f.index} {f.kind}: {a.name} {problem}")
        if not (w.stream_up and w.broker_up and w.s3_up) or w.held or w.backlog:
            problems.append(f"#{f.index} {f.kind}: leaves {w} for the next fault (faults must not overlap)")
            w = _World(savepoint=w.savepoint)
    if schedule.faults and schedule.faults[-1].releases != schedule.config.events:
        problems.append(f"the last fault releases {schedule.faults[-1].releases} of {schedule.config.events} events")
    if schedule.counts() != schedule.config.counts:
        problems.append(f"fault counts {schedule.counts()} differ from the requested {schedule.config.counts}")
    return problems
