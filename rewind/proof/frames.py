"""Kafka and the sink as four frames for the suite to judge (pure: no I/O).

The frames (each validated by the suite ``STREAM.exactly_once.FRAME`` of ``rewind.proof.checks``):

- ``events``: the sink's event rows whose Kafka coordinates lie in the range, with the
  event id Kafka holds at those coordinates (``kafka_event_id``);
- ``dead_letter``: the sink's dead-letter rows in the range, with what the classifier
  says of the Kafka record at those coordinates (``kafka_verdict``) and whether it belongs
  there (``dead_letter_check``);
- ``coverage``: one row per Kafka data record in the range and where it landed
  (``landed_in``: events / dead_letter / behind_watermark / duplicate_send (a re-send of an
  event the sink holds once, at another coordinate that carries the same id) / missing /
  events+dead_letter / wrong_coordinates);
- ``aggregates``: the sink's aggregate rows (the stream's ``Aggregate`` declaration, e.g. the
  demo's window results) beside their recomputation from the valid Kafka records
  (``rewind.proof.aggregates``, the mechanism every suite shares), one row per group with its
  state (match / mismatch / missing: closed but absent / pending: not yet closed by the stream's
  watermark / unexpected / duplicate).

Each record is judged by the stream's own ``expect()`` (its transform, not code of this package).
Only records in ``[start, end)`` (and sink rows at those coordinates, and the windows their
events fall in) are judged; the records before ``start`` are context (a duplicate send's first
copy, a window's earlier events), and a window's expected result counts every valid event
Kafka holds for it, also past the range's end.

Windows are judged as far as the stream has closed them: a window counts as closed when
its end is at or below both the raw horizon (max event time minus the watermark delay)
and the watermark of the stream's last committed batch (``offsets/N`` in its
checkpoint), so a stream stopped before its next batch is not blamed for windows it has
not emitted yet (they are counted as ``pending``). While the stream runs, window rows
written by batches after the one the range ends at are left out (they may hold records
beyond the range).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from rewind.api.late import BEHIND_WATERMARK
from rewind.proof.aggregates import (
    FRAME_COLUMNS,
    closing_horizon,
    counts_of,
    group_text,
    judge_groups,
    recompute_measures,
)
from rewind.proof.checks import COORDS, FRAMES
from rewind.proof.verify import KafkaRecord, utc_ns

Bounds = Mapping[Any, Any]


@dataclass
class ProofFrames:
    """The four frames the suite validates, the counts behind the log's summary, and the range judged."""

    events: pd.DataFrame
    dead_letter: pd.DataFrame
    coverage: pd.DataFrame
    aggregates: pd.DataFrame
    counts: dict[str, Any]
    range: dict[str, dict[str, list[int]]]

    def frames(self) -> dict[str, pd.DataFrame]:
        return {name: getattr(self, name) for name in FRAMES}


def normalize_bounds(bounds: Bounds | None) -> dict[tuple[str, int], tuple[int, int]] | None:
    """``{(topic, partition): end | (start, end)}`` or ``{"topic": {"0": end | [start, end]}}`` ->
    ``{(topic, partition): (start, end)}`` (None stays None: no bounds)."""
    if bounds is None:
        return None
    out: dict[tuple[str, int], tuple[int, int]] = {}

    def put(topic: str, part: Any, value: Any) -> None:
        start, end = (0, value) if isinstance(value, (int, np.integer)) else value
        if int(start) < 0 or int(end) < int(start):
            raise ValueError(f"bad range for {topic}/{part}: [{start}, {end})")
        out[(str(topic), int(part))] = (int(start), int(end))

    for k, v in bounds.items():
        if isinstance(k, tuple):
            put(k[0], k[1], v)
        elif isinstance(v, Mapping):
            for part, value in v.items():
                put(k, part, value)
        else:
            raise ValueError(f"bounds: expected {{(topic, partition): [start, end)}} or {{topic: {{partition: "
                             f"[start, end)}}}}, got key {k!r}")
    return out


