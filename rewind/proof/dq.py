"""The data-quality proof of exactly-once output: Great Expectations 1.x over Kafka and the sink.

``run_proof`` re-reads Kafka with a plain consumer (``rewind.proof.verify.read_records``),
judges every record with the classifier the stream uses (``rewind.demo.events.classify``),
reads the sink tables, and turns both into four pandas frames, each validated by one
Expectation Suite of the stream (``STREAM.exactly_once.FRAME``):

- ``events``: the sink's event rows whose Kafka coordinates lie in the range, with the
  event id Kafka holds at those coordinates (``kafka_event_id``);
- ``dead_letter``: the sink's dead-letter rows in the range, with what the classifier
  says of the Kafka record at those coordinates (``kafka_verdict``);
- ``coverage``: one row per Kafka data record in the range and where it landed
  (``landed_in``: events / dead_letter / duplicate_send (a re-send of an event the sink
  holds once, at another coordinate that carries the same id) / missing /
  events+dead_letter / wrong_coordinates);
- ``windows``: the sink's window results joined with ``rewind.proof.verify.recompute_windows``
  over the raw Kafka events, with the window state (match / mismatch / missing: closed
  but absent / pending: not yet closed by the stream's watermark).

Every expectation carries a name that says what it proves (``CHECKS``). The validation
results (``validation_result.json``), a summary (``proof.json``) and the GE Data Docs
site (``data_docs/index.html``) are written under ``run_dir`` and, given an S3 store,
uploaded to ``s3://BUCKET/dq/STREAM/RUN_ID/``.

Which range: by default everything below the end offsets of the stream's last committed
batch while it runs (later records are in flight), else every record in its topics.
Explicit ``bounds`` give ``[start, end)`` per partition (e.g. a replay's range). Kafka is
read from the beginning either way: duplicate sends and windows need the records before
``start`` as context, and a window holding records of the range may hold later records too
(its expected result counts every valid event Kafka holds for it); only records in
``[start, end)`` (and sink rows at those coordinates, and the windows their events fall in)
are judged.

Windows are judged as far as the stream has closed them: a window counts as closed when
its end is at or below both the raw horizon (max event time minus the watermark delay)
and the watermark of the stream's last committed batch (``offsets/N`` in its
checkpoint), so a stream stopped before its next batch is not blamed for windows it has
not emitted yet (they are counted as ``pending``). While the stream runs, window rows
written by batches after the one the range ends at are left out (they may hold records
beyond the range).

No Airflow here: the Airflow task and ``rewind dq`` (rewind/cli_dq.py) both call
``run_proof`` and log ``format_proof``.
"""

from __future__ import annotations

import json
import logging
import math
import mimetypes
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from rewind.demo.events import classify
from rewind.proof.verify import KafkaRecord, recompute_windows

log = logging.getLogger(__name__)

__all__ = ["CHECKS", "Check", "FailedExpectation", "ProofFailed", "ProofFrames", "ProofResult", "build_frames",
           "format_proof", "kafka_frame", "normalize_bounds", "run_proof", "validate_frames"]

COORDS = ["topic", "partition", "offset"]
FRAMES = ("events", "dead_letter", "coverage", "windows")
SUITE = "exactly_once"
DOCS_SITE = "rewind_dq"
EXAMPLES = 5
#: Sink window sums and recomputed sums may differ in the last bits (summation order).
SUM_TOLERANCE = 1e-6
#: landed_in values of a correct sink (``missing`` is judged by its own expectation).
LANDED_OK = ("events", "dead_letter", "duplicate_send", "behind_watermark")
RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
_GX_LOCK = threading.Lock()  # get_context sets GE's process-wide current context

Bounds = Mapping[Any, Any]


# --------------------------------------------------------------------------- the suite
@dataclass(frozen=True)
class Check:
    """One expectation: its name (what it proves), the frame it reads, the GE class and arguments."""

    name: str
    frame: str
    expectation: str  # a class of great_expectations.expectations
    kwargs: dict[str, Any]
    proves: str


def _not_null(prefix: str, frame: str, columns: Sequence[str], what: str) -> list[Check]:
    return [Check(f"{c if c.startswith(prefix) else f'{prefix}_{c}'}_not_null", frame,
                  "ExpectColumnValuesToNotBeNull", {"column": c}, f"Every {what} row has a value in {c} (no nulls).")
            for c in columns]


