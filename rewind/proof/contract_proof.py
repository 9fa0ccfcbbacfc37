"""The contract-derived proof of one stream (``dq_suite: contract``): the I/O around ``contract_frames``.

What each record becomes comes from the stream's transform: with ``expect()``, Kafka is re-read
with a plain consumer (not the Spark source under test) and ``expect()`` judges every record
(an independent implementation of the rules); without it, the stream's own ``build`` runs as a
bounded batch over exactly the proved offsets (``rewind.driver.bounded``) and its rows are what
the sink must hold (the same code: a proof of the sink, the crashes and the replays, not of the
rules). ``rewind.proof.contract_frames`` holds the sink's tables to it, and every aggregate table
is proven by value (``rewind.proof.aggregate_proof``). ``verify_contract_stream`` is ``rewind
verify`` for such a stream (a report with ``ok`` and ``summary()``); the DQ proof
(``rewind.proof.dq.run_proof``) validates the same frames with Great Expectations
(``rewind.proof.checks.CONTRACT_CHECKS``).

Range: while the stream runs, the records below its last committed batch's end offsets are
judged. A bounded proof (from the cursor) reads only its span, except that aggregates are
recomputed from every record of the groups the span touches.

Without ``expect()``: the identity table's rows must carry the Kafka coordinates (``topic``,
``partition``, ``offset``) so that a row can be told from the record it stands for; a batch's
deduplication may keep another copy of a record than the stream kept, so those coordinates (and
``kafka_timestamp``) are not compared for a table keyed otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rewind.api.contract import Transform, has_expect, identity_of, load_transform
from rewind.api.late import BEHIND_WATERMARK
from rewind.checkpoints.watermark import planned_after
from rewind.driver.bounded import build_batch, build_records, whole_span
from rewind.driver.outputs import spark_for
from rewind.driver.runner import open_sink
from rewind.errors import Refused
from rewind.kafka.types import TP
from rewind.proof.aggregate_proof import prove_aggregates
from rewind.proof.checks import COORDS
from rewind.proof.contract_frames import (
    EXPECT_COLUMNS,
    FILTERED,
    PAST_ANY_OFFSET,
    ContractFrames,
    build_contract_frames,
)
from rewind.proof.cursor import Since, Span, resolve_span, write_cursor
from rewind.proof.frames import range_mask
from rewind.proof.origin import origin_text, proved_partitions, stream_origin, unknown_origin_note
from rewind.proof.scope import Committed, committed_position
from rewind.proof.values import rules_for
from rewind.proof.verify import read_records, records_frame, with_duplicates
from rewind.sink.dialects import coordinates_in
from rewind.sink.errors import TOO_LARGE
from rewind.sink.kafka_target import is_kafka_url

#: How many example rows a report shows per problem.
EXAMPLES = 5


class ExpectRefused(Refused, ValueError):
    """A transform's ``expect()`` returned something the proof cannot read (the message says what)."""


@dataclass
class ContractReport:
    """``rewind verify``'s verdict on a contract stream: counts and example rows of each problem."""

    stream: str
    counts: dict[str, Any]
    range: dict[str, dict[str, list[int]]]
    problems: dict[str, int] = field(default_factory=dict)  # problem -> how many rows
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())

    def summary(self, examples: int = EXAMPLES) -> dict[str, Any]:
        return {"stream": self.stream, "suite": "contract", "ok": self.ok, "range": self.range,
                "notes": self.notes, **self.counts,
                **{k: {"count": n, "examples": self.examples.get(k, [])[:examples]}
                   for k, n in self.problems.items()}}

    def __str__(self) -> str:
        return json.dumps(self.summary(), indent=1, default=str)


