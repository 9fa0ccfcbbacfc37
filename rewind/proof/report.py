"""The proof's outcome: what it judged, what failed with example rows, where the results are.

Why apart from the run: the Airflow task, ``rewind dq``, a replay and the chaos harness all hold a
``ProofResult`` and log ``format_proof``; none of them needs Great Expectations or Kafka for that.
``ProofFailed`` is a ``rewind.errors.ProofViolation`` (exit code, no retry) and still an
``AssertionError``, which task code written before the error hierarchy catches.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rewind.errors import ProofViolation
from rewind.proof.verdict import classes_text


@dataclass
class FailedExpectation:
    name: str
    frame: str
    expectation: str
    proves: str
    unexpected_count: int | None
    element_count: int | None
    examples: list[dict[str, Any]]
    observed_value: Any = None


@dataclass
class ProofResult:
    stream: str
    run_id: str
    ok: bool
    range: dict[str, dict[str, list[int]]]
    counts: dict[str, Any]
    expectations: int
    failures: list[FailedExpectation]
    local: dict[str, str]
    s3: dict[str, str] = field(default_factory=dict)
    s3_error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Why there was nothing to prove (no committed batch yet: ``rewind.proof.scope``); the proof then
    #: passes with no expectation run, and says so instead of PASS.
    nothing_to_prove: str | None = None

    def to_json(self) -> dict[str, Any]:
        return jsonable(asdict(self))

    def raise_if_failed(self) -> None:
        """For task code: raise ProofFailed (its message is ``format_proof``) unless the proof passed."""
        if not self.ok:
            raise ProofFailed(self)


class ProofFailed(ProofViolation, AssertionError):
    """The data does not prove exactly-once; the message has the counts, failures and links."""

    def __init__(self, result: ProofResult) -> None:
        super().__init__(format_proof(result))
        self.result = result


def jsonable(value: Any) -> Any:
    """``value`` with pandas and numpy scalars as JSON types (NaN, NA and NaT as None, times as ISO 8601)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (pd.Timestamp, datetime)):
        return value.isoformat()
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _fmt_range(rng: dict[str, dict[str, list[int]]]) -> str:
    parts = []
    for topic, parts_of in sorted(rng.items()):
        spans = " ".join(f"{p}:[{lo},{hi})" for p, (lo, hi) in sorted(parts_of.items(), key=lambda kv: int(kv[0])))
        parts.append(f"{topic} {spans}")
    return "; ".join(parts) or "(no records)"


def format_proof(result: ProofResult) -> str:
    """The task-log text: verdict, range, counts, each failure with example rows, and the links."""
    if result.nothing_to_prove:
        return f"DQ proof {result.stream} run {result.run_id}: NOTHING TO PROVE: {result.nothing_to_prove}"
    c = result.counts
    verdict = ("PASS: every Kafka data record in the range is in the sink exactly once, and the windows reconcile"
               if result.ok else f"FAIL: {len(result.failures)} of {result.expectations} expectations failed")
    classes = classes_text(c)
    counts = (f"counts: {c.get('records_in_range'):,} Kafka records in the range = {classes}; sink rows "
              f"{c.get('sink_rows')}, dead letters {c.get('sink_dead_letters')}" if classes else
              f"counts: records in range {c.get('records_in_range')}, events {c.get('sink_events')} "
              f"(distinct ids in Kafka {c.get('distinct_events')}), dead letters {c.get('sink_dead_letters')} "
              f"(expected {c.get('expected_dead_letters')}), duplicate sends collapsed {c.get('duplicate_sends')}, "
              f"duplicate rows {c.get('duplicate_event_rows', 0) + c.get('duplicate_coordinate_rows', 0)}, "
              f"missing {c.get('missing')}, misplaced {c.get('misplaced')}, unexpected sink rows "
              f"{c.get('unexpected_sink_rows')}")
    lines = [f"DQ proof {result.stream} run {result.run_id}: {verdict}",
             f"range: {_fmt_range(result.range)}",
             counts,
             f"aggregates: {c.get('aggregates_checked', 0)} groups checked by value, "
             f"{c.get('aggregates_mismatch', 0)} mismatched, {c.get('aggregates_missing', 0)} missing, "
             f"{c.get('aggregates_duplicate', 0)} duplicated, {c.get('aggregates_unexpected', 0)} unexpected, "
             f"{c.get('aggregates_pending', 0)} pending (closed up to "
             f"{c.get('window_horizon', c.get('aggregates_closed_until'))})",
             f"expectations: {result.expectations} run, {len(result.failures)} failed"]
    for f in result.failures:
        if f.unexpected_count is not None:
            n = f"{f.unexpected_count} of {f.element_count} rows"
        else:
            n = "error" if f.observed_value is None else f"observed {f.observed_value}"
        lines.append(f"  FAILED {f.name} [{f.frame}] {n}: {f.proves}")
        for ex in f.examples:
            lines.append(f"    e.g. {json.dumps(ex, default=str)}")
    for note in result.notes:
        lines.append(f"note: {note}")
    lines.append(f"validation result: {result.local.get('result')}"
                 + (f"  ({result.s3['result']})" if result.s3 else ""))
    lines.append(f"data docs: file://{result.local.get('data_docs')}"
                 + (f"  ({result.s3['data_docs']})" if result.s3 else ""))
    if result.s3_error:
        lines.append(f"WARNING: results were not stored in S3: {result.s3_error}")
    return "\n".join(lines)
