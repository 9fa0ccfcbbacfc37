"""The I/O of a replay's aggregates: which groups its chunks touch, and their recomputation from Kafka.

``rewind.replay.aggregates`` decides (pure); this module reads the sink and Kafka and writes. See
that module's docstring for why a replay never writes the transform's partial aggregate rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd

from rewind.kafka.types import TP
from rewind.replay.aggregates import EXAMPLES, AggregateOutcome, changed_rows, groups_to_recompute, unsupported_rows

log = logging.getLogger(__name__)

Touched = dict[str, dict[str, pd.Timestamp | None]]  # aggregate table -> group -> window start


def from_identity_rows(transform: Any, tables: Mapping[str, Any]) -> list[Any]:
    """The aggregates whose touched groups the identity rows name (declared measures over columns the
    identity table carries): the replay then needs none of the transform's aggregate rows."""
    from rewind.stream.contract import identity_of

    spec = tables.get(identity_of(transform).table)
    have = set(spec.column_names) if spec is not None else set()
    return [a for a in transform.aggregates if a.measures and {a.event_time, *a.keys} <= have]


def touched_groups(transform: Any, spec: Any, tables: Mapping[str, pd.DataFrame], by_identity: list[Any],
                   touched: Touched) -> None:
    """Add the groups one chunk's output touches: from its identity rows (``by_identity``) or from its
    (partial) aggregate rows."""
    from rewind.proof.aggregates import group_text, utc
    from rewind.stream.contract import identity_of

    rows = tables.get(identity_of(transform).table)
    for agg in transform.aggregates:
        mine = touched.setdefault(agg.table, {})
        if agg in by_identity:
            if rows is None or not len(rows):
                continue
            size = agg.window_size(spec)
            frame = rows[list(agg.keys)].copy()
            if agg.window:
                frame.insert(0, agg.window, utc(rows[agg.event_time]).dt.floor(pd.Timedelta(size)))
                frame = frame[frame[agg.window].notna()]
        else:
            frame = tables.get(agg.table)
            if frame is None or not len(frame):
                continue
        starts = utc(frame[agg.window]) if agg.window else pd.Series([None] * len(frame), index=frame.index)
        mine.update(zip(group_text(frame, agg), starts))


def horizon_of(spec: Any, sink: Any, transform: Any, agg: Any, checkpoint: tuple[Any, int | None, str | None]
               ) -> tuple[pd.Timestamp | None, str]:
    """Up to where the live stream has closed groups, and how that was learned; ``checkpoint``: the
    stream's (watermark, last committed batch, note), ``stream_watermark(spec, None)``."""
    from rewind.stream.contract import identity_of

    watermark, batch, note = checkpoint
    if watermark is not None:
        return pd.Timestamp(watermark).tz_convert("UTC"), f"watermark of the stream's committed batch {batch}"
    table = identity_of(transform).table
    if batch is None and agg.event_time in sink.specs[table].column_names:
        latest = sink.column_max(table, agg.event_time)
        if latest is not None:
            horizon = pd.Timestamp(latest) - pd.Timedelta(spec.durations()["watermark_delay"])
            return horizon, f"raw horizon: latest {agg.event_time} in the sink minus the watermark delay ({note})"
    return None, note or f"no watermark in the checkpoint at batch {batch}: no group is taken as closed"


def retained_from(spec: Any, bootstrap: str, earliest: Mapping[TP, int]) -> pd.Timestamp | None:
    """The latest Kafka timestamp among the first retained records of partitions retention has cut
    (None: nothing deleted). A window starting before it may have lost records."""
    from rewind.proof.verify import read_records

    cut = {(tp.topic, tp.partition): first for tp, first in earliest.items() if first > 0}
    if not cut:
        return None
    lower = {(tp.topic, tp.partition): first for tp, first in earliest.items()}
    upper = {k: v + (1 if k in cut else 0) for k, v in lower.items()}
    stamps = [r.timestamp_ms for r in read_records(bootstrap, spec.topics, source_options=spec.source.options,
                                                   upper=upper, lower=lower) if r.timestamp_ms is not None]
    return pd.Timestamp(max(stamps), unit="ms", tz="UTC") if stamps else None


