"""The contract-derived proof of one stream (``dq_suite: contract``): the I/O around ``contract_frames``.

Kafka is re-read with a plain consumer (not the Spark source under test), the transform's own
``expect()`` says what each record becomes, and ``rewind.proof.contract_frames`` holds the
sink's tables to it. ``verify_contract_stream`` is ``rewind verify`` for such a stream (a report
with ``ok`` and ``summary()``); the DQ proof (``rewind.proof.dq.run_proof``) validates the same
frames with Great Expectations (``rewind.proof.checks.CONTRACT_CHECKS``).

Range: while the stream runs, the records below its last committed batch's end offsets are
judged; every record Kafka holds is read as context (a ``latest`` row may already hold a version
from a later batch). What is not done yet: a bounded read from a cursor (issue 15, item 3); this
proof reads each topic from its beginning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rewind.errors import Refused
from rewind.proof.checks import COORDS
from rewind.proof.contract_frames import EXPECT_COLUMNS, ContractFrames, build_contract_frames
from rewind.proof.cursor import Since, Span, resolve_span, write_cursor
from rewind.proof.verify import KafkaRecord, read_records
from rewind.stream.contract import RECORD_COLUMNS, Transform, load_transform

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


def records_frame(records: list[KafkaRecord]) -> pd.DataFrame:
    """Kafka records as the frame ``Transform.expect`` receives (``RECORD_COLUMNS``)."""
    frame = pd.DataFrame({
        "topic": pd.Series([r.topic for r in records], dtype=object),
        "partition": pd.Series([r.partition for r in records], dtype="int64"),
        "offset": pd.Series([r.offset for r in records], dtype="int64"),
        "timestamp": pd.Series([r.timestamp_ms for r in records], dtype="Int64"),
        "key": pd.Series([r.key for r in records], dtype=object),
        "value": pd.Series([r.value for r in records], dtype=object)})
    return frame[list(RECORD_COLUMNS)]


def expected_frame(transform: Transform, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
    """``expect()`` checked and joined to the records' coordinates; refused naming what it lacks."""
    out = transform.expect(records, spec)
    where = f"stream {spec.name}: {type(transform).__name__}.expect()"
    if not isinstance(out, pd.DataFrame) or len(out) != len(records):
        got = f"{len(out)} rows" if isinstance(out, pd.DataFrame) else type(out).__name__
        raise ExpectRefused(f"{where} must return a pandas DataFrame with one row per record ({len(records)}), "
                            f"got {got}")
    ident = transform.identity
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


def contract_frames(spec: Any, bootstrap: str, span: Span | None = None,
                    transform: Transform | None = None) -> ContractFrames:
    """The two frames of ``span`` (``[start, end)`` per partition; None: every record Kafka holds).

    With a span, only its records are read, and only the sink rows they touch: rows of their
    identities (to find each record's row) and rows and dead letters at coordinates in the span
    (judged). Memory follows the span, not the topic's history.
    """
    from rewind.stream.late_routing import BEHIND_WATERMARK
    from rewind.stream.runner import open_sink

    transform = transform or load_transform(spec)
    ident = transform.identity
    if span is None:
        records = read_records(bootstrap, spec.topics, source_options=spec.source.options)
    else:
        records = read_records(bootstrap, spec.topics, source_options=spec.source.options,
                               upper={k: e for k, (_, e) in span.items()}, lower={k: s for k, (s, _) in span.items()})
    exp = expected_frame(transform, records_frame(records), spec)
    del records
    sink = open_sink(spec)
    try:
        if span is None:
            tables = {t.name: sink.read_table(t.name) for t in transform.tables}
        else:
            tables = touched_rows(sink, transform, exp, span)
    finally:
        sink.dispose()
    return build_contract_frames(exp, tables, identity=ident, keys={t.name: t.key for t in transform.tables},
                                 dead_letter_table=transform.dead_letter_table, late_reason=BEHIND_WATERMARK,
                                 row_scope=span)


def touched_rows(sink: Any, transform: Transform, exp: pd.DataFrame, span: Span,
                 chunk: int = 5000) -> dict[str, pd.DataFrame]:
    """The identity table's rows of the span's identities or at its coordinates, and its dead letters."""
    import sqlalchemy as sa

    from rewind.sink.dialects import coordinates_in

    ident = transform.identity
    specs = {t.name: t for t in transform.tables}

    at_coords = coordinates_in(span)

    valid = exp[exp["reason"].isna()]
    keys = list(dict.fromkeys(zip(*[valid[c].tolist() for c in ident.columns])))
    parts = []
    for i in range(0, len(keys), chunk):
        some = keys[i:i + chunk]
        parts.append(sink.read_rows(ident.table, where=lambda t, some=some: sa.tuple_(
            *[t.c[c] for c in ident.columns]).in_(some)))
    if set(COORDS) <= set(specs[ident.table].column_names):
        parts.append(sink.read_rows(ident.table, where=at_coords))
    rows = pd.concat(parts, ignore_index=True) if parts else sink.read_rows(ident.table, where=lambda t: sa.false())
    rows = rows.drop_duplicates(list(specs[ident.table].key), keep="first") if len(rows) else rows
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
    for name, part in picks:
        problems[name] = int(len(part))
        examples[name] = _records(part)
    return ContractReport(stream, frames.counts, frames.range, problems, examples)


def verify_contract_stream(spec: Any, bootstrap: str, bounds: dict[tuple[str, int], int] | None = None, *,
                           since: Since | None = None, since_time: datetime | None = None,
                           run_id: str = "verify") -> ContractReport:
    """``rewind verify`` for a contract stream.

    ``since=None``: every record (below ``bounds``, the committed end of a running stream, when
    given). ``since="cursor"`` / ``"beginning"`` / ``"time"``: a bounded proof of the span
    ``rewind.proof.cursor.resolve_span`` picks; a passed bounded proof moves the cursor.
    """
    if since is None:
        span = None if bounds is None else {k: (0, v) for k, v in bounds.items()}
        report = report_of(spec.name, contract_frames(spec, bootstrap, span))
        report.notes.append("proved every record Kafka holds" + (" below the last committed batch" if bounds else ""))
        return report
    span, notes = resolve_span(spec, bootstrap, since=since, since_time=since_time, committed=bounds)
    report = report_of(spec.name, contract_frames(spec, bootstrap, span))
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
