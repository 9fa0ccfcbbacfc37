"""Rows a sink cannot take become dead letters, so one bad value does not stop the stream.

Why: a sink refuses a batch whose values its columns cannot take (``SinkRefused``, nothing
written). Spark would re-run that batch after every restart and the stream would never get past
it. A row that carries its Kafka coordinates (``topic``, ``partition``, ``offset``) can instead
go to the transform's dead-letter table with the reason (``unwritable_value: table T, column C:
...``) while the rest of the batch commits: nothing is lost, and the proof counts the record as a
dead letter. A row without coordinates (an aggregate) cannot be dead-lettered: the refusal
stands, naming the table, the column and the value.

Only on the refusal path: the batch is converted once as usual; the row-by-row search runs only
after a sink refused it (the sink writes nothing before it refuses, so the retry is safe).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from rewind.api.tables import TableSpec
from rewind.sink.convert import prepare_table
from rewind.sink.errors import SinkRefused

__all__ = ["REASON", "route_unwritable"]

REASON = "unwritable_value"
COORDS = ("topic", "partition", "offset")


def route_unwritable(specs: Mapping[str, TableSpec], tables: Mapping[str, Any], dead_letter: str | None,
                     batch_id: int | None) -> dict[str, Any] | None:
    """``tables`` with every row a sink cannot take moved to ``dead_letter`` (with its reason), or
    None when no row could be moved (nothing to dead-letter, or rows without coordinates)."""
    if dead_letter is None or dead_letter not in specs:
        return None
    out = dict(tables)
    dead: list[dict[str, Any]] = []
    for name, frame in tables.items():
        if name == dead_letter or name not in specs or not isinstance(frame, pd.DataFrame) or frame.empty:
            continue
        reasons = bad_rows(specs[name], frame)
        if not reasons:
            continue
        rows = frame.iloc[sorted(reasons)]
        if any(c not in frame.columns for c in COORDS) or rows[list(COORDS)].isna().any().any():
            return None
        for position, (_, row) in zip(sorted(reasons), rows.iterrows()):
            dead.append(_dead_letter(specs[dead_letter], row, f"{REASON}: table {name!r}, {reasons[position]}",
                                     batch_id))
        out[name] = frame.drop(frame.index[sorted(reasons)])
    if not dead:
        return None
    extra = pd.DataFrame(dead)
    previous = out.get(dead_letter)
    out[dead_letter] = extra if previous is None or len(previous) == 0 else pd.concat(
        [previous, extra], ignore_index=True)
    return out


def bad_rows(spec: TableSpec, frame: pd.DataFrame) -> dict[int, str]:
    """Positions of the rows of ``frame`` that ``spec`` refuses, with why (first bad column)."""
    reasons: dict[int, str] = {}
    try:
        prepare_table(spec, frame, sqlite_text=False)
        return reasons
    except SinkRefused:
        pass
    for col in spec.columns:
        if col.name not in frame.columns:
            continue
        required = col.name in spec.key or not col.nullable
        series = frame[col.name]
        for i in range(len(frame)):
            if i in reasons:
                continue
            one = frame.iloc[i:i + 1][[col.name]]
            if required and series.iloc[i:i + 1].isna().all():
                kind = "key" if col.name in spec.key else "non-null"
                reasons[i] = f"column {col.name!r}: no value for a {kind} column"
                continue
            if series.iloc[i:i + 1].isna().all():
                continue  # a null in a nullable column is fine
            try:
                prepare_table(_only(spec, col.name), one, sqlite_text=False)
            except SinkRefused as exc:
                reasons[i] = f"column {col.name!r}: value {series.iloc[i]!r} ({exc})"
    return reasons


def _only(spec: TableSpec, column: str) -> TableSpec:
    """``spec`` reduced to one nullable column, keyed by it: checks that column's values alone."""
    col = next(c for c in spec.columns if c.name == column)
    return TableSpec(spec.name, (type(col)(col.name, col.type, True),), (col.name,), "ignore")


def _dead_letter(spec: TableSpec, row: pd.Series, reason: str, batch_id: int | None) -> dict[str, Any]:
    names = spec.column_names
    out: dict[str, Any] = {c: row[c] for c in COORDS}
    if "reason" in names:
        out["reason"] = reason[:2000]
    if "batch_id" in names:
        out["batch_id"] = batch_id
    for ts in ("kafka_timestamp", "timestamp"):
        if ts in names and ts in row.index:
            out[ts] = row[ts]
    return out
