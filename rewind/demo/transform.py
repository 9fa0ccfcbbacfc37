"""The demo stream's transform: parse, route bad records, deduplicate, window.

One streaming query, one output: dead letters (stateless), deduplicated events
(``dropDuplicatesWithinWatermark`` on RocksDB state), closed tumbling-window results
(append mode) and the late candidates (every valid row, of which the batch writer keeps the
ones behind the watermark: ``rewind.driver.late_routing``) are unioned into rows tagged by
``kind``, so a single ``foreachBatch`` call commits them all in one sink transaction.

Each Kafka record is read and parsed once: the parsed rows go through one shuffle that all
three branches share (Spark's ReuseExchange), see ``_shared_by_every_branch``. Without it Spark
plans one source scan and one parse per branch, three per record.

The same ``build`` serves a replay's bounded batch read (``rewind.replay.run``): there the
watermark is ignored, duplicates are dropped over the batch, and window rows are partial
aggregates of the batch; ``aggregates`` declares the window table, so the replay recomputes each
window it touches from all of its records (``rewind.replay.aggregates``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from rewind.api import LATE_CANDIDATE, Aggregate, Identity, Transform
from rewind.demo.events import classify_many
from rewind.demo.tables import KINDS, TABLES

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd
    from pyspark.sql import DataFrame

    from rewind.api import TableSpec
    from rewind.registry import StreamSpec

TS = pa.timestamp("us", tz="UTC")
PARSED_SCHEMA = pa.schema([
    ("status", pa.string()), ("event_id", pa.string()), ("key", pa.string()), ("amount", pa.float64()),
    ("event_time", TS), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("kafka_timestamp", TS), ("reason", pa.string()), ("raw_value", pa.string()),
])
OUTPUT_COLUMNS = [
    ("kind", "string"), ("event_id", "string"), ("key", "string"), ("amount", "double"),
    ("event_time", "timestamp"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
    ("kafka_timestamp", "timestamp"), ("reason", "string"), ("raw_value", "string"),
    ("window_start", "timestamp"), ("window_end", "timestamp"), ("event_count", "bigint"), ("amount_sum", "double"),
]


def _millis(stamps: pa.Array | pa.ChunkedArray) -> list[int | None]:
    """Kafka timestamps as whole milliseconds (what the verifier passes ``classify``), nulls as None."""
    micros = stamps.cast(TS).cast(pa.int64())
    if micros.null_count == 0:
        return (micros.to_numpy() // 1000).tolist()
    return [None if us is None else us // 1000 for us in micros.to_pylist()]


def parse_batches(batches: Iterator[pa.RecordBatch], allowed_lateness_s: float) -> Iterator[pa.RecordBatch]:
    """Classify each Kafka record with the shared classifier (``classify_many``: ``classify``'s verdicts,
    the verifier's classifier, with a vectorised fast path for plain valid events)."""
    lateness = timedelta(seconds=allowed_lateness_s)
    for batch in batches:
        values = batch.column("value").to_pylist()
        v = classify_many(values, _millis(batch.column("timestamp")), lateness)
        reason = pa.array(v.reason, pa.string())
        dead = reason.is_valid()
        raw: list[str | None] = [None] * len(values)
        if reason.null_count != len(values):  # some dead letters: keep their raw text
            for i in pc.indices_nonzero(dead).to_pylist():
                value = values[i]
                raw[i] = None if value is None else value.decode("utf-8", "backslashreplace")
        columns = {
            "status": pc.if_else(dead, "dead", "ok"),
            "event_id": pa.array(v.event_id, pa.string()),
            "key": pa.array(v.key, pa.string()),
            "amount": pa.array(v.amount, pa.float64()),
            "event_time": pa.array(v.event_time_us, pa.int64()).cast(TS),
            "topic": batch.column("topic"),
            "partition": batch.column("partition"),
            "offset": batch.column("offset"),
            "kafka_timestamp": batch.column("timestamp").cast(TS),
            "reason": reason,
            "raw_value": pa.array(raw, pa.string()),
        }
        yield pa.RecordBatch.from_arrays([columns[n] for n in PARSED_SCHEMA.names], schema=PARSED_SCHEMA)


class DemoTransform(Transform):
    """The demo stream: parse, route bad and late records, deduplicate by event id, tumbling windows."""

    @property
    def tables(self) -> Sequence[TableSpec]:
        return TABLES

    def build(self, source: "DataFrame", spec: "StreamSpec") -> "DataFrame":
        return build(source, spec)

    @property
    def kinds(self) -> dict[str, str]:
        return KINDS  # the contract's default split routes by these

    @property
    def identity(self) -> Identity:
        return Identity(table="events", columns=("event_id",))

    @property
    def aggregates(self) -> Sequence[Aggregate]:
        # Tumbling windows of event time per key; the measures let the proofs recompute them from
        # expect()'s rows without Spark (a replay recomputes them by running build over their records).
        return (Aggregate("window_results", keys=("key",), window="window_start", kind="window",
                          measures={"event_count": "count", "amount_sum": "sum(amount)"}),)

    def expect(self, records: pd.DataFrame, spec: "StreamSpec") -> pd.DataFrame:
        """The classifier the stream's parse uses (``classify_many``), per record."""
        import pandas as pd

        stamps = [None if pd.isna(t) else int(t) for t in records["timestamp"]]
        v = classify_many(list(records["value"]), stamps, spec.durations()["allowed_lateness"])
        return pd.DataFrame({
            "event_id": pd.Series(v.event_id, dtype=object), "key": pd.Series(v.key, dtype=object),
            "amount": pd.Series(v.amount, dtype="float64"),
            # cache=False: pandas 2.3's cached path (taken when values repeat) maps a nullable Series with a
            # missing value through out-of-range positions (tests/test_verify_logic.py has such an input)
            "event_time": pd.to_datetime(pd.Series(v.event_time_us, dtype="Int64"), unit="us", utc=True, cache=False),
            "reason": pd.Series(v.reason, dtype=object)})


def _shape(df: "DataFrame", kind: str) -> "DataFrame":
    from pyspark.sql import functions as F

    # one select, not a withColumn per missing column: each withColumn is a new plan Spark analyses, and
    # each `columns` a round trip to the JVM (60 plans and 200 calls per start before, 4 plans now)
    have = set(df.columns) - {"kind"}
    return df.select(*[F.lit(kind).alias(name) if name == "kind" else F.col(name) if name in have
                       else F.lit(None).cast(typ).alias(name) for name, typ in OUTPUT_COLUMNS])


def build(source: "DataFrame", spec: "StreamSpec") -> "DataFrame":
    """Kafka rows in, tagged output rows out (see module docstring)."""
    from pyspark.sql import functions as F

    d = spec.durations()
    ddl = ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in PARSED_SCHEMA)
    parsed = source.select("value", "topic", "partition", "offset", "timestamp").mapInArrow(
        functools.partial(parse_batches, allowed_lateness_s=d["allowed_lateness"].total_seconds()), ddl)
    parsed, branch = _shared_by_every_branch(parsed)
    dead = parsed.filter(branch(F.col("status") == "dead"))
    valid_rows = parsed.filter(branch(F.col("status") == "ok"))
    valid = valid_rows.withWatermark("event_time", f"{int(d['watermark_delay'].total_seconds())} seconds")
    # A replay runs this same plan as a bounded batch read, where Spark refuses
    # dropDuplicatesWithinWatermark; a batch deduplicates over the whole range instead.
    events = (valid.dropDuplicatesWithinWatermark(["event_id"]) if source.isStreaming
              else valid.dropDuplicates(["event_id"]))
    windows = (events.groupBy(F.window("event_time", f"{int(d['window'].total_seconds())} seconds"), "key")
               .agg(F.count("*").alias("event_count"), F.sum("amount").alias("amount_sum"))
               .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                       "key", "event_count", "amount_sum"))
    out = _shape(dead, "dead").unionByName(_shape(events, "event")).unionByName(_shape(windows, "window"))
    if source.isStreaming:
        # The rows the deduplication reads, as dead-letter candidates: the batch writer keeps those
        # behind the watermark (what the state operators drop), see rewind.driver.late_routing.
        out = out.unionByName(_shape(valid_rows, LATE_CANDIDATE))
    return out


