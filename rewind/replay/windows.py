"""Window results after a replay: recomputed from the raw events in the sink, never added to.

A replay reads a bounded range, so the transform's window rows are partial aggregates of
that range (a window's other events lie outside it, or were written by the live stream).
Upserting them would overwrite a complete count with a partial one; adding them would
double count. So the replay leaves the transform's window rows out of its plan, learns from its
events WHICH ``(window_start, key)`` pairs they fall into (``event_pairs``: the same pairs the window
rows would name), and after the events are in the sink it recomputes each of those pairs from the
sink's events table with
``rewind.proof.verify.recompute_windows`` (the same recomputation the DQ proof judges against).

Which pairs are written: those the live stream has CLOSED, plus those the sink already holds.
A window is closed when its end is at or below the watermark of the stream's last committed
batch (``offsets/N`` in its checkpoint) -- the same watermark ``rewind.proof.dq`` judges windows by.
Why not the open ones: the live stream still holds them in its state and will emit them when
its watermark passes; a replay-written row would be premature (readers would take it as
final), partial (the stream may not have written all its events yet), and the proof would call
it a mismatch. A row already in the sink was emitted by the stream, so it is closed whatever
the checkpoint says. Without a checkpoint (the stream never ran there), the raw horizon stands
in for the watermark: the latest event time in the sink minus the watermark delay.

Only rows whose count or sum differ (or that are missing) are written, with ``batch_id``
NULL (= written by a replay); unchanged rows keep the batch id of the stream batch that
wrote them, so replaying a range that is already complete changes no row at all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pandas as pd

from rewind.proof.verify import recompute_windows, utc_ns

log = logging.getLogger(__name__)

Pair = tuple[pd.Timestamp, str]
SUM_TOLERANCE = 1e-6       # as rewind.proof.dq: sums may differ in the last bits (summation order)
STARTS_PER_QUERY = 64      # window starts read back per events query (bounds memory and scans)
EXAMPLES = 5


@dataclass
class WindowOutcome:
    """What the replay did to window results (counts of ``(window_start, key)`` pairs)."""

    affected: int = 0       # pairs the replayed events fall into
    recomputed: int = 0     # closed by the stream (or already in the sink): recomputed from events
    written: int = 0        # of those, missing or different: written
    unchanged: int = 0      # of those, already right: not touched
    left_open: int = 0      # not closed by the live stream yet: left for it to emit
    horizon: str | None = None
    horizon_source: str = ""
    examples: list[dict[str, Any]] = field(default_factory=list)  # written rows: before -> after

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def pairs_of(window_rows: pd.DataFrame) -> set[Pair]:
    """The ``(window_start, key)`` pairs of window rows (the transform's partial ones, or the sink's)."""
    if window_rows is None or not len(window_rows):
        return set()
    return set(zip(utc_ns(window_rows["window_start"]), window_rows["key"].astype(str)))


def event_pairs(events: pd.DataFrame | None, window: timedelta) -> set[Pair]:
    """The ``(window_start, key)`` pairs events fall into: the tumbling windows Spark's
    ``window(event_time, ...)`` puts them in (aligned to the epoch), the transform's window rows'
    pairs without computing the windows."""
    if events is None or not len(events):
        return set()
    times = utc_ns(events["event_time"])
    known = times.notna().to_numpy()
    starts = times[known].dt.floor(pd.Timedelta(window))
    return set(zip(starts, events["key"][known].astype(str)))


def closing_horizon(spec: Any, events_sink: Any) -> tuple[pd.Timestamp | None, str]:
    """Up to where the live stream has closed windows, and how that was learned."""
    from rewind.checkpoints.watermark import (
        stream_watermark as _stream_watermark,  # the watermark the proof judges windows by
    )

    watermark, batch, note = _stream_watermark(spec, None)
    if watermark is not None:
        return pd.Timestamp(watermark).tz_convert("UTC"), f"watermark of the stream's committed batch {batch}"
    latest = events_sink.column_max("events", "event_time") if batch is None else None
    if latest is not None:
        horizon = pd.Timestamp(latest) - pd.Timedelta(spec.durations()["watermark_delay"])
        return horizon, f"raw horizon: latest event time in the sink minus the watermark delay ({note})"
    return None, note or f"no watermark in the checkpoint at batch {batch}: no window is taken as closed"


def _grouped(pairs: set[Pair], size: int) -> Iterable[tuple[list[pd.Timestamp], list[str]]]:
    """Window starts in groups of ``size`` (ascending), each with the keys paired with them."""
    ordered = sorted({s for s, _ in pairs})
    for i in range(0, len(ordered), size):
        group = ordered[i:i + size]
        members = set(group)
        yield group, sorted({k for s, k in pairs if s in members})


def read_window_rows(sink: Any, pairs: set[Pair]) -> pd.DataFrame:
    """The sink's window rows of ``pairs`` (by start range and key, then exactly)."""
    out = []
    for group, keys in _grouped(pairs, STARTS_PER_QUERY):
        lo, hi = group[0].to_pydatetime(), group[-1].to_pydatetime()
        out.append(sink.read_rows("window_results", lambda t: (t.c.window_start >= lo)  # noqa: B023 (called now)
                                  & (t.c.window_start <= hi) & t.c.key.in_(keys)))  # noqa: B023
    rows = pd.concat(out, ignore_index=True) if out else sink.read_rows("window_results", lambda t: t.c.key.in_([]))
    if not len(rows):
        return rows
    keep = [(s, k) in pairs for s, k in zip(utc_ns(rows["window_start"]), rows["key"])]
    return rows[keep].reset_index(drop=True)


