"""Every aggregate table of a stream proven by value: the I/O around ``rewind.proof.aggregates``.

For each ``Aggregate`` the transform declares, the sink's rows are read (every committed copy,
``Sink.duplicate_rows``) and each group is recomputed from the Kafka records that make it:

- with ``expect()`` and declared measures: in pandas, from ``expect()``'s valid rows (one per
  identity), without Spark;
- otherwise: ``build`` run as a bounded batch (``rewind.driver.bounded``) over every retained
  record of every partition up to the proved range's end, only the aggregate's rows kept: the
  same code as the stream, over all of a group's records.

Either way the records the stream routed as behind the watermark are left out (its stateful
operators never counted them; a batch has no watermark), unless a replay brought them back
(then they are rows, not dead letters: ``rewind.replay.late``). A bounded proof judges the groups
its records fall in, recomputed whole: so it reads the records before its range too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rewind.api.contract import identity_of
from rewind.api.late import BEHIND_WATERMARK
from rewind.checkpoints.watermark import planned_after, stream_watermark
from rewind.driver.bounded import build_batch, whole_span
from rewind.driver.outputs import spark_for
from rewind.kafka.types import TP
from rewind.proof.aggregates import (
    FRAME_COLUMNS,
    closing_horizon,
    counts_of,
    group_text,
    judge_groups,
    recompute_measures,
    value_columns,
)
from rewind.proof.checks import COORDS
from rewind.proof.origin import proved_partitions
from rewind.proof.values import rules_for
from rewind.proof.verify import with_duplicates

Coord = tuple[str, int, int]


@dataclass
class AggregateProof:
    """The ``aggregates`` frame of a stream, its counts, and notes on how it was recomputed."""

    frame: pd.DataFrame
    counts: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def empty_proof() -> AggregateProof:
    frame = pd.DataFrame(columns=FRAME_COLUMNS)
    return AggregateProof(frame, counts_of(frame))


def late_coordinates(sink: Any, dead_letter_table: str) -> set[Coord]:
    """Coordinates of the records the stream routed as behind the watermark (never counted by its aggregates)."""

    rows = sink.read_rows(dead_letter_table, lambda t: t.c.reason == BEHIND_WATERMARK, columns=COORDS)
    return {(str(t), int(p), int(o)) for t, p, o in zip(rows["topic"], rows["partition"], rows["offset"])}


def counted_rows(expected: pd.DataFrame, identity_columns: Sequence[str], late: set[Coord]) -> pd.DataFrame:
    """``expect()``'s rows the stream's aggregates count: valid, not behind the watermark, one per identity
    (``identity_columns``: with a ``latest`` identity's version, so each version of an entity is a record)."""
    valid = expected[expected["reason"].isna()]
    if late and len(valid):
        coords = zip(valid["topic"].astype(str), valid["partition"].astype("int64"), valid["offset"].astype("int64"))
        valid = valid[[c not in late for c in coords]]
    return valid.drop_duplicates(list(identity_columns))


def holds_every_record(expected: pd.DataFrame, judged: np.ndarray, span: Mapping[Any, tuple[int, int]]) -> bool:
    """Whether the span's records are every record its partitions ever held: all of ``expected`` (the
    records read) is judged, and each partition of the span was read from offset 0 (so retention
    deleted none: the groups of deleted records would have rows no record read makes). Pure."""
    if not np.asarray(judged, dtype=bool).all():
        return False
    first = expected.groupby([expected["topic"].astype(str), expected["partition"].astype("int64")])["offset"].min() \
        if len(expected) else pd.Series(dtype="int64")
    return all(int(first.get((str(t), int(p)), -1)) == 0 for (t, p), (lo, hi) in span.items() if hi > lo)


def prove_aggregates(spec: Any, transform: Any, bootstrap: str, sink: Any, *,
                     span: Mapping[Any, tuple[int, int]] | None, expected: pd.DataFrame | None = None,
                     judged: np.ndarray | None = None, span_tables: Mapping[str, pd.DataFrame] | None = None,
                     spark: Any = None, last_batch: int | None = None,
                     watermark: Any = "read") -> AggregateProof:
    """The aggregates frame of ``transform``'s declared aggregates over ``span`` (None: everything).

    ``expected``: ``expect()``'s rows of every record read, with ``judged`` marking those in the span
    (the measures path). ``span_tables``: ``build``'s tables over the span, when the caller ran it
    (their aggregate rows name the groups a bounded proof judges). ``last_batch``: the last committed
    batch when the proof began (rows of later batches are left out); ``watermark``: the one that
    batch ran with (groups closed up to it), by default read from ``offsets/<last_batch>``.
    """

    aggregates = list(transform.aggregates)
    if not aggregates:
        return empty_proof()
    late = late_coordinates(sink, transform.dead_letter_table)
    if watermark == "read":
        watermark = stream_watermark(spec, last_batch)[0]
    delay = spec.durations()["watermark_delay"]
    use_measures = [a for a in aggregates if expected is not None and a.measures]
    ident = identity_of(transform)
    record_of = (*ident.columns, *([ident.version] if ident.version else []))  # one record: an identity's version
    by_build = [a for a in aggregates if a not in use_measures]
    built: dict[str, pd.DataFrame] = {}
    scopes: dict[str, pd.DataFrame] = {}
    notes: list[str] = []
    if by_build:
        built, scopes = _recompute_by_build(spec, transform, bootstrap, span, by_build, late, span_tables, spark)
        notes.append(f"aggregates {[a.table for a in by_build]} recomputed by build() over every retained record "
                     f"up to the range's end, {len(late)} record(s) behind the watermark left out")
    held = {agg.table: with_duplicates(sink, agg.table, sink.read_table(agg.table)) for agg in aggregates}
    # after the rows were read: the batches the checkpoint had planned by then past the proved one
    later = planned_after(spec, last_batch) if last_batch is not None else None
    frames = []
    for agg in aggregates:
        size = agg.window_size(spec)
        rules = rules_for(sink.specs[agg.table])
        rows = held[agg.table]
        if agg in use_measures:
            assert expected is not None
            counted = counted_rows(expected, record_of, late)
            recomputed = recompute_measures(counted, agg, size)
            scope = None
            # a span judges only the groups its records make, unless it holds every record each of its
            # partitions ever had (nothing left out, nothing deleted by retention): then every group is
            # judged, so a row of a group no record makes is unexpected
            if span is not None and judged is not None and not holds_every_record(expected, judged, span):
                mine = counted_rows(expected[judged], record_of, late)
                scope = set(group_text(recompute_measures(mine, agg, size), agg, rules))
            latest = pd.to_datetime(counted["event_time"], utc=True).max() if len(counted) else None
            values = [m.column for m in agg.measures]
        else:
            recomputed = built.get(agg.table, pd.DataFrame(columns=list(agg.group_columns)))
            scope = None if agg.table not in scopes else set(group_text(scopes[agg.table], agg, rules))
            latest = None
            table_columns = [c.name for c in sink.specs[agg.table].columns]
            values = value_columns(table_columns, agg)
        horizon = closing_horizon(watermark, latest, delay)
        frames.append(judge_groups(rows, recomputed, agg, values=values, size=size, closed_until=horizon, scope=scope,
                                   last_batch=last_batch, rules=rules, later=later))
    frame = pd.concat(frames, ignore_index=True) if frames else empty_proof().frame
    counts: dict[str, Any] = dict(counts_of(frame))
    counts["aggregates_closed_until"] = None if watermark is None else watermark.isoformat()
    return AggregateProof(frame, counts, notes)


def _recompute_by_build(spec: Any, transform: Any, bootstrap: str, span: Mapping[Any, tuple[int, int]] | None,
                        aggregates: Sequence[Any], late: set[Coord], span_tables: Mapping[str, pd.DataFrame] | None,
                        spark: Any) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """(recomputed rows per aggregate table over the whole span, the groups the proved span touches)."""

    spark = spark or spark_for(spec)
    earliest, ends = proved_partitions(spec, bootstrap)  # a stream started mid-topic: from its start
    tps_span = None if span is None else {TP(t, int(p)): r for (t, p), r in span.items()}
    upper = None if tps_span is None else {tp: e for tp, (_, e) in tps_span.items()}
    whole = whole_span(earliest, ends, upper)
    kinds = [a.output_kind for a in aggregates]
    tables = build_batch(spark, spec, transform, bootstrap, whole, earliest=earliest, exclude=late, kinds=kinds,
                         description=f"rewind proof of {spec.name}: aggregates recomputed from every record")
    built = {a.table: tables.get(a.table, pd.DataFrame()) for a in aggregates}
    scopes: dict[str, pd.DataFrame] = {}
    if tps_span is not None and any(tps_span.get(tp, (0, 0)) != r for tp, r in whole.items() if r[1] > r[0]):
        touched = span_tables if span_tables is not None else build_batch(
            spark, spec, transform, bootstrap, tps_span, earliest=earliest, kinds=kinds,
            description=f"rewind proof of {spec.name}: the groups the proved range touches")
        scopes = {a.table: touched.get(a.table, pd.DataFrame(columns=list(a.group_columns))) for a in aggregates}
    return built, scopes