def kafka_frame(records: Iterable[KafkaRecord], expected: pd.DataFrame) -> pd.DataFrame:
    """One row per Kafka record with the stream's verdict ('event' or 'dead') and the event's fields.

    ``expected``: the transform's ``expect()`` over the records, in their order (``event_id``,
    ``key``, ``amount``, ``event_time``, ``reason``): the stream's own rules, not a copy of them.
    """
    recs = list(records)
    exp = expected.reset_index(drop=True)
    if len(exp) != len(recs):
        raise ValueError(f"expect() gave {len(exp)} rows for {len(recs)} records")
    reason = exp["reason"].astype(object).where(exp["reason"].notna(), None) if len(exp) else \
        pd.Series([], dtype=object)
    dead = reason.notna().to_numpy()
    df = pd.DataFrame({
        "topic": pd.Series([r.topic for r in recs], dtype=object),
        "partition": pd.Series([int(r.partition) for r in recs], dtype="int64"),
        "offset": pd.Series([int(r.offset) for r in recs], dtype="int64"),
        "kafka_timestamp": pd.to_datetime(pd.Series([r.timestamp_ms for r in recs], dtype="float64"), unit="ms",
                                          utc=True),
        "verdict": pd.Series(np.where(dead, "dead", "event"), dtype=object),
        "event_id": exp["event_id"].astype(object).where(~dead, None) if len(exp) else pd.Series([], dtype=object),
        "key": exp["key"].astype(object).where(~dead, None) if len(exp) else pd.Series([], dtype=object),
        "amount": pd.to_numeric(exp["amount"], errors="coerce").astype("float64") if len(exp) else
        pd.Series([], dtype="float64"),
        "event_time": pd.to_datetime(exp["event_time"], utc=True) if len(exp) else
        pd.Series([], dtype="datetime64[ns, UTC]"),
        "reason": reason})
    df.loc[dead, "event_time"] = pd.NaT
    return df


