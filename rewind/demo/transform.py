"""The demo stream's transform: parse, route bad records, deduplicate, window.

One streaming query, one output: dead letters (stateless), deduplicated events
(``dropDuplicatesWithinWatermark`` on RocksDB state) and closed tumbling-window
results (append mode) are unioned into rows tagged by ``kind``, so a single
``foreachBatch`` call can commit all three in one sink transaction.

The same ``build`` serves a replay's bounded batch read (``rewind.replay``): there the
watermark is ignored, duplicates are dropped over the batch, and window rows are partial
aggregates of the batch (the replay recomputes windows from the sink's events instead).
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from rewind.demo.events import classify

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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


def _ms(ts: object) -> int | None:
    return None if ts is None else int(ts.timestamp() * 1000)  # type: ignore[attr-defined]


def parse_batches(batches: Iterator[pa.RecordBatch], allowed_lateness_s: float) -> Iterator[pa.RecordBatch]:
    """Classify each Kafka record with the shared classifier (the verifier uses the same one)."""
    lateness = timedelta(seconds=allowed_lateness_s)
    for batch in batches:
        values = batch.column("value").to_pylist()
        kts = batch.column("timestamp").to_pylist()
        cols: dict[str, list] = {name: [] for name in PARSED_SCHEMA.names}
        for value, ts in zip(values, kts):
            verdict = classify(value, _ms(ts), lateness)
            ev = verdict.event
            cols["status"].append("ok" if ev else "dead")
            cols["event_id"].append(ev.event_id if ev else None)
            cols["key"].append(ev.key if ev else None)
            cols["amount"].append(ev.amount if ev else None)
            cols["event_time"].append(ev.event_time if ev else None)
            cols["reason"].append(verdict.reason)
            cols["raw_value"].append(None if ev or value is None else value.decode("utf-8", "backslashreplace"))
        cols["topic"] = batch.column("topic")
        cols["partition"] = batch.column("partition")
        cols["offset"] = batch.column("offset")
        cols["kafka_timestamp"] = batch.column("timestamp").cast(TS)
        yield pa.RecordBatch.from_arrays(
            [c if isinstance(c, (pa.Array, pa.ChunkedArray)) else pa.array(c, type=PARSED_SCHEMA.field(n).type)
             for n, c in cols.items()], schema=PARSED_SCHEMA)


def _shape(df: "DataFrame", kind: str) -> "DataFrame":
    from pyspark.sql import functions as F

    out = df.withColumn("kind", F.lit(kind))
    for name, typ in OUTPUT_COLUMNS:
        if name not in out.columns:
            out = out.withColumn(name, F.lit(None).cast(typ))
    return out.select(*[name for name, _ in OUTPUT_COLUMNS])


def build(source: "DataFrame", spec: "StreamSpec") -> "DataFrame":
    """Kafka rows in, tagged output rows out (see module docstring)."""
    from pyspark.sql import functions as F

    d = spec.durations()
    ddl = ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in PARSED_SCHEMA)
    parsed = source.select("value", "topic", "partition", "offset", "timestamp").mapInArrow(
        functools.partial(parse_batches, allowed_lateness_s=d["allowed_lateness"].total_seconds()), ddl)
    dead = parsed.filter(F.col("status") == "dead")
    valid = (parsed.filter(F.col("status") == "ok")
             .withWatermark("event_time", f"{int(d['watermark_delay'].total_seconds())} seconds"))
    # A replay runs this same plan as a bounded batch read, where Spark refuses
    # dropDuplicatesWithinWatermark; a batch deduplicates over the whole range instead.
    events = (valid.dropDuplicatesWithinWatermark(["event_id"]) if source.isStreaming
              else valid.dropDuplicates(["event_id"]))
    windows = (events.groupBy(F.window("event_time", f"{int(d['window'].total_seconds())} seconds"), "key")
               .agg(F.count("*").alias("event_count"), F.sum("amount").alias("amount_sum"))
               .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                       "key", "event_count", "amount_sum"))
    return _shape(dead, "dead").unionByName(_shape(events, "event")).unionByName(_shape(windows, "window"))


def _spark_type(t: pa.DataType) -> str:
    return {pa.string(): "string", pa.float64(): "double", pa.int32(): "int", pa.int64(): "bigint",
            TS: "timestamp"}[t]
