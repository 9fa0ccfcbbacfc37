"""The known set of a chaos run: what the producer sends, and how the sink must account for it (pure).

Why a module of its own: the producer's plan (``rewind.demo.producer.plan_record``) is
deterministic, so before the run starts it is known which event ids will be sent, which records
are malformed or late, and -- for a skewed restart -- which records the backlog puts behind the
watermark (`backlog_behind`). After the run `compare_known` holds the sink to that set; the
harness reads Kafka and the sink's tables (`rewind.chaos.evidence`) and hands the rows here.

The known set (`compare_known`): every valid event the producer sent must be accounted for once,
either as its row in the events table or -- when every Kafka record carrying its id was behind
the watermark, as a skewed restart's lagging partition is -- as ``behind_watermark`` dead letters
(Spark's stateful operators would have dropped them; the stream routes them instead). Malformed
and late records are the expected dead letters; no Kafka record may be both an event and a dead
letter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rewind.api.late import BEHIND_WATERMARK
from rewind.chaos.backlog import BacklogPlan
from rewind.demo.events import event_id_for
from rewind.demo.producer import ProduceSpec, plan_record


@dataclass(frozen=True)
class ProducerKnobs:
    """The known set of events: deterministic ids ``PREFIX-SEQ`` with these faults mixed in."""

    id_prefix: str = "chaos"
    malformed_every: int = 97
    late_every: int = 211
    duplicate_every: int = 53
    keys: int = 16
    late_by_s: float = 3600.0


@dataclass(frozen=True)
class Expected:
    sends: int  # records the producer sends (duplicates included)
    event_ids: frozenset[str]  # valid events: each must be in the sink exactly once
    dead_letters: int  # malformed and late records (and re-sends of late ones), by coordinates
    malformed: int
    late: int
    duplicate_sends: int


def expected_records(events: int, knobs: ProducerKnobs = ProducerKnobs()) -> Expected:
    """What the producer's plan (``rewind.demo.producer.plan_record``) sends for sequence numbers 0..events-1."""

    spec = ProduceSpec(topic="-", count=events, id_prefix=knobs.id_prefix, keys=knobs.keys,
                       malformed_every=knobs.malformed_every, late_every=knobs.late_every,
                       late_by=timedelta(seconds=knobs.late_by_s), duplicate_every=knobs.duplicate_every)
    now = datetime(2026, 1, 1, tzinfo=UTC)  # the kinds do not depend on the time
    ids: set[str] = set()
    sends = dead = malformed = late = dups = 0
    for seq in range(events):
        kinds = [k for k, _, _ in plan_record(spec, seq, now)]
        sends += len(kinds)
        dups += kinds.count("duplicate")
        if kinds[0] == "event":
            ids.add(event_id_for(knobs.id_prefix, seq))
        elif kinds[0] == "malformed":
            malformed += 1
            dead += len(kinds)
        else:  # late: the record and any re-send of it are dead letters
            late += 1
            dead += len(kinds)
    return Expected(sends, frozenset(ids), dead, malformed, late, dups)


def backlog_behind(plan: BacklogPlan, knobs: ProducerKnobs = ProducerKnobs()) -> int:
    """Records of valid events (re-sends included) that a skewed restart's backlog puts at or behind
    the watermark the stream stopped at: what the first catch-up batches must route to the
    dead-letter table as ``behind_watermark`` (a catch-up over more batches routes more)."""

    spec = ProduceSpec(topic="-", count=plan.end_seq - plan.start_seq, id_prefix=knobs.id_prefix, keys=knobs.keys,
                       malformed_every=knobs.malformed_every, late_every=knobs.late_every,
                       late_by=timedelta(seconds=knobs.late_by_s), duplicate_every=knobs.duplicate_every)
    now = datetime(2026, 1, 1, tzinfo=UTC)  # the kinds do not depend on the time
    n = 0
    for seq in range(plan.start_seq, plan.end_seq):
        _, ms = plan.place(seq)
        if ms <= plan.watermark_ms:
            kinds = [k for k, _, _ in plan_record(spec, seq, now)]
            n += len(kinds) if kinds[0] == "event" else 0
    return n


Coord = tuple[str, int, int]


def compare_known(expected: Expected, ids_by_coord: dict[Coord, str], events: Iterable[tuple[str, Coord]],
                  dead: Iterable[tuple[Coord, str]], examples: int = 5) -> dict[str, Any]:
    """The known-set comparison (``facts["known"]``): ``ids_by_coord`` is the event id of every
    valid record in Kafka (duplicate sends included), ``events`` the events table as (event id,
    coordinates), ``dead`` the dead-letter table as (coordinates, reason)."""

    events = list(events)
    dead = list(dead)
    sink_ids = {i for i, _ in events}
    coords_by_id: dict[str, set[Coord]] = {}
    for c, i in ids_by_coord.items():
        coords_by_id.setdefault(i, set()).add(c)
    behind = {c for c, reason in dead if reason == BEHIND_WATERMARK}
    behind_only = {i for i in expected.event_ids - sink_ids if coords_by_id.get(i) and coords_by_id[i] <= behind}
    missing = sorted(expected.event_ids - sink_ids - behind_only)
    unexpected = sorted(sink_ids - expected.event_ids)
    partly = sorted(i for i in missing if coords_by_id.get(i, set()) & behind)
    not_known = sorted(c for c in behind if ids_by_coord.get(c) not in expected.event_ids)
    both = sorted({c for _, c in events} & {c for c, _ in dead})
    return {"expected_events": len(expected.event_ids), "sink_events": len(events), "missing": len(missing),
            "missing_examples": missing[:examples], "missing_partly_behind": len(partly),
            "unexpected": len(unexpected), "unexpected_examples": unexpected[:examples],
            "duplicate_rows": len(events) - len(sink_ids), "expected_dead_letters": expected.dead_letters,
            "sink_dead_letters": len(dead), "other_dead_letters": len(dead) - sum(1 for _, r in dead
                                                                                   if r == BEHIND_WATERMARK),
            "behind_watermark": len(behind), "behind_events": len(behind_only),
            "behind_not_known": len(not_known), "behind_not_known_examples": [list(c) for c in not_known[:examples]],
            "events_also_dead": len(both), "events_also_dead_examples": [list(c) for c in both[:examples]]}
