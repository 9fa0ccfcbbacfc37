"""The I/O of a replay's aggregates: which groups its chunks touch, and their recomputation from Kafka.

``rewind.replay.aggregates`` decides (pure); this module reads the sink and Kafka and writes. See
that module's docstring for why a replay never writes the transform's partial aggregate rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd

from rewind.api.contract import identity_of
from rewind.checkpoints.watermark import committed_end_offsets, stream_watermark
from rewind.driver.bounded import build_batch, whole_span
from rewind.kafka.types import TP
from rewind.proof.aggregates import group_text, plain_value, utc, value_columns
from rewind.proof.values import rules_for
from rewind.proof.verify import read_records
from rewind.replay.aggregates import EXAMPLES, AggregateOutcome, classes_text, decide, to_recompute
from rewind.sink.deletes import delete_keys, supports_delete

log = logging.getLogger(__name__)

Touched = dict[str, dict[str, pd.Timestamp | None]]  # aggregate table -> group -> window start


def from_identity_rows(transform: Any, tables: Mapping[str, Any]) -> list[Any]:
    """The aggregates whose touched groups the identity rows name (declared measures over columns the
    identity table carries): the replay then needs none of the transform's aggregate rows."""

    spec = tables.get(identity_of(transform).table)
    have = set(spec.column_names) if spec is not None else set()
    return [a for a in transform.aggregates if a.measures and {a.event_time, *a.keys} <= have]


def touched_groups(transform: Any, spec: Any, tables: Mapping[str, pd.DataFrame], by_identity: list[Any],
                   touched: Touched) -> None:
    """Add the groups one chunk's output touches: from its identity rows (``by_identity``) or from its
    (partial) aggregate rows."""

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
        frame = distinct_groups(frame, agg)
        starts = utc(frame[agg.window]) if agg.window else pd.Series([None] * len(frame), index=frame.index)
        mine.update(zip(group_text(frame, agg), starts))


def distinct_groups(frame: pd.DataFrame, agg: Any) -> pd.DataFrame:
    """One row per distinct group (window start and keys) of ``frame``, before each group is turned into
    its text row by row: a chunk of 200,000 events touches a few hundred windows, and the text of each
    row was 60 % of a replay's writer thread (py-spy, 2026-11-29). Rows are told apart by pandas' hash
    of their values, which separates at least what the text separates (an object column hashes by its
    values' text), so no group is lost."""
    cols = ([agg.window] if agg.window else []) + list(agg.keys)
    if len(frame) < 2 or not cols:
        return frame
    return frame[~pd.util.hash_pandas_object(frame[cols], index=False).duplicated().to_numpy()]