CHECKS: tuple[Check, ...] = (
    Check("no_duplicate_event_ids", "events", "ExpectColumnValuesToBeUnique", {"column": "event_id"},
          "No event is in the sink twice: event_id is unique among the sink's events in the range."),
    *_not_null("event", "events", ["event_id"], "sink event"),
    Check("no_duplicate_event_coordinates", "events", "ExpectCompoundColumnsToBeUnique", {"column_list": COORDS},
          "No Kafka record became two events: (topic, partition, offset) is unique among the sink's events."),
    *_not_null("event", "events", [*COORDS, "key", "event_time"], "sink event"),
    Check("events_match_kafka", "events", "ExpectColumnPairValuesToBeEqual",
          {"column_A": "event_id", "column_B": "kafka_event_id", "ignore_row_if": "both_values_are_missing"},
          "Nothing is in the sink that Kafka does not hold: each sink event's id equals the id of the valid Kafka "
          "record at its (topic, partition, offset)."),
    Check("no_duplicate_dead_letter_coordinates", "dead_letter", "ExpectCompoundColumnsToBeUnique",
          {"column_list": COORDS}, "No Kafka record is dead-lettered twice: (topic, partition, offset) is unique "
                                   "in the dead-letter table."),
    *_not_null("dead_letter", "dead_letter", [*COORDS, "reason"], "dead-letter"),
    Check("dead_letters_match_kafka", "dead_letter", "ExpectColumnValuesToBeInSet",
          {"column": "dead_letter_check", "value_set": ["dead", "behind_watermark"]},
          "Every dead letter is a malformed or late Kafka record at its coordinates (the classifier says 'dead'), "
          "or a valid record whose event time is at or behind the watermark recorded with it (reason "
          "behind_watermark: Spark's stateful operators would have dropped it)."),
    Check("no_kafka_record_missing", "coverage", "ExpectColumnValuesToNotBeInSet",
          {"column": "landed_in", "value_set": ["missing"]},
          "Completeness: every Kafka data record in the range is in the sink (its event, or its dead letter, "
          "also when it was behind the watermark)."),
    Check("each_kafka_record_lands_once", "coverage", "ExpectColumnValuesToBeInSet",
          {"column": "landed_in", "value_set": [*LANDED_OK, "missing"]},
          "Each Kafka record is in exactly one place: its event at its own coordinates, its dead letter (also "
          "behind_watermark), or (a duplicate send) the one event row of its id at another record carrying that id."),
    Check("no_duplicate_windows", "windows", "ExpectCompoundColumnsToBeUnique",
          {"column_list": ["window_start", "key"]}, "Each (window, key) has one result."),
    *_not_null("window", "windows", ["window_start", "key"], "window"),
    Check("window_counts_reconcile", "windows", "ExpectColumnPairValuesToBeEqual",
          {"column_A": "sink_count", "column_B": "expected_count", "ignore_row_if": "either_value_is_missing"},
          "Every window result's event_count equals the count recomputed from the raw Kafka events."),
    Check("window_sums_reconcile", "windows", "ExpectColumnValuesToBeBetween",
          {"column": "sum_diff", "min_value": 0, "max_value": SUM_TOLERANCE},
          f"Every window result's amount_sum equals the sum recomputed from the raw Kafka events "
          f"(|difference| <= {SUM_TOLERANCE})."),
    Check("closed_windows_present", "windows", "ExpectColumnValuesToNotBeInSet",
          {"column": "window_state", "value_set": ["missing"]},
          "Every window the stream's watermark has closed (and that holds raw events) is in the sink."),
)


# --------------------------------------------------------------------------- results
@dataclass
class FailedExpectation:
    name: str
    frame: str
    expectation: str
    proves: str
    unexpected_count: int | None
    element_count: int | None
    examples: list[dict[str, Any]]
    observed_value: Any = None


@dataclass
class ProofResult:
    stream: str
    run_id: str
    ok: bool
    range: dict[str, dict[str, list[int]]]
    counts: dict[str, Any]
    expectations: int
    failures: list[FailedExpectation]
    local: dict[str, str]
    s3: dict[str, str] = field(default_factory=dict)
    s3_error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    def raise_if_failed(self) -> None:
        """For task code: raise ProofFailed (its message is ``format_proof``) unless the proof passed."""
        if not self.ok:
            raise ProofFailed(self)