def read_events(sinks: Sequence[Any], pairs: set[Pair], window: timedelta) -> pd.DataFrame:
    """Raw events of ``pairs``' windows from each sink in turn (the first holding an id wins)."""
    frames = []
    width = pd.Timedelta(window)
    for group, keys in _grouped(pairs, STARTS_PER_QUERY):
        lo, hi = group[0].to_pydatetime(), (group[-1] + width).to_pydatetime()
        for sink in sinks:
            frames.append(sink.read_rows("events", lambda t: (t.c.event_time >= lo)  # noqa: B023 (called now)
                                         & (t.c.event_time < hi) & t.c.key.in_(keys),  # noqa: B023
                                         columns=["event_id", "key", "amount", "event_time"]))
    if not frames:
        return pd.DataFrame(columns=["event_id", "key", "amount", "event_time"])
    return pd.concat(frames, ignore_index=True).drop_duplicates("event_id")


def recompute_pairs(pairs: set[Pair], *, target: Any, sources: Sequence[Any], present_in: Sequence[Any],
                    spec: Any, horizon: pd.Timestamp | None, horizon_source: str,
                    replay_id: str) -> WindowOutcome:
    """Recompute the closed (or present) ``pairs`` from ``sources``' events; write what differs to ``target``.

    into-sink: target = sources = present_in = the stream's sink. shadow: target = the shadow
    sink, sources = [main, shadow] (the union is what into-sink would leave), present_in =
    [main, shadow].
    """
    window = spec.durations()["window"]
    width = pd.Timedelta(window)
    out = WindowOutcome(affected=len(pairs), horizon=None if horizon is None else horizon.isoformat(),
                        horizon_source=horizon_source)
    if not pairs:
        return out
    present: set[Pair] = set()
    for sink in present_in:
        present |= pairs_of(read_window_rows(sink, pairs))
    closed = {p for p in pairs if horizon is not None and p[0] + width <= horizon}
    todo = closed | (present & pairs)
    out.left_open = len(pairs) - len(todo)
    if not todo:
        return out
    events = read_events(sources, todo, window)
    fresh = recompute_windows(events, window)
    fresh["window_start"] = utc_ns(fresh["window_start"])
    fresh = fresh[[(s, k) in todo for s, k in zip(fresh["window_start"], fresh["key"])]].reset_index(drop=True)
    out.recomputed = len(fresh)
    current = read_window_rows(target, todo)
    have = {(s, k): (int(c), float(a) if a == a else 0.0)
            for s, k, c, a in zip(utc_ns(current["window_start"]), current["key"],
                                  current["event_count"], current["amount_sum"])}
    changed = []
    for row in fresh.itertuples(index=False):
        before = have.get((row.window_start, row.key))
        after = (int(row.event_count), float(row.amount_sum))
        if before is None or before[0] != after[0] or abs(before[1] - after[1]) > SUM_TOLERANCE:
            changed.append(row)
            if len(out.examples) < EXAMPLES:
                out.examples.append({"window_start": row.window_start.isoformat(), "key": row.key,
                                     "before": None if before is None else {"event_count": before[0],
                                                                            "amount_sum": before[1]},
                                     "after": {"event_count": after[0], "amount_sum": after[1]}})
    out.unchanged = out.recomputed - len(changed)
    if changed:
        rows = pd.DataFrame(changed)
        rows["window_end"] = rows["window_start"] + width
        rows["batch_id"] = None
        target.write_rows({"window_results": rows[["window_start", "window_end", "key", "event_count",
                                                   "amount_sum", "batch_id"]]}, replay_id=replay_id)
    out.written = len(changed)
    log.info("replay %s windows: %d affected, %d recomputed, %d written, %d unchanged, %d left open (closed up "
             "to %s: %s)", replay_id, out.affected, out.recomputed, out.written, out.unchanged, out.left_open,
             out.horizon, horizon_source)
    return out
