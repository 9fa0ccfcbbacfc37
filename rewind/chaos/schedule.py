"""The chaos harness's schedule: which faults, in which order, with which parameters (pure).

Why a module of its own: the schedule is the part a person must be able to reproduce and
reason about ("seed 7 killed the stream between the sink's commit and Spark's, then emptied
every offsets file while it was down"), and the part whose rules are testable without Spark
or services. ``rewind.chaos.harness`` executes it; nothing here does I/O or reads the clock.

A schedule is a list of faults run one after another. Each fault is a fixed list of
primitive actions (``Fault.actions``), so what runs is exactly what
`rewind.chaos.timeline.check_timeline` judges: that every action makes sense in the state of
the stream, broker, S3 and supervisor it meets, and that faults do not overlap.

Progress through the run is measured in produced events, not wall-clock time (recoveries
take as long as Spark takes to start on the machine at hand): the events are cut into one
segment more than there are faults; fault i starts once segments before it are produced and
releases the next one to the producer as it starts, so every fault meets fresh data arriving
(a kill "while a batch is in flight" needs a batch). The one exception is the skewed restart:
its segment *is* the fault -- written while the stream is down as unequal backlogs whose event
times (and Kafka timestamps) are skewed across the partitions (`rewind.chaos.backlog`), so its
``produce_backlog`` action releases it, not the fault's start.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from rewind.errors import Refused

FAULT_KINDS = ("kill", "broker_restart", "s3_outage", "corruption", "replay", "skewed_restart")

#: When a kill lands. ``sink_committed``: the sink holds batch N but Spark has not written
#: commits/N (the batch commit is half done); ``batch_planned``: offsets/N is written and
#: commits/N is not (a batch in flight); ``random``: a random delay into the fault.
KILL_MOMENTS = ("sink_committed", "batch_planned", "random")

#: Checkpoint damage done while the stream is down, and the recovery each one calls for.
DAMAGES: dict[str, str] = {
    "truncate_offsets": "repaired",    # offsets/N (newest committed) cut in half
    "garbage_commit": "repaired",      # commits/N replaced by bytes that are not a commit
    "empty_state": "repaired",         # a state file of version N+1 emptied
    "no_complete_batch": "restored",   # every offsets/* emptied: nothing to roll back to
}


class ScheduleError(Refused, ValueError):
    """The requested chaos run cannot be scheduled; the message says what to change."""


@dataclass(frozen=True)
class ChaosConfig:
    seed: int = 7
    events: int = 100_000
    kills: int = 10
    broker_restarts: int = 1
    corruptions: int = 1
    replays: int = 1
    s3_outages: int = 1
    skewed_restarts: int = 1

    @property
    def counts(self) -> dict[str, int]:
        return {"kill": self.kills, "broker_restart": self.broker_restarts, "s3_outage": self.s3_outages,
                "corruption": self.corruptions, "replay": self.replays, "skewed_restart": self.skewed_restarts}

    @property
    def faults(self) -> int:
        return sum(self.counts.values())

    def validate(self) -> None:
        bad = [f"--{k.replace('_', '-')}s" for k, v in self.counts.items() if v < 0]
        if bad:
            raise ScheduleError(f"{', '.join(bad)} must be >= 0")
        if self.events < 1:
            raise ScheduleError(f"--events must be >= 1, got {self.events}")
        per_segment = self.events // (self.faults + 1)
        if per_segment < MIN_SEGMENT_EVENTS:
            raise ScheduleError(f"{self.events} events for {self.faults} faults leaves {per_segment} events between "
                                f"faults; give at least {MIN_SEGMENT_EVENTS * (self.faults + 1)} events (every fault "
                                "needs data arriving while it strikes)")


#: Events between two faults, at least: enough for a few micro-batches to be in flight.
MIN_SEGMENT_EVENTS = 200


@dataclass(frozen=True)
class Action:
    """One primitive step of a fault; the harness runs it as ``do_<name>`` (`rewind.chaos.faults`,
    `rewind.chaos.data_faults`)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fault:
    index: int  # 1-based position in the schedule
    kind: str
    starts_after: int  # events produced before the fault starts
    releases: int  # events the producer may have sent once it has started (cumulative)
    params: dict[str, Any] = field(default_factory=dict)

    def actions(self) -> list[Action]:
        p = self.params
        if self.kind == "kill":
            return [Action("await_moment", {"moment": p["moment"], "delay_s": p["delay_s"]}), Action("sigkill"),
                    Action("await_recovery")]
        if self.kind == "corruption":
            restore = DAMAGES[p["damage"]] == "restored"
            # A roll-back needs a complete batch before the damaged one: at least two committed.
            return [Action("await_batches", {"at_least": 2})] + (
                [Action("savepoint"), Action("await_progress", {"batches": 2})] if restore else []) + [
                Action("hold_supervisor"), Action("await_moment", {"moment": "random", "delay_s": p["delay_s"]}),
                Action("sigkill"), Action("corrupt", {"damage": p["damage"], "pick": p["pick"]}),
                Action("release_supervisor"), Action("await_recovery")]
        if self.kind == "broker_restart":
            return [Action("broker_stop"), Action("pause", {"seconds": p["down_s"]}), Action("broker_start"),
                    Action("await_settled")]
        if self.kind == "s3_outage":
            return [Action("savepoint_cut", {"cut_fraction": p["cut_fraction"], "outage_s": p["outage_s"]}),
                    Action("await_s3"), Action("savepoint", {"retry_s": 60.0}), Action("check_savepoints"),
                    Action("await_settled")]
        if self.kind == "replay":
            return [Action("replay", {"start_fraction": p["start_fraction"], "end_fraction": p["end_fraction"]}),
                    Action("await_settled")]
        if self.kind == "skewed_restart":
            # A watermark to be behind needs committed batches (offsets/1 carries batch 0's).
            return [Action("await_batches", {"at_least": 2}), Action("hold_supervisor"), Action("stop"),
                    Action("produce_backlog", {k: p[k] for k in ("lagging_partition", "lagging_share", "skew_delays",
                                                                 "behind_share")}),
                    Action("release_supervisor"), Action("await_recovery"), Action("await_caught_up")]
        raise ScheduleError(f"unknown fault kind {self.kind!r} (known: {', '.join(FAULT_KINDS)})")

    def describe(self) -> str:
        p = self.params
        what = {
            "kill": lambda: f"SIGKILL the stream ({p['moment']}" + (f", after {p['delay_s']}s" if p["delay_s"] else "")
                            + ")",
            "corruption": lambda: f"SIGKILL, then {p['damage']} while down (expect: {DAMAGES[p['damage']]})",
            "broker_restart": lambda: f"restart the Kafka broker (down {p['down_s']}s)",
            "s3_outage": lambda: f"S3 unavailable for {p['outage_s']}s, cut after {p['cut_fraction']:.0%} of a "
                                 "savepoint's bytes",
            "replay": lambda: f"replay [{p['start_fraction']:.0%}, {p['end_fraction']:.0%}) of the committed offsets "
                              "while the stream runs",
            "skewed_restart": lambda: f"stop the stream; its segment arrives as skewed backlogs "
                                      f"({p['lagging_share']:.0%} to partition {p['lagging_partition']}, "
                                      f"{p['skew_delays']:.2f} watermark delays older than the others', "
                                      f"{p['behind_share']:.0%} of partition {p['lagging_partition']}'s already behind "
                                      "the watermark); restart, catch up",
        }[self.kind]()
        return f"#{self.index} after {self.starts_after:,} events: {what}"

    @property
    def releases_at_start(self) -> bool:
        """Whether the fault's start releases its segment to the producer; a fault that writes its
        segment itself (``produce_backlog``) releases it there."""
        return not any(a.name == "produce_backlog" for a in self.actions())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "actions": [a.name for a in self.actions()], "describe": self.describe()}