def expected_frame(transform: Transform, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
    """``expect()`` checked and joined to the records' coordinates; refused naming what it lacks."""
    out = transform.expect(records, spec)
    where = f"stream {spec.name}: {type(transform).__name__}.expect()"
    if not isinstance(out, pd.DataFrame) or len(out) != len(records):
        got = f"{len(out)} rows" if isinstance(out, pd.DataFrame) else type(out).__name__
        raise ExpectRefused(f"{where} must return a pandas DataFrame with one row per record ({len(records)}), "
                            f"got {got}")
    ident = identity_of(transform)
    need = [*ident.columns, *EXPECT_COLUMNS, *([ident.version] if ident.version else [])]
    lacking = [c for c in need if c not in out.columns]
    if lacking:
        raise ExpectRefused(f"{where} lacks column(s) {lacking}: it must return the identity columns "
                            f"{list(ident.columns)}, {list(EXPECT_COLUMNS)}"
                            + (f" and the version {ident.version!r}" if ident.version else ""))
    out = out.reset_index(drop=True).drop(columns=[c for c in COORDS if c in out.columns])
    exp = pd.concat([records[COORDS].reset_index(drop=True), out], axis=1)
    exp["event_time"] = pd.to_datetime(exp["event_time"], utc=True)
    exp["reason"] = exp["reason"].astype(object).where(exp["reason"].notna(), None)
    return exp


def contract_frames(spec: Any, bootstrap: str, span: Span | None = None, transform: Transform | None = None, *,
                    spark: Any = None, last_batch: int | None = None, watermark: Any = "read",
                    committed_ends: dict[tuple[str, int], int] | None = None) -> ContractFrames:
    """The frames of ``span`` (``[start, end)`` per partition; None: every record Kafka holds).

    With a span, only its records are read (and, for aggregates, the records of the groups they
    touch), and only the sink rows they touch: rows of their identities (to find each record's
    row) and rows and dead letters at coordinates in the span (judged). ``spark``: the session for
    a transform without ``expect()`` or with aggregates to recompute by ``build`` (default: the
    active one, else a local one). ``last_batch``: the stream's last committed batch when the proof
    began; rows of later batches are not judged. ``watermark``: the watermark that batch ran with
    (default: read from its checkpoint).
    """

    transform = transform or load_transform(spec)
    ident = identity_of(transform)
    aggregated = {a.table for a in transform.aggregates}
    sink = open_sink(spec, transform, spark)
    judged = None
    notes: list[str] = []
    past_scope: dict[tuple[str, int], tuple[int, int]] = {}
    try:
        rules = {name: rules_for(table) for name, table in sink.specs.items()}
        span_tables = None
        if has_expect(transform):
            wide = span is not None and any(a.measures for a in transform.aggregates)
            upper = None if span is None else {k: e for k, (_, e) in span.items()}
            lower = None if span is None or wide else {k: s for k, (s, _) in span.items()}
            records = read_records(bootstrap, spec.topics, source_options=spec.source.options, upper=upper,
                                   lower=lower)
            exp = expected_frame(transform, records_frame(records), spec)
            del records
            if wide:

                judged = range_mask(exp, dict(span or {}))
        else:

            spark = spark or spark_for(spec)
            exp, span_tables, why = expected_from_build(spark, spec, transform, bootstrap, span)
            notes.append(f"no expect(): the sink is held to build() run as a bounded batch over the proved offsets "
                         f"({why})")
        names = [t for t in sink.specs if t not in aggregated]
        if span is None:
            tables = {name: with_duplicates(sink, name, sink.read_table(name)) for name in names}
        else:
            tables = touched_rows(sink, transform, exp if judged is None else exp[judged], span)
            past_scope = {k: (0, (committed_ends or {}).get(k, end)) for k, (_, end) in span.items()}
            past = rows_past_end(sink, transform, exp, past_scope, last_batch)
            tables = {name: with_duplicates(sink, name, pd.concat([frame, past[name]], ignore_index=True)
                                            if len(past.get(name, ())) else frame) for name, frame in tables.items()}
        aggregates = prove_aggregates(spec, transform, bootstrap, sink, span=span,
                                      expected=exp if has_expect(transform) else None, judged=judged,
                                      span_tables=span_tables, spark=spark, last_batch=last_batch,
                                      watermark=watermark)
        # after every row was read: the batches the checkpoint had planned by then past the proved one
        later = planned_after(spec, last_batch) if last_batch is not None else None
    finally:
        sink.dispose()
    frames = build_contract_frames(exp, tables, identity=ident, keys={t.name: t.key for t in transform.tables},
                                   dead_letter_table=transform.dead_letter_table, late_reason=BEHIND_WATERMARK,
                                   too_large_reason=TOO_LARGE if is_kafka_url(spec.sink.url) else None,
                                   row_scope=span, judged=judged, rules=rules, last_batch=last_batch, later=later,
                                   past_scope=None if span is None else past_scope)
    frames.aggregates = aggregates.frame
    frames.counts.update(aggregates.counts)
    frames.notes = notes + aggregates.notes
    return frames


#: At most this many extra passes of ``build`` find the identities of records its deduplication
#: dropped (a record sent N times needs N - 1 passes); what is left after them counts as ``filtered``.
LEFTOVER_PASSES = 8


def expected_from_build(spark: Any, spec: Any, transform: Transform, bootstrap: str, span: Span | None
                        ) -> tuple[pd.DataFrame, dict[str, pd.DataFrame], str]:
    """What the sink must hold for ``span`` without ``expect()``, one row per Kafka record (and one per
    further identity row a record makes), as the frame ``build_contract_frames`` reads; the batch's
    tables (aggregate rows name the groups); and a line saying how it was found.

    ``build`` runs as a bounded batch over exactly those offsets. Its deduplication keeps one copy
    of a record sent twice, so the others have no row in that batch: every record of the span is
    also read with a plain consumer (Kafka records are counted as Kafka records), and ``build`` runs
    again over only the records without a row, until each has one or ``build`` writes nothing for
    it: those are ``filtered`` (its own rule drops them).
    """

    earliest, ends = proved_partitions(spec, bootstrap)  # a stream started mid-topic: from its start
    if span is None:
        ranges = whole_span(earliest, ends)
    else:  # exactly the span (what retention left of it)
        ranges = {TP(t, int(p)): (max(int(lo), earliest.get(TP(t, int(p)), 0)), int(hi))
                  for (t, p), (lo, hi) in span.items()}
    tables = build_batch(spark, spec, transform, bootstrap, ranges, earliest=earliest,
                         description=f"rewind proof of {spec.name}: build() over the proved offsets")
    ident = identity_of(transform)
    dead_table = transform.dead_letter_table
    parts = [_expected_part(spec, tables, ident, dead_table)]
    live = {(tp.topic, tp.partition): r for tp, r in ranges.items() if r[1] > r[0]}
    records = read_records(bootstrap, spec.topics, source_options=spec.source.options,
                           upper={k: e for k, (_, e) in live.items()},
                           lower={k: s for k, (s, _) in live.items()}) if live else []
    records = [r for r in records if (r.topic, r.partition) in live]
    seen = set(_coord_tuples(parts[0]))
    left = [r for r in records if (r.topic, r.partition, r.offset) not in seen]
    kinds = [ident.table, dead_table, *(k for k, t in transform.kinds.items() if t in (ident.table, dead_table))]
    passes = extra = 0
    while left and passes < LEFTOVER_PASSES:
        more = _expected_part(spec, build_records(spark, spec, transform, left, kinds=kinds,
                                                  description=f"rewind proof of {spec.name}: build() over the "
                                                              f"{len(left)} records without a row"),
                              ident, dead_table)
        found = set(_coord_tuples(more)) & {(r.topic, r.partition, r.offset) for r in left}
        if not found:
            break
        parts.append(more[[c in found for c in _coord_tuples(more)]])
        extra += len(parts[-1])
        left = [r for r in left if (r.topic, r.partition, r.offset) not in found]
        passes += 1
    if left:
        parts.append(pd.DataFrame({"topic": [r.topic for r in left], "partition": [r.partition for r in left],
                                   "offset": [r.offset for r in left], "reason": FILTERED, "event_time": pd.NaT}))
    exp = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else parts[0]
    for c in ident.columns:
        if c not in exp:
            exp[c] = None
    exp["partition"] = pd.to_numeric(exp["partition"]).astype("int64")
    exp["offset"] = pd.to_numeric(exp["offset"]).astype("int64")
    exp["event_time"] = pd.to_datetime(exp["event_time"], utc=True)
    exp["reason"] = exp["reason"].astype(object).where(exp["reason"].notna(), None)
    why = (f"{len(records)} Kafka records; {len(parts[0])} rows and dead letters from one batch, "
           f"{extra} more in {passes} pass(es) over the records "
           f"without one, {len(left)} that build() writes nothing for")
    return exp.sort_values(COORDS).reset_index(drop=True), tables, why


def _coord_tuples(frame: pd.DataFrame) -> list[tuple[str, int, int]]:
    if not len(frame):
        return []
    return list(zip(frame["topic"].astype(str), pd.to_numeric(frame["partition"]).astype("int64").tolist(),
                    pd.to_numeric(frame["offset"]).astype("int64").tolist()))


def _expected_part(spec: Any, tables: dict[str, pd.DataFrame], ident: Any, dead_table: str) -> pd.DataFrame:
    """One batch's identity rows (valid) and dead letters as rows of the expected frame."""
    rows = tables.get(ident.table, pd.DataFrame())
    if len(rows) and not set(COORDS) <= set(rows.columns):
        raise ExpectRefused(f"stream {spec.name}: without expect(), the rows of identity table {ident.table!r} must "
                            f"carry the Kafka coordinates {COORDS} (the proof tells each record's row by them); "
                            "add them in build() or implement expect()")
    valid = rows.drop(columns=["batch_id"], errors="ignore").assign(reason=None)
    if "event_time" not in valid:
        valid["event_time"] = pd.NaT
    dead = tables.get(dead_table, pd.DataFrame(columns=[*COORDS, "reason"]))
    dead = dead[[*COORDS, "reason"]].assign(event_time=pd.NaT) if len(dead) else \
        pd.DataFrame(columns=[*COORDS, "reason", "event_time"])
    frames = [frame for frame in (valid, dead) if len(frame)]
    if not frames:
        return pd.DataFrame(columns=[*COORDS, *ident.columns, "reason", "event_time"])
    return pd.concat(frames, ignore_index=True)


def touched_rows(sink: Any, transform: Transform, exp: pd.DataFrame, span: Span,
                 chunk: int = 5000) -> dict[str, pd.DataFrame]:
    """The identity table's rows of the span's identities or at its coordinates, and its dead letters."""
    import sqlalchemy as sa


    ident = identity_of(transform)
    specs = sink.specs

    at_coords = coordinates_in(span)

    valid = exp[exp["reason"].isna()]
    keys = list(dict.fromkeys(zip(*[valid[c].tolist() for c in ident.columns])))
    parts = []
    for i in range(0, len(keys), chunk):
        some = keys[i:i + chunk]
        parts.append(sink.read_rows(ident.table, where=lambda t, some=some: sa.tuple_(
            *[t.c[c] for c in ident.columns]).in_(some)))
    if set(COORDS) <= set(specs[ident.table].column_names):
        # rows at the span's coordinates whose identity the span's records do not carry (the others
        # were read above): not deduplicated by key, so a copied row stays two rows
        wanted = set(keys)
        at = sink.read_rows(ident.table, where=at_coords)
        if len(at):
            at = at[[k not in wanted for k in zip(*[at[c].tolist() for c in ident.columns])]]
        parts.append(at)
    rows = pd.concat(parts, ignore_index=True) if parts else sink.read_rows(ident.table, where=lambda t: sa.false())
    dead = sink.read_rows(transform.dead_letter_table, where=at_coords)
    return {ident.table: rows.reset_index(drop=True), transform.dead_letter_table: dead}


def report_of(stream: str, frames: ContractFrames) -> ContractReport:
    """The frames' problems as lists of example rows (JSON-ready)."""
    cov, rows = frames.coverage, frames.rows
    problems: dict[str, int] = {}
    examples: dict[str, list[dict[str, Any]]] = {}
    picks = [(f"records_{w.replace('+', '_and_')}", cov[cov["landed_in"] == w])
             for w in ("missing", "dead_letter_missing", "row+dead_letter", "not_behind_watermark")]
    picks += [(f"rows_{w}", rows[rows["row_check"] == w]) for w in ("duplicate_key", "unexpected", "value_mismatch")]
    agg = frames.aggregates
    if agg is not None:
        picks += [(f"aggregates_{w}", agg[agg["aggregate_state"] == w])
                  for w in ("mismatch", "missing", "unexpected", "duplicate")]
    for name, part in picks:
        problems[name] = int(len(part))
        examples[name] = _records(part)
    return ContractReport(stream, frames.counts, frames.range, problems, examples, notes=list(frames.notes))


def verify_contract_stream(spec: Any, bootstrap: str, bounds: dict[tuple[str, int], int] | None = None, *,
                           since: Since | None = None, since_time: datetime | None = None,
                           run_id: str = "verify", committed: Committed | None = None) -> ContractReport:
    """``rewind verify`` for a contract stream.

    ``committed``: what the stream had committed when the proof began (``rewind.proof.scope``; read
    here when not given); ``bounds``: the end offsets to prove below (default: that batch's).
    ``since=None``: every record below them. ``since="cursor"`` / ``"beginning"`` / ``"time"``: a
    bounded proof of the span ``rewind.proof.cursor.resolve_span`` picks; a passed bounded proof moves
    the cursor.
    """

    committed = committed or committed_position(spec)
    if bounds is None:
        bounds = committed.end_offsets
    last_batch, watermark = committed.batch, committed.watermark
    if since is None:
        span = None if bounds is None else {k: (0, v) for k, v in bounds.items()}
        report = report_of(spec.name, contract_frames(spec, bootstrap, span, last_batch=last_batch,
                                                      watermark=watermark, committed_ends=committed.end_offsets))
        origin = stream_origin(spec)
        report.notes.append("proved every record Kafka holds" + (
            f" from the stream's start (its entry gives one; per partition: {origin_text(origin)})" if origin else "")
            + (f" below the end of batch {last_batch}, the last committed when the proof began" if bounds else ""))
        report.notes.extend(n for n in [unknown_origin_note(spec, origin)] if n)
        return report
    span, notes = resolve_span(spec, bootstrap, since=since, since_time=since_time, committed=bounds)
    report = report_of(spec.name, contract_frames(spec, bootstrap, span, last_batch=last_batch, watermark=watermark,
                                                  committed_ends=committed.end_offsets))
    report.notes.extend(notes)
    report.notes.append(f"proved {sum(e - s for s, e in span.values())} offsets since "
                        + {"cursor": "the last passed proof", "beginning": "the beginning",
                           "time": f"{since_time}"}[since])
    if report.ok:
        write_cursor(spec, span, run_id)
    return report


def _records(frame: pd.DataFrame, limit: int = 50) -> list[dict[str, Any]]:
    out = []
    for row in frame.head(limit).to_dict(orient="records"):
        out.append({k: (None if v is None or v is pd.NaT or (isinstance(v, float) and np.isnan(v))
                        else v.isoformat() if isinstance(v, pd.Timestamp)
                        else int(v) if isinstance(v, np.integer) else v) for k, v in row.items()})
    return out


def rows_past_end(sink: Any, transform: Transform, exp: pd.DataFrame, span: Span,
                  last_batch: int | None) -> dict[str, pd.DataFrame]:
    """The identity and dead-letter tables' rows that a committed batch (``batch_id`` <= ``last_batch``)
    wrote at coordinates at or past the span's end in the span's partitions, but for rows
    of the records' identities (``touched_rows`` read those). No record the stream had read makes them,
    and ``touched_rows`` reads only the span's coordinates: without this a row from nowhere written
    there would never be judged (``contract_frames.written_past_end``)."""
    import sqlalchemy as sa


    if last_batch is None:
        return {}
    ident = identity_of(transform)

    past = coordinates_in({k: (end, PAST_ANY_OFFSET) for k, (_, end) in span.items()})  # the span's partitions only
    valid = exp[exp["reason"].isna()]
    wanted = set(zip(*[valid[c].tolist() for c in ident.columns]))
    out: dict[str, pd.DataFrame] = {}
    for name in (ident.table, transform.dead_letter_table):
        if not {*COORDS, "batch_id"} <= set(sink.specs[name].column_names):
            continue
        rows = sink.read_rows(name, where=lambda t: sa.and_(t.c.batch_id <= last_batch, past(t)))
        if name == ident.table and len(rows):
            rows = rows[[k not in wanted for k in zip(*[rows[c].tolist() for c in ident.columns])]]
        out[name] = rows.reset_index(drop=True)
    return out
