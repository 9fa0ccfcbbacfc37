"""The exactly-once proof: every Kafka data record against the sink, from the data.

Kafka is re-read with a plain consumer (not the Spark source under test), each
record is judged by the stream's own ``expect()`` (its transform's rules), and then:
- every valid event id is in the events table exactly once, at coordinates that
  carry that id in Kafka (duplicate sends collapse onto one row);
- every malformed or late record is in the dead-letter table at its coordinates;
- nothing is in the sink that Kafka does not hold;
- every window result equals a recomputation from the raw events, and every
  window the watermark has closed is present (``rewind.proof.aggregates``, the mechanism every
  proof uses for aggregate tables).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from rewind.api.contract import RECORD_COLUMNS, load_transform
from rewind.api.late import BEHIND_WATERMARK
from rewind.checkpoints.pointer import active_checkpoint
from rewind.checkpoints.watermark import planned_after
from rewind.driver.late_routing import explain
from rewind.driver.runner import open_sink
from rewind.kafka.client_config import kafka_options, stream_consumer_config
from rewind.kafka.lookups import check_reachable
from rewind.kafka.reader import read_to_end
from rewind.kafka.types import TP
from rewind.proof.aggregates import closing_horizon, judge_groups, recompute_measures
from rewind.proof.origin import stream_origin
from rewind.proof.scope import committed_position
from rewind.proof.values import rules_for

Coord = tuple[str, int, int]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class KafkaRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    value: bytes | None
    key: bytes | None = None


@dataclass
class ExactlyOnceReport:
    kafka_records: int = 0
    valid_records: int = 0
    distinct_events: int = 0
    duplicate_sends: int = 0
    expected_dead_letters: int = 0
    sink_events: int = 0
    sink_dead_letters: int = 0
    windows_checked: int = 0
    missing_events: list[str] = field(default_factory=list)
    duplicate_event_rows: int = 0
    duplicate_coordinate_rows: int = 0
    unexpected_events: list[str] = field(default_factory=list)
    wrong_coordinates: list[str] = field(default_factory=list)
    missing_dead_letters: list[Coord] = field(default_factory=list)
    unexpected_dead_letters: list[Coord] = field(default_factory=list)
    behind_watermark: int = 0  # valid records the stream routed to the dead-letter table as late
    not_behind_watermark: list[str] = field(default_factory=list)  # ... whose event time is not behind it
    events_also_dead: list[Coord] = field(default_factory=list)  # a record both an event and a dead letter
    missing_explained: list[dict] = field(default_factory=list)  # where each missing record was read, and why
    window_mismatches: list[dict] = field(default_factory=list)
    missing_windows: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing_events or self.duplicate_event_rows or self.duplicate_coordinate_rows
                    or self.unexpected_events or self.wrong_coordinates or self.missing_dead_letters
                    or self.unexpected_dead_letters or self.window_mismatches or self.missing_windows
                    or self.not_behind_watermark or self.events_also_dead)

    def summary(self, examples: int = 5) -> dict:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, list):
                out[key] = {"count": len(value), "examples": value[:examples]}
        out["ok"] = self.ok
        return out

    def __str__(self) -> str:
        return json.dumps(self.summary(), indent=1, default=str)


def _ts(value: object) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def records_frame(records: list[KafkaRecord]) -> pd.DataFrame:
    """Kafka records as the frame ``Transform.expect`` receives (``RECORD_COLUMNS``)."""
    frame = pd.DataFrame({
        "topic": pd.Series([r.topic for r in records], dtype=object),
        "partition": pd.Series([r.partition for r in records], dtype="int64"),
        "offset": pd.Series([r.offset for r in records], dtype="int64"),
        "timestamp": pd.Series([r.timestamp_ms for r in records], dtype="Int64"),
        "key": pd.Series([r.key for r in records], dtype=object),
        "value": pd.Series([r.value for r in records], dtype=object)})
    return frame[list(RECORD_COLUMNS)]


def utc_ns(values: object) -> pd.Series:
    """``_ts`` of every value, vectorised: naive times are taken as UTC, aware ones converted, in ns.

    Why: ``map(_ts)`` builds one Timestamp per row in Python. In a replay of 1,000,000 records
    (``bench/replay.py``, 2026-11-25, 2 cores) recomputing the touched windows took 14 s, most of
    it that map. Values ``pd.to_datetime`` cannot take as one column (strings in mixed formats)
    fall back to the per-value ``_ts``.
    """
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    try:
        out = pd.to_datetime(s, utc=True)
    except (ValueError, TypeError):
        out = pd.to_datetime(s.map(_ts), utc=True)
    return out.dt.as_unit("ns")


def check_exactly_once(records: Iterable[KafkaRecord], events: pd.DataFrame, dead: pd.DataFrame,
                       windows: pd.DataFrame, *, expected: pd.DataFrame, aggregate: Any, window: timedelta,
                       watermark_delay: timedelta, closed_until: datetime | None = None,
                       last_batch: int | None = None, rules: Mapping[str, Any] | None = None,
                       later: Collection[int] | None = None) -> ExactlyOnceReport:
    """Compare what Kafka holds with what the sink holds (pure: no I/O).

    ``expected``: the transform's ``expect()`` over ``records`` (same order): ``event_id``, ``key``,
    ``amount``, ``event_time``, ``reason``. ``aggregate``: the stream's ``Aggregate`` of the window
    table (None: no windows judged). ``last_batch``: window rows of later batches are not judged;
    ``rules``: the window table's column rules (``rewind.proof.values.rules_for``).

    A valid record may be in the dead-letter table instead of behind an event row only with reason
    ``behind_watermark`` and an event time at or before the watermark recorded with it (Spark's
    stateful operators would have dropped it); every other valid record's event id must be in the
    events table, and no record may be both an event row and a dead letter.
    """

    records = list(records)
    rep = ExactlyOnceReport()
    coords_by_id: dict[str, set[Coord]] = defaultdict(set)
    event_time_us: dict[Coord, int] = {}
    expected_dead: set[Coord] = set()
    exp = expected.reset_index(drop=True)
    counted_rows = []
    for i, rec in enumerate(records):
        rep.kafka_records += 1
        reason, event_id = exp.at[i, "reason"], exp.at[i, "event_id"]
        coord = (rec.topic, int(rec.partition), int(rec.offset))
        if reason is not None and not (isinstance(reason, float) and pd.isna(reason)):
            expected_dead.add(coord)
        else:
            rep.valid_records += 1
            coords_by_id[str(event_id)].add(coord)
            event_time_us[coord] = int(_ts(exp.at[i, "event_time"]).value // 1000)
            counted_rows.append(i)
    rep.distinct_events = len(coords_by_id)
    rep.duplicate_sends = rep.valid_records - rep.distinct_events
    rep.expected_dead_letters = len(expected_dead)

    rep.sink_dead_letters = len(dead)
    dead_coords = set(zip(dead["topic"], dead["partition"].astype(int), dead["offset"].astype(int))) \
        if len(dead) else set()
    behind: set[Coord] = set()
    if len(dead) and "reason" in dead:
        wm_col = dead["watermark"] if "watermark" in dead else pd.Series([None] * len(dead), index=dead.index)
        for t, p, o, reason, wm in zip(dead["topic"], dead["partition"], dead["offset"], dead["reason"], wm_col):
            coord = (t, int(p), int(o))
            if reason != BEHIND_WATERMARK or coord not in event_time_us:
                continue
            behind.add(coord)
            wm_us = None if wm is None or pd.isna(wm) else int(_ts(wm).value // 1000)
            if wm_us is None or event_time_us[coord] > wm_us:
                rep.not_behind_watermark.append(f"{coord}: event time {event_time_us[coord]} us, watermark {wm}")
    rep.behind_watermark = len(behind)
    rep.missing_dead_letters = sorted(expected_dead - dead_coords)
    rep.unexpected_dead_letters = sorted(dead_coords - expected_dead - behind)

    rep.sink_events = len(events)
    rep.duplicate_event_rows = int(len(events) - events["event_id"].nunique()) if len(events) else 0
    ev_coords = list(zip(events["topic"], events["partition"].astype(int), events["offset"].astype(int)))
    rep.duplicate_coordinate_rows = len(ev_coords) - len(set(ev_coords))
    rep.events_also_dead = sorted(set(ev_coords) & dead_coords)
    sink_ids = set(events["event_id"]) if len(events) else set()
    # an id must have an event row unless every record carrying it went to the dead-letter table
    owed = {eid for eid, coords in coords_by_id.items() if coords - behind}
    rep.missing_events = sorted(owed - sink_ids)
    rep.unexpected_events = sorted(sink_ids - set(coords_by_id))
    for eid, coord in zip(events["event_id"], ev_coords):
        if eid in coords_by_id and coord not in coords_by_id[eid]:
            rep.wrong_coordinates.append(f"{eid} at {coord}")

    if aggregate is not None:
        coords_of = [(r.topic, int(r.partition), int(r.offset)) for r in records]
        counted = exp.iloc[[i for i in counted_rows if coords_of[i] not in behind]]
        _check_windows(rep, counted.drop_duplicates("event_id"), windows, aggregate, aggregate.size or window,
                       watermark_delay, closed_until, last_batch, rules, later)
    return rep


def recompute_windows(events: pd.DataFrame, window: timedelta) -> pd.DataFrame:
    """Tumbling-window count and sum per key, straight from the raw events."""
    if not len(events):
        return pd.DataFrame(columns=["window_start", "key", "event_count", "amount_sum"])
    ev = events.assign(event_time=utc_ns(events["event_time"]))
    ev["window_start"] = ev["event_time"].dt.floor(pd.Timedelta(window))
    return (ev.groupby(["window_start", "key"]).agg(event_count=("event_id", "size"), amount_sum=("amount", "sum"))
            .reset_index())


def _check_windows(rep: ExactlyOnceReport, counted: pd.DataFrame, windows: pd.DataFrame, aggregate: Any,
                   window: timedelta, watermark_delay: timedelta, closed_until: datetime | None = None,
                   last_batch: int | None = None, rules: Mapping[str, Any] | None = None,
                   later: Collection[int] | None = None) -> None:
    """Windows against their recomputation (``rewind.proof.aggregates``); a window counts as closed up to
    the raw horizon (max event time minus the delay) and, given ``closed_until`` (a running stream's
    last committed watermark), not past it: the stream emits a window in the batch after its watermark
    passes it."""

    latest = utc_ns(counted["event_time"]).max() if len(counted) else None
    horizon = closing_horizon(closed_until, latest, watermark_delay)
    frame = judge_groups(windows, recompute_measures(counted, aggregate, window), aggregate,
                         values=[m.column for m in aggregate.measures], size=window, closed_until=horizon,
                         last_batch=last_batch, rules=rules, later=later)
    rep.windows_checked = int(frame["sink"].notna().sum())
    for row in frame.itertuples():
        if row.aggregate_state in ("mismatch", "unexpected", "duplicate"):
            rep.window_mismatches.append({"group": row.group, "state": row.aggregate_state, "sink": row.sink,
                                          "recomputed": row.recomputed, "disagrees": row.disagrees})
        elif row.aggregate_state == "missing":
            rep.missing_windows.append({"group": row.group, "recomputed": row.recomputed})


def read_records(bootstrap: str, topics: list[str], timeout: float = 60.0,
                 source_options: dict[str, str] | None = None,
                 upper: dict[tuple[str, int], int] | None = None,
                 lower: dict[tuple[str, int], int] | None = None) -> list[KafkaRecord]:
    """Every record of ``topics`` up to each partition's end as it was when the read began (below
    ``upper`` per partition when given), read with the stream's own ``kafka.*`` options (security,
    isolation level). ``timeout``: the longest wait without progress."""

    check_reachable(bootstrap, topics, kafka_options(source_options or {}))  # one clear line, not 60 s of retries
    config = stream_consumer_config(source_options or {}, bootstrap, "rewind-verify")
    config["fetch.max.bytes"] = 52428800
    bound = None if upper is None else {TP(t, p): o for (t, p), o in upper.items()}
    floor = None if lower is None else {TP(t, p): o for (t, p), o in lower.items()}
    out: list[KafkaRecord] = []
    for batch in read_to_end(config, topics, timeout, bound, lower=floor):
        for msg in batch:
            ts_type, ts = msg.timestamp()
            # a record always has topic, partition and offset (confluent-kafka types them Optional)
            out.append(KafkaRecord(msg.topic(), msg.partition(), msg.offset(),  # type: ignore[arg-type]
                                   ts if ts_type else None, msg.value(), msg.key()))
    return out


def explain_missing(spec, records: list[KafkaRecord], expected: pd.DataFrame,  # type: ignore[no-untyped-def]
                    missing_ids: set[str]) -> list[dict]:
    """Where the records of missing events were read, and whether they were behind the watermark."""

    coords = []
    exp = expected.reset_index(drop=True)
    for i, rec in enumerate(records):
        if exp.at[i, "event_id"] in missing_ids and pd.isna(exp.at[i, "reason"]):
            coords.append(((rec.topic, rec.partition, rec.offset), int(_ts(exp.at[i, "event_time"]).value // 1000)))
    return explain(coords, active_checkpoint(spec))


def with_duplicates(sink: Any, name: str, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (a table as read) with the copies of keys the storage holds more than once
    (``Sink.duplicate_rows``): a proof counts every committed copy, not one per key."""
    extra = sink.duplicate_rows(name)
    return pd.concat([rows, extra[[c for c in rows.columns if c in extra.columns]]], ignore_index=True) \
        if len(extra) else rows


