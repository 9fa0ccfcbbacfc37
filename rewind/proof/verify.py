"""The exactly-once proof: every Kafka data record against the sink, from the data.

Kafka is re-read with a plain consumer (not the Spark source under test), each
record is judged by the same classifier the stream uses, and then:
- every valid event id is in the events table exactly once, at coordinates that
  carry that id in Kafka (duplicate sends collapse onto one row);
- every malformed or late record is in the dead-letter table at its coordinates;
- nothing is in the sink that Kafka does not hold;
- every window result equals a recomputation from the raw events, and every
  window the watermark has closed is present.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

import pandas as pd

from rewind.proof.classify import classify

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
                       windows: pd.DataFrame, *, allowed_lateness: timedelta, window: timedelta,
                       watermark_delay: timedelta, closed_until: datetime | None = None) -> ExactlyOnceReport:
    """Compare what Kafka holds with what the sink holds (pure: no I/O).

    A valid record may be in the dead-letter table instead of behind an event row only with reason
    ``behind_watermark`` and an event time at or before the watermark recorded with it (Spark's
    stateful operators would have dropped it); every other valid record's event id must be in the
    events table, and no record may be both an event row and a dead letter.
    """
    from rewind.stream.late_routing import BEHIND_WATERMARK

    rep = ExactlyOnceReport()
    coords_by_id: dict[str, set[Coord]] = defaultdict(set)
    event_time_us: dict[Coord, int] = {}
    expected_dead: set[Coord] = set()
    for rec in records:
        rep.kafka_records += 1
        verdict = classify(rec.value, rec.timestamp_ms, allowed_lateness)
        coord = (rec.topic, int(rec.partition), int(rec.offset))
        if verdict.event is None:
            expected_dead.add(coord)
        else:
            rep.valid_records += 1
            coords_by_id[verdict.event.event_id].add(coord)
            event_time_us[coord] = (verdict.event.event_time - _EPOCH) // timedelta(microseconds=1)
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

    _check_windows(rep, events, windows, window, watermark_delay, closed_until)
    return rep


def recompute_windows(events: pd.DataFrame, window: timedelta) -> pd.DataFrame:
    """Tumbling-window count and sum per key, straight from the raw events."""
    if not len(events):
        return pd.DataFrame(columns=["window_start", "key", "event_count", "amount_sum"])
    ev = events.assign(event_time=utc_ns(events["event_time"]))
    ev["window_start"] = ev["event_time"].dt.floor(pd.Timedelta(window))
    return (ev.groupby(["window_start", "key"]).agg(event_count=("event_id", "size"), amount_sum=("amount", "sum"))
            .reset_index())


def _check_windows(rep: ExactlyOnceReport, events: pd.DataFrame, windows: pd.DataFrame, window: timedelta,
                   watermark_delay: timedelta, closed_until: datetime | None = None) -> None:
    """Windows against their recomputation; a window counts as closed up to the raw horizon (max event
    time minus the delay) and, given ``closed_until`` (a running stream's last committed watermark),
    not past it: the stream emits a window in the batch after its watermark passes it."""
    expected = recompute_windows(events, window)
    exp = {(row.window_start, row.key): (int(row.event_count), float(row.amount_sum))
           for row in expected.itertuples()}
    rep.windows_checked = len(windows)
    seen = set()
    for row in windows.itertuples():
        k = (_ts(row.window_start), row.key)
        seen.add(k)
        want = exp.get(k)
        if want is None or want[0] != int(row.event_count) or abs(want[1] - float(row.amount_sum or 0)) > 1e-6:
            rep.window_mismatches.append({"window_start": str(k[0]), "key": k[1], "sink": (
                int(row.event_count), float(row.amount_sum or 0)), "recomputed": want})
    if len(events):
        watermark = utc_ns(events["event_time"]).max() - pd.Timedelta(watermark_delay)
        if closed_until is not None:
            watermark = min(watermark, _ts(closed_until))
        for (start, key), want in exp.items():
            if start + pd.Timedelta(window) <= watermark and (start, key) not in seen:
                rep.missing_windows.append({"window_start": str(start), "key": key, "recomputed": want})


def read_records(bootstrap: str, topics: list[str], timeout: float = 60.0,
                 source_options: dict[str, str] | None = None,
                 upper: dict[tuple[str, int], int] | None = None,
                 lower: dict[tuple[str, int], int] | None = None) -> list[KafkaRecord]:
    """Every record of ``topics`` up to each partition's end as it was when the read began (below
    ``upper`` per partition when given), read with the stream's own ``kafka.*`` options (security,
    isolation level). ``timeout``: the longest wait without progress."""
    from rewind.kafka.client_config import kafka_options, stream_consumer_config
    from rewind.kafka.lookups import check_reachable
    from rewind.kafka.reader import read_to_end
    from rewind.kafka.types import TP

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


def explain_missing(spec, records: list[KafkaRecord], missing_ids: set[str],  # type: ignore[no-untyped-def]
                    allowed_lateness: timedelta) -> list[dict]:
    """Where the records of missing events were read, and whether they were behind the watermark."""
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.stream.late_routing import explain

    coords = []
    for rec in records:
        verdict = classify(rec.value, rec.timestamp_ms, allowed_lateness)
        if verdict.event is not None and verdict.event.event_id in missing_ids:
            us = (verdict.event.event_time - _EPOCH) // timedelta(microseconds=1)
            coords.append(((rec.topic, rec.partition, rec.offset), us))
    return explain(coords, active_checkpoint(spec))


def below(bounds: dict[tuple[str, int], int], frame: pd.DataFrame) -> pd.DataFrame:
    """Rows whose Kafka coordinates lie below the per-partition bound (others are in flight)."""
    if not len(frame):
        return frame
    limit = [bounds.get((t, int(p)), 0) for t, p in zip(frame["topic"], frame["partition"])]
    return frame[frame["offset"].astype("int64").to_numpy() < pd.Series(limit, dtype="int64").to_numpy()]


def committed_bounds(status_end_offsets: dict[str, dict[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in status_end_offsets.items() for p, o in parts.items()}


def verify_stream(spec, bootstrap: str,  # type: ignore[no-untyped-def]
                  bounds: dict[tuple[str, int], int] | None = None) -> ExactlyOnceReport:
    """Read Kafka and the stream's sink tables and compare (I/O edge of check_exactly_once).

    ``bounds`` limits the proof to offsets below them per partition: for a running stream, the
    end offsets of its last committed batch (later records are still in flight).
    """
    from rewind.stream.runner import open_sink

    sink = open_sink(spec)
    try:
        d = spec.durations()
        records = read_records(bootstrap, spec.topics, source_options=spec.source.options, upper=bounds)
        events, dead = sink.read_table("events"), sink.read_table("dead_letter")
        if bounds is not None:
            events, dead = below(bounds, events), below(bounds, dead)
        # Windows count as closed up to the watermark of the stream's last committed batch (as in the
        # DQ proof): the stream emits a window in the batch after its watermark passes it, so a stream
        # stopped (or killed) before that batch has not failed to write it yet; its restart will.
        from rewind.checkpoints.watermark import stream_watermark

        closed_until = stream_watermark(spec, None)[0]
        report = check_exactly_once(records, events, dead, sink.read_table("window_results"),
                                    allowed_lateness=d["allowed_lateness"], window=d["window"],
                                    watermark_delay=d["watermark_delay"], closed_until=closed_until)
        if report.missing_events:
            report.missing_explained = explain_missing(spec, records, set(report.missing_events),
                                                       d["allowed_lateness"])
        return report
    finally:
        sink.dispose()


