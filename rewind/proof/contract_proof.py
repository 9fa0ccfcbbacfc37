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
from typing import Any

import numpy as np
import pandas as pd

from rewind.errors import Refused
from rewind.proof.checks import COORDS
from rewind.proof.contract_frames import EXPECT_COLUMNS, ContractFrames, build_contract_frames
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

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())

    def summary(self, examples: int = EXAMPLES) -> dict[str, Any]:
        return {"stream": self.stream, "suite": "contract", "ok": self.ok, "range": self.range, **self.counts,
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


def contract_frames(spec: Any, bootstrap: str, bounds: dict[tuple[str, int], tuple[int, int]] | None = None,
                    transform: Transform | None = None) -> ContractFrames:
    """Read Kafka (all of it) and the sink, judge the records in ``bounds`` (``[start, end)`` per partition)."""
    from rewind.stream.runner import open_sink

    transform = transform or load_transform(spec)
    records = read_records(bootstrap, spec.topics, source_options=spec.source.options)
    sink = open_sink(spec)
    try:
        names = [t.name for t in transform.tables]
        tables = {name: sink.read_table(name) for name in names}
    finally:
        sink.dispose()
    frame = records_frame(records)
    exp = expected_frame(transform, frame, spec)
    judged = None
    if bounds is not None:
        lo = np.array([bounds.get((t, int(p)), (0, 0))[0] for t, p in zip(frame["topic"], frame["partition"])])
        hi = np.array([bounds.get((t, int(p)), (0, 0))[1] for t, p in zip(frame["topic"], frame["partition"])])
        off = frame["offset"].to_numpy()
        judged = (off >= lo) & (off < hi)
    from rewind.stream.late_routing import BEHIND_WATERMARK

    return build_contract_frames(exp, tables, identity=transform.identity,
                                 keys={t.name: t.key for t in transform.tables},
                                 dead_letter_table=transform.dead_letter_table, judged=judged,
                                 late_reason=BEHIND_WATERMARK)


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


def verify_contract_stream(spec: Any, bootstrap: str,
                           bounds: dict[tuple[str, int], int] | None = None) -> ContractReport:
    """``rewind verify`` for a contract stream; ``bounds``: judge offsets below them (a running stream)."""
    span = None if bounds is None else {k: (0, v) for k, v in bounds.items()}
    return report_of(spec.name, contract_frames(spec, bootstrap, span))


def _records(frame: pd.DataFrame, limit: int = 50) -> list[dict[str, Any]]:
    out = []
    for row in frame.head(limit).to_dict(orient="records"):
        out.append({k: (None if v is None or v is pd.NaT or (isinstance(v, float) and np.isnan(v))
                        else v.isoformat() if isinstance(v, pd.Timestamp)
                        else int(v) if isinstance(v, np.integer) else v) for k, v in row.items()})
    return out