class ProofFailed(AssertionError):
    """The data does not prove exactly-once; the message has the counts, failures and links."""

    def __init__(self, result: ProofResult) -> None:
        super().__init__(format_proof(result))
        self.result = result


# --------------------------------------------------------------------------- pure frames
@dataclass
class ProofFrames:
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


def _range_mask(frame: pd.DataFrame, bounds: dict[tuple[str, int], tuple[int, int]] | None,
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


def _utc(series: pd.Series) -> pd.Series:
    return pd.to_datetime(series, utc=True)


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
    ctx = kafka[_range_mask(kafka, bounds, from_start=False)]  # context: everything below the end bounds
    rng = kafka[_range_mask(kafka, bounds)].sort_values(COORDS).reset_index(drop=True)
    ev_all, dead_all = _coords_int(events), _coords_int(dead)
    kc = _coords_int(kafka[[*COORDS, "verdict", "event_id", "event_time"]]).rename(
        columns={"verdict": "kafka_verdict", "event_id": "kafka_event_id", "event_time": "kafka_event_time"})

    # events in range, with what Kafka holds at their coordinates
    ev = ev_all[_range_mask(ev_all, bounds)].reset_index(drop=True)
    ev = ev.merge(kc.drop(columns=["kafka_event_time"]), on=COORDS, how="left")
    ev["kafka_verdict"] = ev["kafka_verdict"].fillna("absent")
    ev = ev.astype({"kafka_event_id": object})

    dl = dead_all[_range_mask(dead_all, bounds)].reset_index(drop=True)
    dl = dl.merge(kc.drop(columns=["kafka_event_id"]), on=COORDS, how="left")
    dl["kafka_verdict"] = dl["kafka_verdict"].fillna("absent")
    dl["dead_letter_check"] = _dead_letter_check(dl)
    behind = dl.loc[dl["dead_letter_check"] == "behind_watermark", COORDS]

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


def explain_missing_rows(spec: Any, coverage: pd.DataFrame, kafka: pd.DataFrame, limit: int = 50) -> list[dict[str, Any]]:
    """Which batch read each missing record and whether it was behind that batch's watermark."""
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.stream.late_routing import explain

    gone = coverage[coverage["landed_in"] == "missing"].head(limit).merge(
        kafka[[*COORDS, "event_time"]], on=COORDS, how="left", suffixes=("", "_k"))
    coords = [((t, int(p), int(o)), None if pd.isna(et) else int(pd.Timestamp(et).value // 1000))
              for t, p, o, et in zip(gone["topic"], gone["partition"], gone["offset"], gone["event_time"])]
    return explain(coords, active_checkpoint(spec))


def _dead_letter_check(dl: pd.DataFrame) -> np.ndarray:
    """Per dead letter: 'dead' (the classifier's verdict), 'behind_watermark' (a valid record at or behind
    the watermark recorded with it), else what is wrong ('absent', 'event', 'not_behind_watermark')."""
    if not len(dl):
        return np.array([], dtype=object)
    from rewind.stream.late_routing import BEHIND_WATERMARK

    verdict = dl["kafka_verdict"].astype(object).fillna("absent").to_numpy()
    reason = (dl["reason"] if "reason" in dl else pd.Series([None] * len(dl))).astype(object).to_numpy()
    wm = _utc(dl["watermark"]) if "watermark" in dl else pd.Series(pd.NaT, index=dl.index, dtype="datetime64[ns, UTC]")
    et = _utc(dl["kafka_event_time"]) if "kafka_event_time" in dl else pd.Series(pd.NaT, index=dl.index,
                                                                                    dtype="datetime64[ns, UTC]")
    is_behind = (et <= wm).fillna(False).to_numpy(dtype=bool)
    late_reason = reason == BEHIND_WATERMARK
    return np.select([verdict == "dead", (verdict == "event") & late_reason & is_behind,
                      (verdict == "event") & late_reason],
                     ["dead", "behind_watermark", "not_behind_watermark"], default=verdict).astype(object)


def _coverage(rng: pd.DataFrame, ev_all: pd.DataFrame, dead_all: pd.DataFrame, kc: pd.DataFrame,
              behind: pd.DataFrame) -> pd.DataFrame:
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
    valid = ctx[ctx["verdict"] == "event"].drop_duplicates("event_id")
    # Expected results count every valid event of a window, also those after the range's end: a
    # window is by event time, the stream counted them, and a range may end mid-window (a replay).
    # The horizon below still comes from the context only.
    every = kafka[kafka["verdict"] == "event"].drop_duplicates("event_id")
    expected = recompute_windows(every[["event_id", "key", "amount", "event_time"]], window)
    expected = expected.rename(columns={"event_count": "expected_count", "amount_sum": "expected_sum"})
    expected["window_start"] = _utc(expected["window_start"])
    sink = sink.copy()
    if "batch_id" not in sink:
        sink["batch_id"] = pd.NA
    if last_batch is not None and len(sink):
        sink = sink[~(pd.to_numeric(sink["batch_id"], errors="coerce") > last_batch).fillna(False)]
    sink = sink.rename(columns={"event_count": "sink_count", "amount_sum": "sink_sum"})
    sink["window_start"] = _utc(sink["window_start"])
    sink = sink[["window_start", "key", "sink_count", "sink_sum", "batch_id"]]
    # a bounded range (one that starts after the beginning, ends before the end, or covers some
    # partitions only) judges only the windows its own events fall in
    if bounds is not None:
        own = recompute_windows(rng[rng["verdict"] == "event"][["event_id", "key", "amount", "event_time"]],
                                window)[["window_start", "key"]]
        own["window_start"] = _utc(own["window_start"])
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
        horizon = _utc(valid["event_time"]).max() - pd.Timedelta(watermark_delay)
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


# --------------------------------------------------------------------------- Great Expectations
def _gx_context(docs_dir: Path | None) -> Any:
    """An ephemeral context (in-memory stores) with one Data Docs site in ``docs_dir`` (None: no site).

    Creating one takes a few milliseconds (importing great_expectations takes 4-5 s, once per process),
    so every proof gets its own context: its in-memory stores then hold only this run's results,
    and its docs site is this run's directory.
    """
    import great_expectations as gx
    from great_expectations.data_context.types.base import (DataContextConfig, InMemoryStoreBackendDefaults,
                                                            ProgressBarsConfig)

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites={} if docs_dir is None else {DOCS_SITE: {
            "class_name": "SiteBuilder", "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}},
        analytics_enabled=False, progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False))
    return gx.get_context(mode="ephemeral", project_config=config)


def _expectation(check: Check) -> Any:
    import great_expectations.expectations as gxe

    return getattr(gxe, check.expectation)(**check.kwargs, description=f"[{check.name}] {check.proves}",
                                           meta={"rewind_check": check.name})


def validate_frames(frames: Mapping[str, pd.DataFrame], stream: str, run_id: str, docs_dir: Path | None,
                    checks: Sequence[Check] = CHECKS) -> tuple[dict[str, Any], list[FailedExpectation], int]:
    """Validate each frame with its suite ``STREAM.exactly_once.FRAME``; build Data Docs into ``docs_dir``.

    Returns (GE results as JSON per suite, failed expectations with example rows, expectations run).
    """
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    by_name = {c.name: c for c in checks}
    results: dict[str, Any] = {}
    failures: list[FailedExpectation] = []
    run = RunIdentifier(run_name=run_id, run_time=datetime.now(timezone.utc))
    total = 0
    with _GX_LOCK:
        ctx = _gx_context(docs_dir)
        source = ctx.data_sources.add_pandas(name=f"{stream}_proof")
        for frame_name, df in frames.items():
            frame_checks = [c for c in checks if c.frame == frame_name]
            if not frame_checks:
                continue
            suite_name = f"{stream}.{SUITE}.{frame_name}"
            batch_def = source.add_dataframe_asset(name=frame_name).add_batch_definition_whole_dataframe("whole")
            suite = ctx.suites.add(gx.ExpectationSuite(
                name=suite_name, expectations=[_expectation(c) for c in frame_checks],
                meta={"stream": stream, "frame": frame_name, "notes": _FRAME_NOTES[frame_name]}))
            vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=suite_name, data=batch_def, suite=suite))
            res = vd.run(batch_parameters={"dataframe": df}, result_format=RESULT_FORMAT, run_id=run)
            results[suite_name] = res.to_json_dict()
            total += len(res.results)
            for r in res.results:
                if r.success:
                    continue
                check = by_name[r.expectation_config.meta["rewind_check"]]
                failures.append(_failure(check, r, df))
        if docs_dir is not None:
            ctx.build_data_docs(site_names=[DOCS_SITE])
    return results, failures, total


_FRAME_NOTES = {
    "events": "The sink's event rows whose Kafka coordinates are in the range; kafka_event_id is the id of the "
              "valid Kafka record at those coordinates.",
    "dead_letter": "The sink's dead-letter rows in the range; kafka_verdict is the shared classifier's verdict "
                   "on the Kafka record at those coordinates.",
    "coverage": "One row per Kafka data record in the range; landed_in says where it is in the sink.",
    "windows": "Sink window results joined with the recomputation from the raw Kafka events; window_state is "
               "match, mismatch, missing (closed by the watermark but absent) or pending (not closed yet).",
}


def _failure(check: Check, r: Any, df: pd.DataFrame) -> FailedExpectation:
    res = dict(r.result or {})
    idx = res.get("partial_unexpected_index_list") or []
    examples: list[dict[str, Any]] = []
    errors = _exception_messages(r.exception_info)
    if errors:
        examples = [{"error": e} for e in errors[:EXAMPLES]]
    elif idx and not isinstance(idx[0], dict):
        examples = [_jsonable(rec) for rec in df.loc[[i for i in idx[:EXAMPLES] if i in df.index]]
                    .to_dict(orient="records")]
    else:
        examples = [{"value": _jsonable(v)} for v in (res.get("partial_unexpected_list") or [])[:EXAMPLES]]
    return FailedExpectation(check.name, check.frame, check.expectation, check.proves,
                             res.get("unexpected_count"), res.get("element_count"), examples,
                             _jsonable(res.get("observed_value")))


def _exception_messages(info: Any) -> list[str]:
    """GE 1.x puts a failed metric's exception under its metric id (or, older, at the top level)."""
    if not isinstance(info, dict):
        return []
    if "exception_message" in info:
        return [str(info["exception_message"])] if info.get("raised_exception") else []
    return [str(v["exception_message"]) for v in info.values()
            if isinstance(v, dict) and v.get("raised_exception") and v.get("exception_message")]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (pd.Timestamp, datetime)):
        return value.isoformat()
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (str, int, bool)):
        return value
    return str(value)