def _coords_int(frame: pd.DataFrame) -> pd.DataFrame:
    """Kafka coordinates as plain int64/str so that frames join (sink tables read as Int64)."""
    out = frame.copy()
    out["topic"] = out["topic"].astype(object)
    for c in ("partition", "offset"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("Int64")
    return out


def range_mask(frame: pd.DataFrame, bounds: dict[tuple[str, int], tuple[int, int]] | None,
                *, from_start: bool = True) -> np.ndarray:
    """Rows whose coordinates lie in ``[start, end)`` (``from_start=False``: below ``end``)."""
    if bounds is None:
        return np.ones(len(frame), dtype=bool)
    if not len(frame):
        return np.zeros(0, dtype=bool)
    keys = list(zip(frame["topic"], frame["partition"]))
    start = np.array([bounds.get((t, int(p)), (0, 0))[0] if p is not pd.NA else 0 for t, p in keys], dtype="int64")
    end = np.array([bounds.get((t, int(p)), (0, 0))[1] if p is not pd.NA else 0 for t, p in keys], dtype="int64")
    off = pd.to_numeric(frame["offset"], errors="coerce").fillna(-1).astype("int64").to_numpy()
    mask = off < end
    return mask & (off >= start) if from_start else mask


def build_frames(kafka: pd.DataFrame, events: pd.DataFrame, dead: pd.DataFrame, windows: pd.DataFrame, *,
                 bounds: dict[tuple[str, int], tuple[int, int]] | None, window: timedelta,
                 watermark_delay: timedelta, aggregate: Any, stream_watermark: datetime | None = None,
                 last_batch: int | None = None, rules: Mapping[str, Any] | None = None,
                 later: Collection[int] | None = None) -> ProofFrames:
    """Kafka (``kafka_frame``) and sink tables -> the four frames the suites validate (pure: no I/O).

    ``kafka`` holds every record read (from the beginning up to the end bounds or further);
    only records in ``bounds`` and sink rows at coordinates in ``bounds`` are judged.
    ``windows``: the sink's rows of ``aggregate`` (the stream's ``Aggregate`` declaration, with
    its measures over the events' columns); ``window``: its size unless it declares one.
    ``stream_watermark``: the watermark of the stream's last committed batch, if known.
    ``last_batch``: leave out aggregate rows written by later batches (a running stream).
    ``rules``: the window table's column rules (``rewind.proof.values.rules_for``).
    """
    kafka = kafka.reset_index(drop=True)
    ctx = kafka[range_mask(kafka, bounds, from_start=False)]  # context: everything below the end bounds
    rng = kafka[range_mask(kafka, bounds)].sort_values(COORDS).reset_index(drop=True)
    ev_all, dead_all = _coords_int(events), _coords_int(dead)
    kc = _coords_int(kafka[[*COORDS, "verdict", "event_id", "event_time"]]).rename(
        columns={"verdict": "kafka_verdict", "event_id": "kafka_event_id", "event_time": "kafka_event_time"})

    # events in range, with what Kafka holds at their coordinates
    ev = ev_all[range_mask(ev_all, bounds)].reset_index(drop=True)
    ev = ev.merge(kc.drop(columns=["kafka_event_time"]), on=COORDS, how="left")
    ev["kafka_verdict"] = ev["kafka_verdict"].fillna("absent")
    ev = ev.astype({"kafka_event_id": object})

    dl = dead_all[range_mask(dead_all, bounds)].reset_index(drop=True)
    dl = dl.merge(kc.drop(columns=["kafka_event_id"]), on=COORDS, how="left")
    dl["kafka_verdict"] = dl["kafka_verdict"].fillna("absent")
    dl["dead_letter_check"] = _dead_letter_check(dl)

    behind_all = dead_all[COORDS].iloc[0:0] if not len(dead_all) else \
        dead_all.merge(kc, on=COORDS, how="left").pipe(lambda d: d[_dead_letter_check(d) == "behind_watermark"])[COORDS]
    coverage = _coverage(_coords_int(rng), ev_all, dead_all, kc.drop(columns=["kafka_event_time"]), behind_all)
    # What the stream's windows could count: every valid record but those it dropped as late.
    counted = _coords_int(kafka).merge(_coords_int(behind_all).drop_duplicates().assign(_behind=True), on=COORDS,
                                        how="left")
    counted = kafka[counted.pop("_behind").isna().to_numpy()]
    size = (aggregate.size if aggregate else None) or window
    win, win_counts = _aggregates(ctx, rng, windows, aggregate, bounds=bounds, kafka=counted, size=size,
                                  watermark_delay=watermark_delay, stream_watermark=stream_watermark,
                                  last_batch=last_batch, rules=rules, later=later)

    landed = coverage["landed_in"].value_counts().to_dict() if len(coverage) else {}
    valid = rng[rng["verdict"] == "event"]
    counts: dict[str, Any] = {
        "records_in_range": int(len(rng)),
        "valid_records": int(len(valid)),
        "distinct_events": int(valid["event_id"].nunique()),
        "duplicate_sends": int(landed.get("duplicate_send", 0)),
        "expected_dead_letters": int((rng["verdict"] == "dead").sum()),
        "sink_events": int(len(ev)),
        "sink_dead_letters": int(len(dl)),
        "duplicate_event_rows": int(ev["event_id"].notna().sum() - ev["event_id"].nunique()),
        "duplicate_coordinate_rows": int(ev.duplicated(COORDS).sum() + dl.duplicated(COORDS).sum()),
        "missing": int(landed.get("missing", 0)),
        "behind_watermark": int(landed.get("behind_watermark", 0)),
        "misplaced": int(landed.get("wrong_coordinates", 0) + landed.get("events+dead_letter", 0)),
        "unexpected_sink_rows": int((ev["event_id"].astype(object) != ev["kafka_event_id"]).sum()
                                    + (~dl["dead_letter_check"].isin(["dead", "behind_watermark"])).sum()),
        **win_counts,
    }
    if len(rng):
        spans = rng.groupby(["topic", "partition"])["offset"].agg(["min", "max"])
        rng_doc: dict[str, dict[str, list[int]]] = {}
        for (t, p), row in spans.iterrows():
            lo, hi = (bounds or {}).get((t, int(p)), (int(row["min"]), int(row["max"]) + 1))
            rng_doc.setdefault(t, {})[str(p)] = [int(lo), int(hi)]
    else:
        rng_doc = {}
    for (t, p), (lo, hi) in (bounds or {}).items():
        rng_doc.setdefault(t, {}).setdefault(str(p), [lo, hi])
    return ProofFrames(ev, dl, coverage, win, counts, rng_doc)


def _dead_letter_check(dl: pd.DataFrame) -> np.ndarray:
    """Per dead letter: 'dead' (the classifier's verdict), 'behind_watermark' (a valid record at or behind
    the watermark recorded with it), else what is wrong ('absent', 'event', 'not_behind_watermark')."""
    if not len(dl):
        return np.array([], dtype=object)

    verdict = dl["kafka_verdict"].astype(object).fillna("absent").to_numpy()
    reason = (dl["reason"] if "reason" in dl else pd.Series([None] * len(dl))).astype(object).to_numpy()
    no_times = pd.Series(pd.NaT, index=dl.index, dtype="datetime64[ns, UTC]")
    wm = utc_ns(dl["watermark"]) if "watermark" in dl else no_times
    et = utc_ns(dl["kafka_event_time"]) if "kafka_event_time" in dl else no_times
    is_behind = (et <= wm).fillna(False).to_numpy(dtype=bool)
    late_reason = reason == BEHIND_WATERMARK
    return np.select([verdict == "dead", (verdict == "event") & late_reason & is_behind,
                      (verdict == "event") & late_reason],
                     ["dead", "behind_watermark", "not_behind_watermark"], default=verdict).astype(object)


def _coverage(rng: pd.DataFrame, ev_all: pd.DataFrame, dead_all: pd.DataFrame, kc: pd.DataFrame,
              behind: pd.DataFrame) -> pd.DataFrame:
    """Where each Kafka record of the range landed in the sink (``landed_in``), and where its id's event row is."""
    cov = rng[[*COORDS, "kafka_timestamp", "verdict", "event_id", "reason"]].copy()
    ev_coords = ev_all[COORDS].dropna().drop_duplicates().assign(_in_events=True)
    dead_coords = dead_all[COORDS].dropna().drop_duplicates().assign(_in_dead=True)
    behind_coords = _coords_int(behind).drop_duplicates().assign(_behind=True)
    cov = (cov.merge(ev_coords, on=COORDS, how="left").merge(dead_coords, on=COORDS, how="left")
           .merge(behind_coords, on=COORDS, how="left"))
    in_events = cov.pop("_in_events").astype("boolean").fillna(False).to_numpy(dtype=bool)
    in_dead = cov.pop("_in_dead").astype("boolean").fillna(False).to_numpy(dtype=bool)
    is_behind = cov.pop("_behind").astype("boolean").fillna(False).to_numpy(dtype=bool)
    # where the sink holds each event id (first row of an id: a real table has one)
    first = (ev_all[ev_all["event_id"].notna()].drop_duplicates("event_id")[["event_id", *COORDS]]
             .rename(columns={c: f"sink_{c}" for c in COORDS}))
    cov = cov.merge(first, on="event_id", how="left")
    at_sink = kc.rename(columns={c: f"sink_{c}" for c in COORDS})[[*(f"sink_{c}" for c in COORDS), "kafka_event_id"]]
    cov = cov.merge(at_sink, on=[f"sink_{c}" for c in COORDS], how="left")
    is_event = (cov["verdict"] == "event").to_numpy()
    has_row = cov["sink_offset"].notna().to_numpy() & is_event
    same_id_there = (cov["kafka_event_id"].astype(object) == cov["event_id"].astype(object)).to_numpy(dtype=bool)
    at_own = has_row & ((cov["sink_topic"].astype(object) == cov["topic"].astype(object)).to_numpy(dtype=bool)
                        & (cov["sink_partition"] == cov["partition"]).fillna(False).to_numpy(dtype=bool)
                        & (cov["sink_offset"] == cov["offset"]).fillna(False).to_numpy(dtype=bool))
    landed = np.select(
        [at_own & in_dead, at_own, is_event & is_behind, has_row & same_id_there, has_row, is_event,
         in_dead & in_events, in_dead],
        ["events+dead_letter", "events", "behind_watermark", "duplicate_send", "wrong_coordinates", "missing",
         "events+dead_letter", "dead_letter"], default="missing")
    cov["landed_in"] = landed.astype(object)
    cov["sink_location"] = [f"{t}/{p}/{o}" if o is not pd.NA and o == o else None
                            for t, p, o in zip(cov["sink_topic"], cov["sink_partition"], cov["sink_offset"])]
    cov = cov.drop(columns=["sink_topic", "sink_partition", "sink_offset", "kafka_event_id"])
    return cov


def _aggregates(ctx: pd.DataFrame, rng: pd.DataFrame, sink: pd.DataFrame, aggregate: Any, *,
                bounds: dict[tuple[str, int], tuple[int, int]] | None, kafka: pd.DataFrame, size: timedelta,
                watermark_delay: timedelta, stream_watermark: datetime | None,
                last_batch: int | None, rules: Mapping[str, Any] | None = None,
                later: Collection[int] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The sink's aggregate rows beside their recomputation from the valid events (``rewind.proof.aggregates``).

    Expected results count every valid event of a group, also those after the range's end: a
    window is by event time, the stream counted them, and a range may end mid-window (a replay).
    The horizon comes from the context only (what is below the end bounds).
    """
    if aggregate is None:

        empty = pd.DataFrame(columns=FRAME_COLUMNS)
        return empty, {**counts_of(empty), "windows_checked": 0, "windows_mismatched": 0, "windows_missing": 0,
                       "windows_pending": 0, "window_horizon": None}
    valid = ctx[ctx["verdict"] == "event"].drop_duplicates("event_id")
    every = kafka[kafka["verdict"] == "event"].drop_duplicates("event_id")
    recomputed = recompute_measures(every, aggregate, size)
    scope = None
    if bounds is not None:  # a bounded range judges only the groups its own events fall in
        scope = set(group_text(recompute_measures(rng[rng["verdict"] == "event"], aggregate, size), aggregate, rules))
    latest = utc_ns(valid["event_time"]).max() if len(valid) else None
    horizon = closing_horizon(stream_watermark, latest, watermark_delay)
    frame = judge_groups(sink, recomputed, aggregate, values=[m.column for m in aggregate.measures], size=size,
                         closed_until=horizon, scope=scope, last_batch=last_batch, rules=rules, later=later)
    agg_counts = counts_of(frame)
    counts = {**agg_counts, "windows_checked": agg_counts["aggregates_checked"],
              "windows_mismatched": agg_counts["aggregates_mismatch"] + agg_counts["aggregates_unexpected"]
              + agg_counts["aggregates_duplicate"],
              "windows_missing": agg_counts["aggregates_missing"], "windows_pending": agg_counts["aggregates_pending"],
              "window_horizon": None if horizon is None else horizon.isoformat()}
    return frame, counts