def below(bounds: dict[tuple[str, int], int], frame: pd.DataFrame) -> pd.DataFrame:
    """Rows whose Kafka coordinates lie below the per-partition bound (others are in flight)."""
    if not len(frame):
        return frame
    limit = [bounds.get((t, int(p)), 0) for t, p in zip(frame["topic"], frame["partition"])]
    return frame[frame["offset"].astype("int64").to_numpy() < pd.Series(limit, dtype="int64").to_numpy()]


def committed_bounds(status_end_offsets: dict[str, dict[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in status_end_offsets.items() for p, o in parts.items()}


def verify_stream(spec, bootstrap: str,  # type: ignore[no-untyped-def]
                  bounds: dict[tuple[str, int], int] | None = None, *, committed: Any = None) -> ExactlyOnceReport:
    """Read Kafka and the stream's sink tables and compare (I/O edge of check_exactly_once).

    ``committed``: what the stream had committed when the proof began (``rewind.proof.scope``; read
    here when not given): the proof judges records below ``bounds`` (default: that batch's end
    offsets) and rows of that batch or earlier; windows count as closed up to its watermark.
    """

    committed = committed or committed_position(spec)
    if bounds is None:
        bounds = committed.end_offsets
    transform = load_transform(spec)
    sink = open_sink(spec, transform)
    try:
        d = spec.durations()
        records = read_records(bootstrap, spec.topics, source_options=spec.source.options, upper=bounds,
                               lower=stream_origin(spec) or None)  # a stream started mid-topic: from its start
        expected = transform.expect(records_frame(records), spec)
        events, dead = sink.read_table("events"), sink.read_table("dead_letter")
        events = with_duplicates(sink, "events", events)
        if bounds is not None:
            events, dead = below(bounds, events), below(bounds, dead)
        # Windows count as closed up to the watermark of the stream's last committed batch (as in the
        # DQ proof): the stream emits a window in the batch after its watermark passes it, so a stream
        # stopped (or killed) before that batch has not failed to write it yet; its restart will.
        aggregate = next((a for a in transform.aggregates if a.table == "window_results"), None)
        windows = sink.read_table("window_results") if aggregate is not None else pd.DataFrame()
        rules = rules_for(sink.specs["window_results"]) if aggregate is not None else {}
        later = planned_after(spec, committed.batch) if committed.batch is not None else None  # after the reads
        report = check_exactly_once(records, events, dead, windows, expected=expected, aggregate=aggregate,
                                    window=d["window"], watermark_delay=d["watermark_delay"],
                                    closed_until=committed.watermark, last_batch=committed.batch, rules=rules,
                                    later=later)
        if report.missing_events:
            report.missing_explained = explain_missing(spec, records, expected, set(report.missing_events))
        return report
    finally:
        sink.dispose()