# --------------------------------------------------------------------------- I/O edge
def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def _stream_position(spec: Any) -> tuple[bool, Any]:
    """(running, status) from the stream's status file (running = live pid and a running state)."""
    from rewind.platform.processes import pid_alive
    from rewind.stream.status import read_status, status_path

    status = read_status(status_path(spec.status_dir, spec.name))
    running = bool(status and status.state in ("starting", "running", "stopping") and pid_alive(status.pid))
    return running, status


def _stream_watermark(spec: Any, batch: int | None) -> tuple[datetime | None, int | None, str | None]:
    """The watermark batch N ran with (``offsets/N``), N = ``batch`` or the checkpoint's last commit.

    Returns (watermark, batch, note); (None, None, note) when the checkpoint cannot say.
    """
    from rewind.checkpoints.inspection import parse_offsets_file
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.checkpoints.store import open_store

    try:
        location = active_checkpoint(spec)
        client = None
        if str(location).startswith("s3://"):
            from rewind.s3 import s3_client

            client = s3_client()
        store = open_store(location, client)
        if batch is None:
            _, files = store.list_dir("commits")
            ids = [int(f) for f in files if f.isdigit()]
            if not ids:
                return None, None, f"no committed batch in {location}: windows judged by the raw horizon only"
            batch = max(ids)
        meta, _ = parse_offsets_file(store.read_bytes(f"offsets/{batch}").decode())
        wm = meta.get("batchWatermarkMs")
        if wm is None:
            return None, batch, None
        return datetime.fromtimestamp(int(wm) / 1000, timezone.utc), batch, None
    except Exception as exc:  # noqa: BLE001 - the proof still stands on the raw horizon
        return None, batch, f"stream watermark unknown ({type(exc).__name__}: {exc}); windows judged by the raw horizon"