@dataclass(frozen=True)
class Schedule:
    config: ChaosConfig
    first_release: int  # events the producer may send before the first fault
    faults: tuple[Fault, ...]

    def to_json(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "first_release": self.first_release,
                "faults": [f.to_json() for f in self.faults]}

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in FAULT_KINDS}
        for f in self.faults:
            out[f.kind] += 1
        return out


def _spread(rng: random.Random, values: tuple[str, ...], n: int) -> list[str]:
    """`n` values that cycle through every one of `values` (each shuffled round), so that a
    count of at least len(values) covers them all."""
    out: list[str] = []
    while len(out) < n:
        round_ = list(values)
        rng.shuffle(round_)
        out += round_
    return out[:n]


def _boundaries(rng: random.Random, events: int, segments: int) -> list[int]:
    """Cumulative event counts at the end of each segment (last = events), jittered sizes."""
    weights = [rng.uniform(0.75, 1.25) for _ in range(segments)]
    total = sum(weights)
    cum, out = 0.0, []
    for w in weights:
        cum += w
        out.append(round(events * cum / total))
    out[-1] = events
    floor = MIN_SEGMENT_EVENTS // 2
    for i in range(len(out)):  # every segment keeps some events (jitter never empties one)
        lo = (out[i - 1] if i else 0) + floor
        out[i] = max(out[i], min(lo, events))
    return out


def make_schedule(config: ChaosConfig) -> Schedule:
    """The seeded schedule: the same config (seed included) always gives the same schedule."""
    config.validate()
    rng = random.Random(config.seed)
    kinds = [k for k in FAULT_KINDS for _ in range(config.counts[k])]
    rng.shuffle(kinds)
    moments = iter(_spread(rng, KILL_MOMENTS, config.kills))
    damages = iter(_spread(rng, tuple(DAMAGES), config.corruptions))
    bounds = _boundaries(rng, config.events, len(kinds) + 1)
    faults = []
    for i, kind in enumerate(kinds):
        if kind == "kill":
            moment = next(moments)
            delay = {"random": rng.uniform(0.3, 4.0), "batch_planned": rng.uniform(0.0, 0.4)}.get(moment, 0.0)
            params: dict[str, Any] = {"moment": moment, "delay_s": round(delay, 2)}
        elif kind == "corruption":
            params = {"damage": next(damages), "delay_s": round(rng.uniform(0.3, 3.0), 2),
                      "pick": round(rng.random(), 4)}
        elif kind == "broker_restart":
            params = {"down_s": round(rng.uniform(0.5, 3.0), 2)}
        elif kind == "s3_outage":
            params = {"cut_fraction": round(rng.uniform(0.1, 0.7), 3), "outage_s": round(rng.uniform(2.0, 6.0), 2)}
        elif kind == "skewed_restart":
            params = {"lagging_partition": 0, "lagging_share": round(rng.uniform(0.6, 0.8), 3),
                      "skew_delays": round(rng.uniform(1.25, 2.0), 3), "behind_share": round(rng.uniform(0.3, 0.7), 3)}
        else:
            start = rng.uniform(0.0, 0.7)
            params = {"start_fraction": round(start, 3),
                      "end_fraction": round(min(1.0, start + rng.uniform(0.1, 0.3)), 3)}
        faults.append(Fault(i + 1, kind, bounds[i], bounds[i + 1], params))
    return Schedule(config, bounds[0], tuple(faults))
