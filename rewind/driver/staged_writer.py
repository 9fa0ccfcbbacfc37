"""The foreachBatch function that never collects a batch: executors stage its rows, the driver commits.

Why: ``BatchWriter`` collects every micro-batch to the driver (``toArrow()``) and writes it from
there, so the driver's memory grows with the batch and one process writes for the whole cluster.
With ``sink.write_from: executors`` (SQL sinks), each Spark task runs the transform's ``split``
on its own rows and stages them (``rewind.sink.staging``: prepare), and the driver, which only
receives per-table row counts, commits staging -> tables and the ledger in one transaction.

What Spark runs: ``df.mapInArrow(stage_partition)`` then ``collect()`` of one small row per table
per task. Late routing is the same as the driver path's: the rows behind the batch's watermark
are kept by the same filter before the job, and ``mark_behind`` runs in each task.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rewind.api.contract import load_transform
from rewind.driver.batch_writer import BatchWriter, arrow_to_pandas
from rewind.driver.late_routing import mark_behind
from rewind.driver.sink_factory import open_sink
from rewind.sink.errors import SinkRefused
from rewind.sink.staging import SqlStaging
from rewind.sink.unwritable import route_unwritable

log = logging.getLogger(__name__)

__all__ = ["StageTask", "StagedBatchWriter", "stage_partition"]

#: The tasks' answer: per table, the rows handed in and the rows staged; "" carries the late count.
RESULT_SCHEMA = "table string, rows long, staged long"
SEQ_BITS = 40  # a task's rows are numbered from partition_id << SEQ_BITS: the batch's order, across tasks


@dataclass(frozen=True)
class StageTask:
    """What every task of one attempt needs (pickled to the executors)."""

    spec: Any  # the stream's registry entry
    batch_id: int
    attempt: str
    watermark_ms: int | None


def stage_partition(task: StageTask, batches: Iterator[Any]) -> Iterator[Any]:
    """One Spark task: split its rows into the stream's tables and stage them; yield the counts."""
    import pyarrow as pa
    from pyspark import TaskContext


    ctx = TaskContext.get()
    seq = (ctx.partitionId() if ctx is not None else 0) << SEQ_BITS
    transform = load_transform(task.spec)
    sink = open_sink(task.spec, transform)
    staging = SqlStaging(sink)
    rows: dict[str, int] = defaultdict(int)
    staged: dict[str, int] = defaultdict(int)
    routed = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            frame = arrow_to_pandas(pa.Table.from_batches([batch]))
            routed += mark_behind(frame, task.watermark_ms)
            tables = transform.split(frame, task.batch_id)
            for name, part in tables.items():
                for n, (handed, kept) in _stage(staging, transform, name, part, task, seq):
                    rows[n] += handed
                    staged[n] += kept
            seq += max([batch.num_rows, *(len(p) for p in tables.values())])
    finally:
        sink.dispose()
    out = [{"table": n, "rows": rows[n], "staged": staged[n]} for n in rows]
    out.append({"table": "", "rows": routed, "staged": 0})
    yield pa.RecordBatch.from_pylist(out, schema=pa.schema([("table", pa.string()), ("rows", pa.int64()),
                                                            ("staged", pa.int64())]))


def _stage(staging: Any, transform: Any, name: str, part: Any, task: StageTask, seq: int) -> list[tuple[str, Any]]:
    """Stage one table's rows; rows whose values a column cannot take are staged as dead letters
    instead when they carry Kafka coordinates (``rewind.sink.unwritable``), else the task fails."""

    try:
        return [(name, staging.stage(name, part, task.attempt, seq))]
    except SinkRefused:  # prepare_table refused before anything of this table was staged
        routed = route_unwritable(staging.sink.specs, {name: part}, transform.dead_letter_table, task.batch_id)
        if routed is None:
            raise
        log.warning("batch %d, table %s: rows the sink cannot take staged as dead letters", task.batch_id, name)
        return [(n, staging.stage(n, p, task.attempt, seq)) for n, p in routed.items()]


@dataclass
class StagedBatchWriter(BatchWriter):
    """``BatchWriter`` for ``write_from: executors``: ``sink`` is an ``ExactlyOnceSqlSink``, ``spec``
    the stream's registry entry."""

    spec: Any = None

    def __post_init__(self) -> None:

        self.staging = SqlStaging(self.sink)
        self.staging.create()
        self.staging.clear()

    def __call__(self, df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        df, watermark = self.late_filtered(df, batch_id)
        task = StageTask(self.spec, batch_id, f"{batch_id}-{uuid.uuid4().hex[:12]}", watermark)
        answers = df.mapInArrow(functools.partial(stage_partition, task), RESULT_SCHEMA).collect()
        t1 = time.perf_counter()
        rows: dict[str, int] = defaultdict(int)
        staged: dict[str, int] = defaultdict(int)
        routed = 0
        for a in answers:
            if a["table"] == "":
                routed += a["rows"]
            else:
                rows[a["table"]] += a["rows"]
                staged[a["table"]] += a["staged"]
        self.late[batch_id] = (routed, watermark or 0)
        self.check_lease(batch_id)
        result = self.staging.commit(batch_id, task.attempt, dict(rows), dict(staged), self.source_offsets(batch_id))
        self.counted(batch_id, result.rows)
        if self.phases is not None:
            self.phases.append({"batch_id": batch_id, "rows": sum(rows.values()), "stage_s": t1 - t0,
                                "commit_s": time.perf_counter() - t1})
        log.info("batch %d %s rows=%s (staged by the executors) in %.2fs", batch_id,
                 "skipped (already committed)" if result.skipped else "re-planned, rewritten" if result.replanned
                 else "committed", result.rows, time.perf_counter() - t0)