def _store(s3: Any) -> Any:
    if s3 is None:
        return None
    from rewind.s3 import S3Config, S3Store

    return S3Store(s3) if isinstance(s3, S3Config) else s3


def _upload_dir(store: Any, local: Path, prefix: str) -> int:
    n = 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = f"{prefix}{path.relative_to(local).as_posix()}"
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        store.put_bytes(key, path.read_bytes(), ctype)
        n += 1
    return n


def s3_prefix(stream: str, run_id: str) -> str:
    return f"dq/{stream}/{run_id}/"


def run_proof(spec: Any, bootstrap: str, *, bounds: Bounds | None = None, run_dir: Path,
              s3: Any = None, run_id: str | None = None) -> ProofResult:
    """Prove exactly-once for a Kafka range of ``spec``'s stream; store results and Data Docs.

    ``bounds``: per partition ``[start, end)`` (see ``normalize_bounds``); default: below the
    end offsets of the stream's last committed batch if it runs, else everything.
    ``s3``: an ``rewind.s3.S3Store`` or ``S3Config`` to upload to (None: local only). An
    upload failure does not change the verdict; it is in ``s3_error`` and in the log text.
    """
    from rewind.stream.runner import open_sink
    from rewind.proof.verify import committed_bounds, read_records

    if spec.dq_suite != SUITE:
        raise ValueError(f"stream {spec.name}: unknown dq_suite {spec.dq_suite!r} (known: {SUITE!r})")
    from rewind.safe_names import check_run_id

    run_id = check_run_id(run_id or new_run_id())  # it names dq/STREAM/RUN_ID in S3: no '..', no '/'
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    d = spec.durations()
    seconds: dict[str, float] = {}
    notes: list[str] = []
    t0 = time.perf_counter()

    running, status = _stream_position(spec)
    last_batch = status.last_batch_id if status else None
    norm = normalize_bounds(bounds)
    if norm is None and status is not None and status.end_offsets:
        # What the stream has committed is what it answers for: a running stream is still reading,
        # a crashed one has not read the rest yet (its restart will).
        norm = {k: (0, v) for k, v in committed_bounds(status.end_offsets).items()}
        notes.append(f"{spec.name} is {'running' if running else status.state + ' (process gone)' if status.state != 'stopped' else 'stopped'}"
                     f": the range ends at its last committed batch ({last_batch})")
    watermark, wm_batch, note = _stream_watermark(spec, last_batch)
    if note:
        notes.append(note)

    sink, _ = open_sink(spec)
    try:
        t = time.perf_counter()
        # Everything, not only the range: a window's expected result counts events past the range's
        # end too (a range may end mid-window).
        records = read_records(bootstrap, spec.topics, source_options=spec.source.options)
        seconds["read_kafka"] = time.perf_counter() - t
        t = time.perf_counter()
        events, dead, windows = (sink.read_table("events"), sink.read_table("dead_letter"),
                                 sink.read_table("window_results"))
        seconds["read_sink"] = time.perf_counter() - t
    finally:
        sink.dispose()
    t = time.perf_counter()
    kafka = kafka_frame(records, d["allowed_lateness"])
    frames = build_frames(kafka, events, dead, windows, bounds=norm, window=d["window"],
                          watermark_delay=d["watermark_delay"], stream_watermark=watermark, last_batch=last_batch)
    frames.counts["stream_watermark"] = watermark.isoformat() if watermark else None
    frames.counts["watermark_batch"] = wm_batch
    if frames.counts.get("missing"):
        why = explain_missing_rows(spec, frames.coverage, kafka)
        frames.counts["missing_explained"] = why
        behind = sum(1 for w in why if w.get("behind_watermark"))
        notes.append(f"{frames.counts['missing']} record(s) missing; of the first {len(why)}, {behind} were read by a "
                     "batch behind its watermark (Spark's stateful operators dropped them) - see missing_explained")
    seconds["frames"] = time.perf_counter() - t

    t = time.perf_counter()
    docs_dir = run_dir / "data_docs"
    ge_results, failures, total = validate_frames(frames.frames(), spec.name, run_id, docs_dir)
    seconds["validate_and_docs"] = time.perf_counter() - t
    local = {"run_dir": str(run_dir), "result": str(run_dir / "validation_result.json"),
             "proof": str(run_dir / "proof.json"), "data_docs": str(docs_dir / "index.html")}
    result = ProofResult(spec.name, run_id, not failures, frames.range, frames.counts, total, failures, local,
                         notes=notes)
    Path(local["result"]).write_text(json.dumps(
        {"stream": spec.name, "run_id": run_id, "success": result.ok, "range": frames.range,
         "counts": frames.counts, "suites": ge_results}, indent=1, default=str))

    store = _store(s3)
    if store is not None:
        t = time.perf_counter()
        prefix = s3_prefix(spec.name, run_id)
        result.s3 = {"prefix": store.url(prefix), "result": store.url(prefix + "validation_result.json"),
                     "proof": store.url(prefix + "proof.json"), "data_docs": store.url(prefix + "data_docs/index.html")}
        try:
            _upload_dir(store, docs_dir, prefix + "data_docs/")
            store.put_bytes(prefix + "validation_result.json", Path(local["result"]).read_bytes(), "application/json")
        except Exception as exc:  # noqa: BLE001 - S3Error/S3Unreachable and anything boto raises
            result.s3_error = f"{type(exc).__name__}: {exc}"
            log.warning("dq %s run %s: upload to %s failed: %s", spec.name, run_id, result.s3["prefix"], exc)
        seconds["upload"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    result.seconds = {k: round(v, 3) for k, v in seconds.items()}
    Path(local["proof"]).write_text(json.dumps(result.to_json(), indent=1))
    if store is not None and result.s3_error is None:
        try:
            store.put_bytes(prefix + "proof.json", Path(local["proof"]).read_bytes(), "application/json")
        except Exception as exc:  # noqa: BLE001
            result.s3_error = f"{type(exc).__name__}: {exc}"
    return result


# --------------------------------------------------------------------------- log text
def _fmt_range(rng: dict[str, dict[str, list[int]]]) -> str:
    parts = []
    for topic, parts_of in sorted(rng.items()):
        spans = " ".join(f"{p}:[{lo},{hi})" for p, (lo, hi) in sorted(parts_of.items(), key=lambda kv: int(kv[0])))
        parts.append(f"{topic} {spans}")
    return "; ".join(parts) or "(no records)"


def format_proof(result: ProofResult) -> str:
    """The task-log text: verdict, range, counts, each failure with example rows, and the links."""
    c = result.counts
    verdict = ("PASS: every Kafka data record in the range is in the sink exactly once, and the windows reconcile"
               if result.ok else f"FAIL: {len(result.failures)} of {result.expectations} expectations failed")
    lines = [f"DQ proof {result.stream} run {result.run_id}: {verdict}",
             f"range: {_fmt_range(result.range)}",
             f"counts: records in range {c.get('records_in_range')}, events {c.get('sink_events')} "
             f"(distinct ids in Kafka {c.get('distinct_events')}), dead letters {c.get('sink_dead_letters')} "
             f"(expected {c.get('expected_dead_letters')}), duplicate sends collapsed {c.get('duplicate_sends')}, "
             f"duplicate rows {c.get('duplicate_event_rows', 0) + c.get('duplicate_coordinate_rows', 0)}, "
             f"missing {c.get('missing')}, misplaced {c.get('misplaced')}, unexpected sink rows "
             f"{c.get('unexpected_sink_rows')}",
             f"windows: {c.get('windows_checked')} checked, {c.get('windows_mismatched')} mismatched, "
             f"{c.get('windows_missing')} missing, {c.get('windows_pending')} pending (closed up to "
             f"{c.get('window_horizon')})",
             f"expectations: {result.expectations} run, {len(result.failures)} failed"]
    for f in result.failures:
        if f.unexpected_count is not None:
            n = f"{f.unexpected_count} of {f.element_count} rows"
        else:
            n = "error" if f.observed_value is None else f"observed {f.observed_value}"
        lines.append(f"  FAILED {f.name} [{f.frame}] {n}: {f.proves}")
        for ex in f.examples:
            lines.append(f"    e.g. {json.dumps(ex, default=str)}")
    for note in result.notes:
        lines.append(f"note: {note}")
    lines.append(f"validation result: {result.local.get('result')}"
                 + (f"  ({result.s3['result']})" if result.s3 else ""))
    lines.append(f"data docs: file://{result.local.get('data_docs')}"
                 + (f"  ({result.s3['data_docs']})" if result.s3 else ""))
    if result.s3_error:
        lines.append(f"WARNING: results were not stored in S3: {result.s3_error}")
    return "\n".join(lines)