def _shared_by_every_branch(parsed: "DataFrame") -> tuple["DataFrame", Callable[[Any], Any]]:
    """End the parse in a shuffle that every branch reads, and the filter wrapper that keeps it shared.

    Why: the plan branches three ways (dead letters, events, windows) and Spark has no shared
    subtrees in a streaming plan except through ReuseExchange: an exchange whose subtree is
    identical in every branch is computed once and read by all. So the parsed rows are
    repartitioned (by Kafka coordinates: spread evenly, deterministic), and two optimizer rules
    must be kept from making the three copies of that exchange differ:

    - predicate pushdown moves a branch's deterministic filter (``status = 'dead'``) below the
      repartition, into its own copy of the exchange. A filter condition that is not deterministic
      stays where it is, so each condition is wrapped in ``CASE WHEN spark_partition_id() >= 0``
      (always true, but non-deterministic for the optimizer);
    - column pruning narrows the exchange's input to what a branch reads (the windows branch only
      needs four columns). The wrapped condition also references every parsed column through an
      always-true ``hash(all columns) >= -2^31`` (hash is a 32-bit int), evaluated only for rows
      the branch's own condition keeps (AND short-circuits).

    ``tests/test_demo_plan.py`` checks on a real stream that each record is read and parsed once.

    Not by ``event_id``, although that is the clustering both deduplications need and would spare
    Spark's two exchanges in front of them (a warm run 8.5% faster, docs/benchmarks.md): the
    watermark would have to sit below the shared exchange (Spark's watermark operator does not pass
    its child's partitioning on), and then the stateful operators behind a ``ReusedExchange`` never
    acted on it. Tried on 2026-11-25: exactly once, but no window ever closed and no id expired
    (``tests/test_demo_plan.py`` guards it).
    """
    from pyspark.sql import functions as F

    shared = parsed.repartition("partition", "offset")
    barrier = F.spark_partition_id() >= 0
    every_column = F.hash(*[F.col(c) for c in PARSED_SCHEMA.names]) >= F.lit(-(2 ** 31))

    def branch(condition: Any) -> Any:
        return F.when(barrier, condition & every_column)

    return shared, branch


def _spark_type(t: pa.DataType) -> str:
    return {pa.string(): "string", pa.float64(): "double", pa.int32(): "int", pa.int64(): "bigint",
            TS: "timestamp"}[t]