def recompute_touched(setup: Any, bootstrap: str, spark: Any, target: Any, main: Any, transform: Any,
                      touched: Touched, *, earliest: Mapping[TP, int], ends: Mapping[TP, int],
                      exclude: set[tuple[str, int, int]]) -> dict[str, AggregateOutcome]:
    """Recompute every touched group the stream has closed (or already wrote) from all its records and
    write what differs into ``target``; ``exclude``: records behind the watermark still dead letters."""
    from rewind.checkpoints.watermark import committed_end_offsets, stream_watermark
    from rewind.proof.aggregates import group_text, value_columns
    from rewind.stream.bounded import build_batch, whole_span

    spec = setup.spec
    cut_from = retained_from(spec, bootstrap, earliest)
    checkpoint = stream_watermark(spec, None)  # read once: the horizon and the last batch agree
    last_batch = checkpoint[1]  # rows of later batches are never removed
    committed = committed_end_offsets(spec)
    upper = {TP(t, p): o for (t, p), o in committed.items()} if committed else dict(ends)
    for tp, (_, end) in setup.ranges.items():
        upper[tp] = max(upper.get(tp, 0), end)
    span = whole_span(earliest, ends, upper)
    outcomes: dict[str, AggregateOutcome] = {}
    todo_by: dict[str, set[str]] = {}
    for agg in transform.aggregates:
        groups = touched.get(agg.table, {})
        horizon, source = horizon_of(spec, main, transform, agg, checkpoint)
        current = target.read_table(agg.table)
        present = set(group_text(current, agg)) & set(groups)
        todo, left_open, alone = groups_to_recompute(groups, present, size=agg.window_size(spec), horizon=horizon,
                                                     retained_from=cut_from)
        outcomes[agg.table] = AggregateOutcome(agg.table, touched=len(groups), left_open=len(left_open),
                                               left_alone=len(alone), horizon=None if horizon is None else
                                               horizon.isoformat(), horizon_source=source)
        todo_by[agg.table] = todo
    if not any(todo_by.values()):
        return outcomes
    kinds = [a.output_kind for a in transform.aggregates if todo_by[a.table]]
    fresh = build_batch(spark, spec, transform, bootstrap, span, earliest=earliest, exclude=exclude, kinds=kinds,
                        description=f"rewind replay {setup.replay_id}: aggregates recomputed from all their records")
    for agg in transform.aggregates:
        todo, outcome = todo_by[agg.table], outcomes[agg.table]
        if not todo:
            continue
        rows = fresh.get(agg.table, pd.DataFrame())
        rows = rows[group_text(rows, agg).isin(todo).to_numpy()] if len(rows) else rows
        current = target.read_table(agg.table)
        values = value_columns(target.specs[agg.table].column_names, agg)
        changed = changed_rows(rows, current, agg, values, outcome)
        if len(changed):
            target.write_rows({agg.table: changed}, replay_id=setup.replay_id)
        gone = unsupported_rows(current, rows, agg, todo, last_batch=last_batch)
        if len(gone):
            remove_unsupported(setup, target, agg, gone, values, outcome)
        log.info("replay %s %s: %d groups touched, %d recomputed from all their records, %d written, %d unchanged, "
                 "%d removed, %d left open, %d left alone (closed up to %s: %s)", setup.replay_id, agg.table,
                 outcome.touched, outcome.recomputed, outcome.written, outcome.unchanged, outcome.removed,
                 outcome.left_open, outcome.left_alone, outcome.horizon, outcome.horizon_source)
    return outcomes


def remove_unsupported(setup: Any, target: Any, agg: Any, gone: pd.DataFrame, values: list[str],
                       outcome: AggregateOutcome) -> None:
    """Rows no record makes: written to the run dir first (``removed-<table>.jsonl``), then deleted
    from ``target``; a sink that cannot delete keeps them (the proof then names them)."""
    from rewind.proof.aggregates import group_text, plain_value
    from rewind.sink.deletes import delete_keys, supports_delete

    path = setup.run_dir / f"removed-{agg.table}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    gone.to_json(path, orient="records", lines=True, date_format="iso", date_unit="us")
    outcome.removed_to = str(path)
    for group, (_, row) in list(zip(group_text(gone, agg), gone.iterrows()))[:EXAMPLES]:
        outcome.examples.append({"group": str(group).replace("\x1f", ", "), "after": None,
                                 "before": {v: plain_value(row[v]) for v in values if v in row}})
    if not supports_delete(target):
        outcome.unsupported_left = len(gone)
        log.warning("replay %s %s: %d row(s) of groups no record makes, and %s cannot delete rows: left (copies "
                    "in %s); the proof names them", setup.replay_id, agg.table, len(gone), type(target).__name__, path)
        return
    delete_keys(target, agg.table, gone, label=f"replay {setup.replay_id}: rows no record makes")
    outcome.removed = len(gone)
    log.warning("replay %s %s: %d row(s) of groups no record makes removed (every record of each is a dead letter "
                "or gone); copies in %s", setup.replay_id, agg.table, len(gone), path)
