"""A sink writer in a process of its own: ``python sink_child.py KIND TARGET BATCH [--staged]``.

The commit-point suite (``tests/test_sink_commit_points.py``) starts it with a fault point armed
(``REWIND_FAULTS``), so it dies at that point of the batch for real, then starts it again unarmed, as
Spark re-runs the batch after a crash. The batch's rows are a function of its id only, so both runs
hand the sink the same batch, as a deterministic transform does. It prints the ``BatchResult`` as JSON.

Kinds: ``sql`` (TARGET a SQLAlchemy URL; ``--staged``: the executors' path, rows staged, then the
driver's commit), ``kafka`` (TARGET ``BOOTSTRAP/PREFIX``), ``delta`` (TARGET a directory).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from harness.sink_data import STATE, TABLES, dead_letters, events, windows  # noqa: E402

STREAM = "orders"
SPECS = (*TABLES, STATE)  # insert-once, replace and latest tables
ROWS_PER_BATCH = 300


def batch_rows(batch_id: int) -> dict[str, Any]:
    """Batch N's rows: 300 events, 2 dead letters, the window totals of users a and b so far, and sku s1's
    state at version N."""
    start = batch_id * ROWS_PER_BATCH
    return {"events": events(start, ROWS_PER_BATCH, batch_id=batch_id),
            "dead_letter": dead_letters(100_000 + batch_id * 2, 2),
            "window_results": windows(["a", "b"], (batch_id + 1) * 10),
            "stock": [{"sku": "s1", "qty": 100 + batch_id, "version": batch_id, "batch_id": batch_id}]}


def source_offsets(batch_id: int) -> str:
    return json.dumps({"orders": {"0": (batch_id + 1) * ROWS_PER_BATCH}})


def open_sink(kind: str, target: str) -> Any:
    if kind == "sql":
        from rewind.sink.sql import ExactlyOnceSqlSink

        return ExactlyOnceSqlSink(target, STREAM, SPECS)
    if kind == "kafka":
        from rewind.sink.kafka import TransactionalKafkaSink
        from rewind.sink.kafka_target import KafkaSinkTarget

        bootstrap, prefix = target.split("/", 1)
        return TransactionalKafkaSink(KafkaSinkTarget(bootstrap, prefix), STREAM, SPECS,
                                      dead_letter_table="dead_letter")
    if kind == "delta":
        from rewind.sink.delta import DeltaSink
        from rewind.sink.delta_target import DeltaSinkTarget

        return DeltaSink(DeltaSinkTarget(target), STREAM, SPECS)
    raise SystemExit(f"unknown sink kind {kind!r}")


def write(kind: str, target: str, batch_id: int, staged: bool) -> dict[str, Any]:
    rows = batch_rows(batch_id)
    sink = open_sink(kind, target)
    try:
        if staged:
            from rewind.sink.staging import SqlStaging

            staging = SqlStaging(sink)
            staging.create()
            staging.clear()
            attempt = f"{batch_id}-child"
            counts, done = {}, {}
            for name, table in rows.items():
                counts[name], done[name] = staging.stage(name, table, attempt, 0)
            result = staging.commit(batch_id, attempt, counts, done, source_offsets(batch_id))
        else:
            result = sink.write_batch(batch_id, rows, source_offsets(batch_id))
    finally:
        sink.dispose()
    return {"batch_id": result.batch_id, "skipped": result.skipped, "replanned": result.replanned, "rows": result.rows}


if __name__ == "__main__":
    kind, target, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(json.dumps(write(kind, target, batch, "--staged" in sys.argv[4:])))
