"""Aggregate tables after a replay: each group it touches recomputed from ALL its records, or left alone.

A replay reads a bounded range (some partitions, a slice of offsets), so the transform's aggregate
rows over it are partial: a group's other records lie outside the range. Writing them would
replace a whole total with a partial one (a replay of one partition of six overwrote 108 of 144
totals that way, and the old contract proof, which checked keys only, passed). So a replay never
writes the transform's aggregate rows. It learns from them (or from the identity rows, for an
aggregate with declared measures) WHICH groups the range touches, and afterwards recomputes each
of those groups by running the stream's own ``build`` as a bounded batch over every retained
record of every partition (``rewind.stream.bounded``), keeping only those groups' rows: the same
code as the stream, over all of a group's records. Only rows that differ are written
(``batch_id`` NULL: written by a replay).

Which groups: those the live stream has CLOSED (window end at or before the watermark of its last
committed batch) or already wrote; open ones stay with the live stream (it still holds them in its
state and will emit them whole). Records the stream routed as behind the watermark are left out
of the recomputation, as its operators left them out, unless this replay brings them back
(``rewind.replay.late``). Groups whose records retention may have deleted (a window that starts
before the first retained record's timestamp, where a partition lost records) are left alone and
reported: recomputing them would shrink them.

A row of a recomputed group that no record makes (every record of the group is still a dead letter,
or there is none: the old replay's partial totals made such rows out of late records) is removed:
the group's whole total is "no row". It is kept first in the replay's run dir (``removed-<table>.jsonl``);
a sink that cannot delete keeps it, and the proof names it. Rows a batch past the stream's last
committed one wrote are never removed: they may hold records past what the recomputation read.

Refused before anything is written (``refusals``): a ``replace`` table not declared an aggregate
(nothing says how to recompute it), and an aggregate without a window when retention has deleted
records (its groups span the whole history). Pure decisions here; ``rewind.replay.job`` does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pandas as pd

from rewind.kafka.types import TP
from rewind.replay.problems import Problem

EXAMPLES = 5


@dataclass
class AggregateOutcome:
    """What a replay did to one aggregate table (counts of groups)."""

    table: str
    touched: int = 0        # groups the replayed records fall in
    recomputed: int = 0     # closed by the stream (or already in the sink): recomputed from all their records
    written: int = 0        # of those, missing or different: written
    unchanged: int = 0      # of those, already right: not touched
    left_open: int = 0      # not closed by the live stream yet: left for it to emit
    left_alone: int = 0     # records possibly deleted by retention: not recomputed, not written
    removed: int = 0        # rows of recomputed groups that no record makes: deleted, kept in ``removed_to``
    unsupported_left: int = 0  # such rows in a sink that cannot delete: left, and the proof names them
    removed_to: str | None = None
    horizon: str | None = None
    horizon_source: str = ""
    examples: list[dict[str, Any]] = field(default_factory=list)  # written rows: before -> after

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def refusals(tables: Sequence[Any], aggregates: Sequence[Any], earliest: Mapping[TP, int]) -> list[Problem]:
    """Why a replay of this stream cannot keep its aggregate tables whole (pure; empty: it can)."""
    declared = {a.table for a in aggregates}
    problems = [Problem("aggregate_undeclared",
                        f"table {t.name!r} is on_conflict 'replace' but not declared an aggregate (Transform."
                        "aggregates): a replay of part of its records would overwrite whole totals with partial "
                        "ones; declare it (docs/add-your-stream.md, 'Aggregates') and replay again")
                for t in tables if t.on_conflict == "replace" and t.name not in declared]
    truncated = sorted(tp for tp, first in earliest.items() if first > 0)
    for agg in aggregates:
        if not agg.window and truncated:
            tp = truncated[0]
            problems.append(Problem("aggregate_unbounded",
                                    f"aggregate table {agg.table!r} has no window: each group spans the whole history "
                                    f"of its keys, and retention deleted {tp.topic}[{tp.partition}] below offset "
                                    f"{earliest[tp]}, so no replay can recompute it whole; nothing was written"))
    return problems


def groups_to_recompute(touched: Mapping[str, pd.Timestamp | None], present: Iterable[str], *,
                        size: timedelta | None, horizon: pd.Timestamp | None,
                        retained_from: pd.Timestamp | None) -> tuple[set[str], set[str], set[str]]:
    """(to recompute, left open, left alone) of the ``touched`` groups (group -> window start) (pure).

    Recomputed: closed by the stream (window end at or before ``horizon``) or already in the sink.
    Left alone: a window starting before ``retained_from`` (records may be gone). An aggregate
    without a window (``size`` None) has every group closed: its rows change with every record.
    """
    have = set(present)
    todo, left_open, alone = set(), set(), set()
    for group, start in touched.items():
        if retained_from is not None and (start is None or start < retained_from):
            alone.add(group)
        elif size is None or group in have or (horizon is not None and start is not None
                                                and start + pd.Timedelta(size) <= horizon):
            todo.add(group)
        else:
            left_open.add(group)
    return todo, left_open, alone


def changed_rows(fresh: pd.DataFrame, current: pd.DataFrame, agg: Any, values: Sequence[str],
                 outcome: AggregateOutcome) -> pd.DataFrame:
    """The recomputed rows that are missing from ``current`` or differ from it (pure); fills the counts."""
    from rewind.proof.aggregates import group_text, plain_value
    from rewind.proof.values import equal_values

    f = fresh.reset_index(drop=True).copy()
    f["_g"] = group_text(f, agg)
    c = current.reset_index(drop=True).copy()
    c["_g"] = group_text(c, agg)
    merged = f.merge(c[["_g", *[v for v in values if v in c.columns]]].drop_duplicates("_g"), on="_g", how="left",
                     suffixes=("", "_now"), indicator=True)
    differs = (merged["_merge"] == "left_only").to_numpy()
    for v in values:
        now = merged[f"{v}_now"] if f"{v}_now" in merged else pd.Series([None] * len(merged))
        differs |= ~equal_values(merged[v].reset_index(drop=True), now.reset_index(drop=True))
    outcome.recomputed = len(f)
    outcome.written = int(differs.sum())
    outcome.unchanged = outcome.recomputed - outcome.written
    for i in [i for i, d in enumerate(differs) if d][:EXAMPLES]:
        before = None if merged["_merge"].iat[i] == "left_only" else {v: plain_value(merged[f"{v}_now"].iat[i])
                                                                      for v in values}
        outcome.examples.append({"group": str(merged["_g"].iat[i]).replace("\x1f", ", "), "before": before,
                                 "after": {v: plain_value(merged[v].iat[i]) for v in values}})
    return f[differs].drop(columns=["_g"]).assign(batch_id=None)


def unsupported_rows(current: pd.DataFrame, fresh: pd.DataFrame, agg: Any, todo: set[str], *,
                     last_batch: int | None) -> pd.DataFrame:
    """The rows of ``current`` whose group was recomputed (``todo``) but that no record of ``fresh``
    makes (pure). Left out: rows written by a batch after ``last_batch`` (the stream's last committed
    one; None: any stream batch), which may hold records the recomputation did not read."""
    from rewind.proof.aggregates import group_text

    if not len(current):
        return current
    groups = group_text(current, agg)
    made = set(group_text(fresh, agg)) if len(fresh) else set()
    gone = (groups.isin(todo) & ~groups.isin(made)).to_numpy()
    if "batch_id" in current:
        batch = pd.to_numeric(current["batch_id"], errors="coerce")
        settled = batch.isna() if last_batch is None else batch.isna() | (batch <= last_batch)
        gone &= settled.to_numpy()
    return current[gone]
