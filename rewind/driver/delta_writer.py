"""The foreachBatch function of a Delta sink with ``write_from: executors``: the executors write the
files, the driver commits each table, then the ledger row.

Why: collected to the driver, a batch must fit the driver's memory and one process writes it.
Here every Spark task runs the transform's ``split`` on its own rows and returns them tagged
with their table (``split_partition``); the result is kept in memory (``persist``) so the split
runs once, and each table is merged into its Delta table by delta-spark: the executors write the
Parquet files, the driver writes the commit, tagged with Delta's ``txnAppId``/``txnVersion`` =
(``rewind.<stream>``, batch id). The ledger row (``DeltaSink.commit_ledger``) is written last.

A key repeated across tasks of one batch is settled as the SQL sink settles it: ``row_number``
over the key ordered by the row's place in the batch (``__seq``, partition id << 40 + position)
keeps the first row ("ignore"), the last ("replace") or the highest version ("latest").
Late routing is the driver path's: the same filter before the job, ``mark_behind`` in each task;
each task's count of rows routed travels as one row of table "".
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rewind.api.contract import load_transform
from rewind.api.tables import TableSpec
from rewind.driver.batch_writer import BatchWriter, arrow_to_pandas
from rewind.driver.late_routing import mark_behind
from rewind.faults import fault_point
from rewind.runtime.jars import require_delta_jars
from rewind.sink.convert import prepare_table
from rewind.sink.delta_tables import arrow_schema, arrow_table, merge_clauses
from rewind.sink.errors import SinkRefused
from rewind.sink.unwritable import route_unwritable

log = logging.getLogger(__name__)

__all__ = ["DeltaBatchWriter", "SplitTask", "split_partition", "split_schema"]

SEQ_BITS = 40
#: A MERGE reads the whole table, so a replay's commit to it in between fails it (ConcurrentAppend):
#: merged again, against the new version, as Delta's docs advise.
MERGE_ATTEMPTS = 5
_SPARK_TYPES = {"string": "string", "int": "int", "bigint": "bigint", "double": "double", "timestamp": "timestamp",
                "binary": "binary"}


def _col(index: int, name: str) -> str:
    return f"t{index}__{name}"


def split_schema(specs: list[TableSpec]) -> str:
    """The tasks' output: table name, place in the batch, then every table's columns (t<i>__<column>)."""
    cols = [f"`{_col(i, c.name)}` {_SPARK_TYPES.get(c.type, c.type)}"  # decimal(P,S) is Spark's own name too
            for i, s in enumerate(specs) for c in s.columns]
    return ", ".join(["`__table` string", "`__seq` bigint", *cols])


@dataclass(frozen=True)
class SplitTask:
    spec: Any  # the stream's registry entry
    batch_id: int
    watermark_ms: int | None


def split_partition(task: SplitTask, batches: Iterator[Any]) -> Iterator[Any]:
    """One Spark task: its rows split into the stream's tables, validated like any sink write."""
    import pyarrow as pa
    from pyspark import TaskContext


    ctx = TaskContext.get()
    seq = (ctx.partitionId() if ctx is not None else 0) << SEQ_BITS
    transform = load_transform(task.spec)
    specs: list[TableSpec] = list(transform.tables)
    index = {s.name: i for i, s in enumerate(specs)}
    fields = [pa.field("__table", pa.string()), pa.field("__seq", pa.int64())]
    for i, s in enumerate(specs):
        fields.extend(pa.field(_col(i, f.name), f.type) for f in arrow_schema(s))
    schema = pa.schema(fields)
    routed = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        frame = arrow_to_pandas(pa.Table.from_batches([batch]))
        routed += mark_behind(frame, task.watermark_ms)
        for name, table in _prepared(transform, specs, transform.split(frame, task.batch_id), task.batch_id):
            n = table.num_rows
            if n == 0:
                continue
            columns = {"__table": pa.array([name] * n, pa.string()),
                       "__seq": pa.array(range(seq, seq + n), pa.int64())}
            columns.update({_col(index[name], c): table.column(c).combine_chunks() for c in table.column_names})
            seq += n
            yield pa.RecordBatch.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in schema],
                                             schema=schema)
    yield pa.RecordBatch.from_arrays([pa.array([""]), pa.array([routed], pa.int64()),
                                      *[pa.nulls(1, f.type) for f in schema][2:]], schema=schema)


