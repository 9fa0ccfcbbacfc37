"""The demo transform's parser (``parse_batches``, an Arrow function run by ``mapInArrow``): pure pyarrow,
no Spark. Every row must carry exactly the verdict of the reference ``classify``."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
from harness.event_corpus import corpus

from rewind.demo.events import classify
from rewind.demo.transform import PARSED_SCHEMA, parse_batches

US = pa.timestamp("us", tz="UTC")


def _kafka_batch(values: list[bytes | None], stamps_ms: list[int | None], first: int = 0) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array(values, pa.binary()), pa.array(["t"] * n), pa.array([i % 3 for i in range(n)], pa.int32()),
         pa.array(range(first, first + n), pa.int64()), pa.array(stamps_ms, pa.timestamp("ms", tz="UTC")).cast(US)],
        names=["value", "topic", "partition", "offset", "timestamp"])


def test_parse_batches_matches_classify_row_by_row() -> None:
    values, stamps = corpus()
    half = len(values) // 2
    batches = [_kafka_batch(values[:half], stamps[:half]), _kafka_batch(values[half:], stamps[half:], half)]
    out = list(parse_batches(iter(batches), 20.0))
    assert [b.schema for b in out] == [PARSED_SCHEMA] * 2 and sum(b.num_rows for b in out) == len(values)
    rows = [r for b in out for r in b.to_pylist()]
    mismatches = []
    for i, (value, ms, row) in enumerate(zip(values, stamps, rows)):
        ref = classify(value, ms, timedelta(seconds=20))
        assert (row["topic"], row["offset"]) == ("t", i)
        if ref.event is None:
            want = {"status": "dead", "reason": ref.reason, "event_id": None, "event_time": None,
                    "raw_value": None if value is None else value.decode("utf-8", "backslashreplace")}
        else:
            ev = ref.event
            want = {"status": "ok", "reason": None, "event_id": ev.event_id, "key": ev.key,
                    "event_time": ev.event_time, "raw_value": None}
            if ev.amount == ev.amount:  # NaN amounts compare unequal to themselves
                want["amount"] = ev.amount
        got = {k: row[k] for k in want}
        if got != want:
            mismatches.append((i, value, want, got))
    assert not mismatches, mismatches[:3]
    statuses = {r["status"] for r in rows}
    assert statuses == {"ok", "dead"}


def test_parse_batches_empty_and_all_valid() -> None:
    assert [b.num_rows for b in parse_batches(iter([_kafka_batch([], [])]), 20.0)] == [0]
    values, stamps = corpus()
    ok = [(v, ms) for v, ms in zip(values, stamps)
          if classify(v, ms, timedelta(seconds=20)).event is not None][:50]
    out = next(parse_batches(iter([_kafka_batch([v for v, _ in ok], [m for _, m in ok])]), 20.0))
    assert out.column("status").to_pylist() == ["ok"] * len(ok) and out.column("raw_value").null_count == len(ok)
