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
- ``windows``: the sink's window results joined with ``rewind.proof.verify.recompute_windows``
  over the raw Kafka events, with the window state (match / mismatch / missing: closed
  but absent / pending: not yet closed by the stream's watermark).

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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from rewind.proof.checks import COORDS, FRAMES, SUM_TOLERANCE
from rewind.proof.classify import classify
from rewind.proof.verify import KafkaRecord, recompute_windows, utc_ns

Bounds = Mapping[Any, Any]


@dataclass
class ProofFrames:
    """The four frames the suite validates, the counts behind the log's summary, and the range judged."""

    events: pd.DataFrame
    dead_letter: pd.DataFrame
    coverage: pd.DataFrame
    windows: pd.DataFrame
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


def kafka_frame(records: Iterable[KafkaRecord], allowed_lateness: timedelta) -> pd.DataFrame:
    """One row per Kafka record with the classifier's verdict ('event' or 'dead') and the event's fields."""
    cols: dict[str, list[Any]] = {c: [] for c in ["topic", "partition", "offset", "kafka_timestamp", "verdict",
                                                  "event_id", "key", "amount", "event_time", "reason"]}
    for rec in records:
        v = classify(rec.value, rec.timestamp_ms, allowed_lateness)
        ev = v.event
        cols["topic"].append(rec.topic)
        cols["partition"].append(int(rec.partition))
        cols["offset"].append(int(rec.offset))
        cols["kafka_timestamp"].append(rec.timestamp_ms)
        cols["verdict"].append("event" if ev else "dead")
        cols["event_id"].append(ev.event_id if ev else None)
        cols["key"].append(ev.key if ev else None)
        cols["amount"].append(ev.amount if ev else np.nan)
        cols["event_time"].append(ev.event_time if ev else None)
        cols["reason"].append(v.reason)
    df = pd.DataFrame(cols)
    df["partition"] = df["partition"].astype("int64")
    df["offset"] = df["offset"].astype("int64")
    df["amount"] = df["amount"].astype("float64")
    df["kafka_timestamp"] = pd.to_datetime(df["kafka_timestamp"], unit="ms", utc=True)
    df["event_time"] = pd.to_datetime(df["event_time"], utc=True)
    for c in ("topic", "verdict", "event_id", "key", "reason"):
        df[c] = df[c].astype(object)
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
                 watermark_delay: timedelta, stream_watermark: datetime | None = None,
                 last_batch: int | None = None) -> ProofFrames:
    """Kafka (``kafka_frame``) and sink tables -> the four frames the suites validate (pure: no I/O).

    ``kafka`` holds every record read (from the beginning up to the end bounds or further);
    only records in ``bounds`` and sink rows at coordinates in ``bounds`` are judged.
    ``stream_watermark``: the watermark of the stream's last committed batch, if known.
    ``last_batch``: leave out window rows written by later batches (a running stream).
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
    win, win_counts = _windows(ctx, rng, windows, bounds=bounds, kafka=counted, window=window,
                               watermark_delay=watermark_delay, stream_watermark=stream_watermark,
                               last_batch=last_batch)

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
    from rewind.stream.late_routing import BEHIND_WATERMARK

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


def _windows(ctx: pd.DataFrame, rng: pd.DataFrame, sink: pd.DataFrame, *,
             bounds: dict[tuple[str, int], tuple[int, int]] | None, kafka: pd.DataFrame,
             window: timedelta, watermark_delay: timedelta, stream_watermark: datetime | None,
             last_batch: int | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The sink's window results beside their recomputation from raw events, each with its state, and counts."""
    valid = ctx[ctx["verdict"] == "event"].drop_duplicates("event_id")
    # Expected results count every valid event of a window, also those after the range's end: a
    # window is by event time, the stream counted them, and a range may end mid-window (a replay).
    # The horizon below still comes from the context only.
    every = kafka[kafka["verdict"] == "event"].drop_duplicates("event_id")
    expected = recompute_windows(every[["event_id", "key", "amount", "event_time"]], window)
    expected = expected.rename(columns={"event_count": "expected_count", "amount_sum": "expected_sum"})
    expected["window_start"] = utc_ns(expected["window_start"])
    sink = sink.copy()
    if "batch_id" not in sink:
        sink["batch_id"] = pd.NA
    if last_batch is not None and len(sink):
        sink = sink[~(pd.to_numeric(sink["batch_id"], errors="coerce") > last_batch).fillna(False)]
    sink = sink.rename(columns={"event_count": "sink_count", "amount_sum": "sink_sum"})
    sink["window_start"] = utc_ns(sink["window_start"])
    sink = sink[["window_start", "key", "sink_count", "sink_sum", "batch_id"]]
    # a bounded range (one that starts after the beginning, ends before the end, or covers some
    # partitions only) judges only the windows its own events fall in
    if bounds is not None:
        own = recompute_windows(rng[rng["verdict"] == "event"][["event_id", "key", "amount", "event_time"]],
                                window)[["window_start", "key"]]
        own["window_start"] = utc_ns(own["window_start"])
        expected = expected.merge(own, on=["window_start", "key"])
        sink = sink.merge(own, on=["window_start", "key"])
    win = sink.merge(expected, on=["window_start", "key"], how="outer")
    win["window_end"] = win["window_start"] + pd.Timedelta(window)
    in_sink = win["sink_count"].notna().to_numpy()
    has_raw = win["expected_count"].notna().to_numpy()
    win["expected_count"] = win["expected_count"].fillna(0).astype("int64")
    win["expected_sum"] = win["expected_sum"].fillna(0.0).astype("float64")
    win["sink_count"] = pd.to_numeric(win["sink_count"], errors="coerce").astype("Int64")
    win["sink_sum"] = pd.to_numeric(win["sink_sum"], errors="coerce").astype("float64")
    win["sum_diff"] = (win["sink_sum"].fillna(0.0) - win["expected_sum"]).abs().where(in_sink)

    horizon = None
    if len(valid):
        horizon = utc_ns(valid["event_time"]).max() - pd.Timedelta(watermark_delay)
        if stream_watermark is not None:
            horizon = min(horizon, pd.Timestamp(stream_watermark).tz_convert("UTC"))
    closed = (win["window_end"] <= horizon).to_numpy() if horizon is not None else np.zeros(len(win), dtype=bool)
    count_ok = (win["sink_count"] == win["expected_count"]).fillna(False).to_numpy(dtype=bool)
    sum_ok = (win["sum_diff"] <= SUM_TOLERANCE).fillna(False).to_numpy(dtype=bool)
    win["window_state"] = np.select(
        [in_sink & count_ok & sum_ok, in_sink, has_raw & closed, has_raw],
        ["match", "mismatch", "missing", "pending"], default="pending").astype(object)
    win["closed"] = closed
    win = win[["window_start", "window_end", "key", "sink_count", "expected_count", "sink_sum", "expected_sum",
               "sum_diff", "window_state", "closed", "batch_id"]].sort_values(["window_start", "key"])
    win = win.reset_index(drop=True)
    states = win["window_state"].value_counts().to_dict()
    counts = {"windows_checked": int(in_sink.sum()), "windows_mismatched": int(states.get("mismatch", 0)),
              "windows_missing": int(states.get("missing", 0)), "windows_pending": int(states.get("pending", 0)),
              "window_horizon": None if horizon is None else horizon.isoformat()}
    return win, counts