def _prepared(transform: Any, specs: list[TableSpec], tables: dict[str, Any], batch_id: int) -> list[tuple[str, Any]]:
    """Each table's rows as Arrow, checked like any sink write; rows whose values a column cannot
    take become dead letters (``rewind.sink.unwritable``) when they carry Kafka coordinates."""

    by_name = {s.name: s for s in specs}
    try:
        return [(n, arrow_table(prepare_table(by_name[n], p, sqlite_text=False))) for n, p in tables.items()]
    except SinkRefused:
        routed = route_unwritable(by_name, tables, transform.dead_letter_table, batch_id)
        if routed is None:
            raise
        log.warning("batch %d: rows the sink cannot take written as dead letters", batch_id)
        return [(n, arrow_table(prepare_table(by_name[n], p, sqlite_text=False))) for n, p in routed.items()]


@dataclass
class DeltaBatchWriter(BatchWriter):
    """``BatchWriter`` for a ``DeltaSink`` with ``write_from: executors``; ``spec`` is the registry entry."""

    spec: Any = None

    def __post_init__(self) -> None:

        require_delta_jars()  # else the first batch fails inside Spark with a class not found

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        df, watermark = self.late_filtered(df, batch_id)
        specs: list[TableSpec] = list(self.sink.specs.values())
        task = SplitTask(self.spec, batch_id, watermark)
        split = df.mapInArrow(functools.partial(split_partition, task), split_schema(specs))
        split = split.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = {r["__table"]: (r["n"], r["s"]) for r in
                      split.groupBy("__table").agg(F.count("*").alias("n"), F.sum("__seq").alias("s")).collect()}
            routed = int(counts.pop("", (0, 0))[1] or 0)
            self.late[batch_id] = (routed, watermark or 0)
            rows = {s.name: int(counts.get(s.name, (0, 0))[0]) for s in specs}
            offsets = self.source_offsets(batch_id)
            prior = self.sink.committed().get(batch_id)
            if prior is not None and (prior.source_offsets is None or offsets is None
                                      or prior.source_offsets == offsets):
                log.info("batch %d skipped (already committed)", batch_id)
                return
            t1 = time.perf_counter()
            self.check_lease(batch_id)
            fault_point("sink.before_write", batch=batch_id)
            for i, spec in enumerate(specs):
                if rows[spec.name]:
                    self._merge(split, i, spec, batch_id)
            self.sink.commit_ledger(batch_id, rows, offsets)
            self.counted(batch_id, rows)
        finally:
            split.unpersist()
        if self.phases is not None:
            self.phases.append({"batch_id": batch_id, "rows": sum(rows.values()), "split_s": t1 - t0,
                                "merge_s": time.perf_counter() - t1})
        log.info("batch %d %s rows=%s (written by the executors) in %.2fs", batch_id,
                 "re-planned, rewritten" if prior is not None else "committed", rows, time.perf_counter() - t0)

    def _merge(self, split: Any, index: int, spec: TableSpec, batch_id: int) -> None:
        """One table's rows of the batch, one per key, merged under its conflict rule by delta-spark."""
        from delta.tables import DeltaTable
        from pyspark.sql import Window
        from pyspark.sql import functions as F


        part = split.where(F.col("__table") == spec.name)
        order = {"ignore": [F.col("__seq").asc()], "replace": [F.col("__seq").desc()],
                 "latest": [F.col(_col(index, spec.version or "")).desc(), F.col("__seq").asc()]}[spec.on_conflict]
        window = Window.partitionBy(*[F.col(_col(index, k)) for k in spec.key]).orderBy(*order)
        one = part.withColumn("__rank", F.row_number().over(window)).where(F.col("__rank") == 1)
        source = one.select(*[F.col(_col(index, c.name)).alias(c.name) for c in spec.columns])
        spark = split.sparkSession
        path = self.sink.path(spec.name)
        on, update_if, update = merge_clauses(spec)
        tag = self.sink.tags(self.sink.ensure_table(spec.name), batch_id)
        if tag:
            spark.conf.set("spark.databricks.delta.write.txnAppId", self.sink.app_id)
            spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            for attempt in range(1, MERGE_ATTEMPTS + 1):
                merger = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), on)
                if update:
                    merger = merger.whenMatchedUpdateAll(condition=update_if)
                try:
                    merger.whenNotMatchedInsertAll().execute()
                    break
                except Exception as exc:  # delta-spark's conflicts reach Python as a captured JVM exception
                    if "concurrent" not in str(exc).lower() or attempt == MERGE_ATTEMPTS:
                        raise
                    log.warning("batch %d, table %s: a concurrent writer (a replay?) committed first; merging "
                                "again (%d/%d)", batch_id, spec.name, attempt, MERGE_ATTEMPTS)
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")