def horizon_of(spec: Any, sink: Any, transform: Any, agg: Any, checkpoint: tuple[Any, int | None, str | None]
               ) -> tuple[pd.Timestamp | None, str]:
    """Up to where the live stream has closed groups, and how that was learned; ``checkpoint``: the
    stream's (watermark, last committed batch, note), ``stream_watermark(spec, None)``."""

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
    write what differs into ``target``; ``exclude``: records behind the watermark still dead letters.
    Every touched group ends in one class (``rewind.replay.aggregates.group_fate``)."""

    spec = setup.spec
    cut_from = retained_from(spec, bootstrap, earliest)
    checkpoint = stream_watermark(spec, None)  # read once: the horizon and the last batch agree
    last_batch = checkpoint[1]  # rows of later batches are never removed
    can_delete = supports_delete(target)
    committed = committed_end_offsets(spec)
    upper = {TP(t, p): o for (t, p), o in committed.items()} if committed else dict(ends)
    for tp, (_, end) in setup.ranges.items():
        upper[tp] = max(upper.get(tp, 0), end)
    span = whole_span(earliest, ends, upper)
    plans: dict[str, tuple[set[str], set[str], pd.Timestamp | None, str]] = {}
    for agg in transform.aggregates:
        groups = touched.get(agg.table, {})
        horizon, source = horizon_of(spec, main, transform, agg, checkpoint)
        present = set(group_text(target.read_table(agg.table), agg)) & set(groups)
        todo = to_recompute(groups, present, size=agg.window_size(spec), horizon=horizon, retained_from=cut_from)
        plans[agg.table] = (todo, present, horizon, source)
    fresh: dict[str, pd.DataFrame] = {}
    if any(plan[0] for plan in plans.values()):
        kinds = [a.output_kind for a in transform.aggregates if plans[a.table][0]]
        fresh = build_batch(spark, spec, transform, bootstrap, span, earliest=earliest, exclude=exclude, kinds=kinds,
                            description=f"rewind replay {setup.replay_id}: aggregates recomputed from all their "
                                        "records")
    outcomes: dict[str, AggregateOutcome] = {}
    for agg in transform.aggregates:
        todo, present, horizon, source = plans[agg.table]
        values = value_columns(target.specs[agg.table].column_names, agg)
        rows, current = pd.DataFrame(), pd.DataFrame()
        if todo:
            rows = fresh.get(agg.table, pd.DataFrame())
            rows = rows[group_text(rows, agg).isin(todo).to_numpy()] if len(rows) else rows
            current = target.read_table(agg.table)  # read again: the live stream may have written meanwhile
        decision = decide(touched.get(agg.table, {}), present, rows, current, agg, values,
                          size=agg.window_size(spec), horizon=horizon, retained_from=cut_from, last_batch=last_batch,
                          can_delete=can_delete, rules=rules_for(target.specs[agg.table]))
        outcome = AggregateOutcome.of(agg.table, decision.fates, horizon=None if horizon is None else
                                      horizon.isoformat(), horizon_source=source, examples=decision.examples)
        outcomes[agg.table] = outcome
        if len(decision.write):
            target.write_rows({agg.table: decision.write}, replay_id=setup.replay_id)
        if len(decision.unmade):
            remove_unsupported(setup, target, agg, decision.unmade, decision.remove, values, outcome)
        log.info("replay %s %s: %s (recomputed from all their records: %d; closed up to %s: %s)", setup.replay_id,
                 agg.table, classes_text(outcome.to_json()), len(todo), outcome.horizon, outcome.horizon_source)
    return outcomes


def remove_unsupported(setup: Any, target: Any, agg: Any, unmade: pd.DataFrame, removed: pd.DataFrame,
                       values: list[str], outcome: AggregateOutcome) -> None:
    """Rows no record makes (``unmade``): written to the run dir first (``removed-<table>.jsonl``), then
    those of ``removed`` groups deleted from ``target``; a sink that cannot delete keeps the others
    (their groups left alone, ``sink_cannot_delete``; the proof names them)."""

    path = setup.run_dir / f"removed-{agg.table}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    unmade.to_json(path, orient="records", lines=True, date_format="iso", date_unit="us")
    outcome.removed_to = str(path)
    for group, (_, row) in list(zip(group_text(unmade, agg), unmade.iterrows()))[:EXAMPLES]:
        outcome.examples.append({"group": str(group).replace("\x1f", ", "), "after": None,
                                 "before": {v: plain_value(row[v]) for v in values if v in row}})
    kept = len(unmade) - len(removed)
    if kept:
        log.warning("replay %s %s: %d row(s) of groups no record makes, and %s cannot delete rows: left (copies "
                    "in %s); the proof names them", setup.replay_id, agg.table, kept, type(target).__name__, path)
    if len(removed):
        delete_keys(target, agg.table, removed, label=f"replay {setup.replay_id}: rows no record makes")
        outcome.removed_rows = len(removed)
        log.warning("replay %s %s: %d row(s) of %d group(s) no record makes removed (every record of each is a "
                    "dead letter or gone); copies in %s", setup.replay_id, agg.table, len(removed), outcome.removed,
                    path)
