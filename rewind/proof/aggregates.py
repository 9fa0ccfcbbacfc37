"""Aggregate rows against their recomputation from Kafka, group by group (pure: no I/O, no Spark).

Why: a row of an aggregate table (``rewind.api.declarations.Aggregate``) stands for a group of
records (a window by keys), so a proof that checks only its key cannot see a total computed from
part of its records (a replay of one partition) or changed by hand. Every proof (``rewind verify``,
the DQ proof, a replay's proof) recomputes each group and compares values here, for every stream.
What the recomputation is comes from the caller: ``recompute_measures`` over ``expect()``'s rows
when the aggregate declares its measures (no Spark), else ``build`` run as a bounded batch over
the group's records (``rewind.proof.batch_build``).

The frame (``aggregates``, one row per group, validated by the suites of ``rewind.proof.checks``):
``table``, ``group`` (the key as text), ``window_start``/``window_end``, ``sink`` and
``recomputed`` (the value columns as text), ``aggregate_state``:

- ``match``: the sink row holds the recomputed values, compared by the column's type
  (``rewind.proof.values``: integers and decimals exactly, doubles within their tolerance), and its
  ``window_end``, if the table has one, is the window's start plus its size;
- ``mismatch``: it holds others (``disagrees`` names each column with both values);
- ``missing``: a group the stream has closed (its window ends at or before ``closed_until``, the
  watermark of the stream's last committed batch) holds records but has no row;
- ``pending``: a group not closed yet and not written: the live stream still holds it;
- ``unexpected``: a row of a group no record makes;
- ``duplicate``: a group held twice (a sink without a primary key, a Kafka topic re-sent into).

Rows of open groups that the sink already holds are compared too: an append-mode stream writes a
group once it closes, an update-mode stream rewrites it with every batch, and either way the row
reflects every record read up to the committed batch, which is what the recomputation reads.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from rewind.proof.batches import written_later
from rewind.proof.values import ANY, ValueRule, shown
from rewind.proof.values import equal_values as _equal
from rewind.proof.values import text_key as _text

#: The states of a correct sink (``pending`` is not a failure: the stream has not closed the group).
STATES_OK = ("match", "pending")
FRAME_COLUMNS = ["table", "group", "window_start", "window_end", "sink", "recomputed", "aggregate_state",
                 "disagrees", "batch_id"]


def utc(values: Any) -> pd.Series:
    """Times as UTC nanosecond timestamps (naive ones taken as UTC)."""
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    return pd.to_datetime(s, utc=True).dt.as_unit("ns")


def group_text(frame: pd.DataFrame, agg: Any, rules: Mapping[str, ValueRule] | None = None) -> pd.Series:
    """Each row's group (the window's start as a UTC instant, then the keys) as one comparable text
    (``rules``: the keys' column rules, so a key compares by its type)."""
    if not len(frame):
        return pd.Series([], dtype=object, index=frame.index)
    parts = frame[list(agg.keys)].copy()
    if agg.window:
        parts.insert(0, agg.window, utc(frame[agg.window]).map(lambda t: None if pd.isna(t) else t.isoformat()))
    key_rules = {k: r for k, r in (rules or {}).items() if k in agg.keys}
    return _text(parts, list(parts.columns), key_rules)


#: The column of a windowed aggregate's row that holds its window's end (Spark's ``window.end``): judged
#: against the window's start plus its size (``judge_groups``), not as a value the recomputation gives.
WINDOW_END = "window_end"


def value_columns(table_columns: Sequence[str], agg: Any) -> list[str]:
    """The columns a group's row is judged by: all but its group, ``batch_id`` and its window's end (which
    ``judge_groups`` holds to the window's start plus its size)."""
    skip = {*agg.group_columns, "batch_id", WINDOW_END}
    return [c for c in table_columns if c not in skip]


def recompute_measures(rows: pd.DataFrame, agg: Any, size: timedelta | None) -> pd.DataFrame:
    """The declared measures of every group, from one row per counted record (``expect()``'s valid rows,
    one per identity, those behind the watermark left out): the window is the tumbling window of
    ``agg.event_time`` (aligned to the epoch, as Spark's ``window()``), the measures grouped by it and
    the keys."""
    names = [m.column for m in agg.measures]
    if not len(rows):
        return pd.DataFrame(columns=[*agg.group_columns, *names])
    work = rows.copy()
    by = list(agg.keys)
    if agg.window:
        if size is None:
            raise ValueError(f"aggregate {agg.table}: a windowed aggregate needs its window's size")
        work[agg.window] = utc(work[agg.event_time]).dt.floor(pd.Timedelta(size))
        work = work[work[agg.window].notna()]
        by = [agg.window, *by]
    named = {m.column: ((by[0], "size") if m.function == "count" else (m.source, m.function)) for m in agg.measures}
    out = work.groupby(by, dropna=False).agg(**named).reset_index()
    return out[[*agg.group_columns, *names]]


def closing_horizon(stream_watermark: datetime | None, latest_event: Any, delay: timedelta) -> pd.Timestamp | None:
    """Up to where groups count as closed: the watermark of the stream's last committed batch, and never
    past the latest event time less the watermark delay (None: nothing is known closed)."""
    raw = None if latest_event is None or pd.isna(latest_event) else pd.Timestamp(latest_event)
    if raw is not None:
        raw = (raw.tz_localize("UTC") if raw.tzinfo is None else raw.tz_convert("UTC")) - pd.Timedelta(delay)
    wm = None if stream_watermark is None else pd.Timestamp(stream_watermark).tz_convert("UTC")
    known = [t for t in (raw, wm) if t is not None]
    return min(known) if known else None


def judge_groups(sink: pd.DataFrame, recomputed: pd.DataFrame, agg: Any, *, values: Sequence[str],
                 size: timedelta | None, closed_until: pd.Timestamp | None, scope: set[str] | None = None,
                 last_batch: int | None = None, rules: Mapping[str, ValueRule] | None = None,
                 later: Collection[int] | None = None) -> pd.DataFrame:
    """One row per group of ``sink`` and ``recomputed`` (see the module docstring).

    ``values``: the value columns compared (``value_columns``; with measures, the measures).
    ``scope``: only these groups (``group_text``) are judged (a bounded proof: the groups its records
    fall in); None: every group. ``last_batch``: sink rows written by later batches are left out
    (a running stream: they may hold records past the proved range); ``later``: the batches the
    checkpoint planned after it (``rewind.proof.batches``), when known. ``rules``: each column's rule
    (``rewind.proof.values.rules_for`` of the sink table); a column without one compares by value type.
    """
    rules = rules or {}
    s = sink.reset_index(drop=True).copy()
    if len(s) and "batch_id" in s:
        s = s[~written_later(s["batch_id"], last_batch, later)].reset_index(drop=True)
    r = recomputed.reset_index(drop=True).copy()
    s["_g"], r["_g"] = group_text(s, agg, rules), group_text(r, agg, rules)
    if scope is not None:
        s, r = s[s["_g"].isin(scope)].reset_index(drop=True), r[r["_g"].isin(scope)].reset_index(drop=True)
    r = r.drop_duplicates("_g")
    if agg.window and size is not None and WINDOW_END in s.columns:  # derived, but a value the sink holds
        r[WINDOW_END] = utc(r[agg.window]) + pd.Timedelta(size) if len(r) else \
            pd.Series([], dtype="datetime64[ns, UTC]")
        values = [*[c for c in values if c != WINDOW_END], WINDOW_END]
    dup = s["_g"].duplicated(keep=False).to_numpy() if len(s) else np.zeros(0, dtype=bool)
    right = _nullable_ints(r[["_g", *[c for c in values if c in r.columns]]].copy())
    s = _nullable_ints(s)
    if agg.window:
        right["_start_re"] = utc(r[agg.window]) if len(r) else pd.Series([], dtype="datetime64[ns, UTC]")
    merged = s.merge(right, on="_g", how="outer", suffixes=("", "_re"), indicator=True)
    in_sink = (merged["_merge"] != "right_only").to_numpy()
    in_re = (merged["_merge"] != "left_only").to_numpy()
    bad = np.zeros((len(merged), len(values)), dtype=bool)
    for j, c in enumerate(values):
        mine = merged[c] if c in merged else pd.Series([None] * len(merged))
        theirs = merged[f"{c}_re"] if f"{c}_re" in merged else pd.Series([None] * len(merged))
        bad[:, j] = ~_equal(mine.reset_index(drop=True), theirs.reset_index(drop=True), rules.get(c, ANY))
    starts = _starts(merged, agg)
    ends = starts + pd.Timedelta(size) if size is not None else pd.Series(pd.NaT, index=merged.index)
    closed = (ends <= closed_until).fillna(False).to_numpy(dtype=bool) if closed_until is not None and size \
        else np.zeros(len(merged), dtype=bool)
    dup_of = dict(zip(s["_g"], dup)) if len(s) else {}
    is_dup = merged["_g"].map(lambda g: bool(dup_of.get(g, False))).to_numpy(dtype=bool)
    state = np.select([in_sink & is_dup, in_sink & ~in_re, in_sink & ~bad.any(axis=1), in_sink, closed],
                      ["duplicate", "unexpected", "match", "mismatch", "missing"], default="pending")
    out = pd.DataFrame({"table": agg.table, "group": merged["_g"].astype(object),
                        "window_start": starts, "window_end": ends,
                        "sink": [_values(merged, values, i, "") if in_sink[i] else None for i in range(len(merged))],
                        "recomputed": [_values(merged, values, i, "_re") if in_re[i] else None
                                       for i in range(len(merged))],
                        "aggregate_state": state.astype(object),
                        "disagrees": [_disagrees(merged, values, bad[i], agg.table, merged["_g"].iat[i])
                                      if state[i] == "mismatch" else None for i in range(len(merged))],
                        "batch_id": merged["batch_id"] if "batch_id" in merged else None})
    return out[FRAME_COLUMNS].sort_values(["window_start", "group"], na_position="first").reset_index(drop=True)


def _nullable_ints(frame: pd.DataFrame) -> pd.DataFrame:
    """Integer columns as ``Int64``: an outer merge would turn int64 with a gap into float64, which
    holds integers exactly only up to 2**53."""
    for c in frame.columns:
        if pd.api.types.is_integer_dtype(frame[c].dtype) and not isinstance(frame[c].dtype, pd.Int64Dtype):
            frame[c] = frame[c].astype("Int64")
    return frame


def _starts(merged: pd.DataFrame, agg: Any) -> pd.Series:
    """Each group's window start, from the sink row or else the recomputation."""
    if not agg.window:
        return pd.Series(pd.NaT, index=merged.index, dtype="datetime64[ns, UTC]")
    mine = utc(merged[agg.window]) if agg.window in merged else pd.Series(pd.NaT, index=merged.index)
    return mine.fillna(utc(merged["_start_re"])).set_axis(merged.index)


def _values(merged: pd.DataFrame, values: Sequence[str], i: int, suffix: str) -> str:
    parts = []
    for c in values:
        col = f"{c}{suffix}"
        v = merged[col].iat[i] if col in merged else None
        parts.append(f"{c}={plain_value(v)}")
    return ", ".join(parts)


def _disagrees(merged: pd.DataFrame, values: Sequence[str], bad: np.ndarray, table: str, group: str) -> str:
    cols = [c for j, c in enumerate(values) if bad[j]]
    key = str(group).replace("\x1f", ", ")
    i = _row(merged, group)
    return "; ".join(f"{table} [{key}] {c}: sink {plain_value(merged[c].iat[i])!r}, recomputed "
                     f"{plain_value(merged[f'{c}_re'].iat[i])!r}" for c in cols)


#: A value as plain Python for a message (``rewind.proof.values.shown``).
plain_value = shown


def _row(merged: pd.DataFrame, group: str) -> int:
    return int(np.flatnonzero((merged["_g"] == group).to_numpy())[0])


def counts_of(frame: pd.DataFrame) -> dict[str, int]:
    """The frame's states as counts (``aggregates_checked`` = groups the sink holds)."""
    states = frame["aggregate_state"].value_counts().to_dict() if len(frame) else {}
    return {"aggregates_checked": int(frame["sink"].notna().sum()) if len(frame) else 0,
            **{f"aggregates_{k}": int(states.get(k, 0))
               for k in ("match", "mismatch", "missing", "pending", "unexpected", "duplicate")}}
