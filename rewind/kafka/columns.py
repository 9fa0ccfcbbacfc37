"""The rows a Kafka source returns: Spark's Kafka columns, their Arrow form, and records turned into Arrow batches.

Why apart from the source: the columns are the contract both sources share (a stream must see
the same columns from Spark's connector and from ``format("rewind_kafka")``), and turning records
into Arrow batches is the read's hot path, worth reading on its own.
"""

from __future__ import annotations

import pyarrow as pa
from confluent_kafka import Message
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
_TS_MS = pa.timestamp("ms", tz="UTC")
_TS_US = pa.timestamp("us", tz="UTC")


def kafka_schema(include_headers: bool = False) -> StructType:
    """The columns of Spark's built-in Kafka source; ``headers`` only with ``includeHeaders=true``
    (Spark's default is without, and a stream must see the same columns from either source)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow form of ``kafka_schema`` that Spark checks returned batches against."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TS_US),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def messages_to_batch(msgs: list[Message], topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch from records of one partition, built column-wise (the hot path).

    Kafka's timestamp type ids (CreateTime 0, LogAppendTime 1, none -1) are librdkafka's minus one.
    """
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    columns = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset() for m in msgs], pa.int64()),
        pa.array([s[1] for s in stamps], _TS_MS).cast(_TS_US),
        pa.array([s[0] - 1 for s in stamps], pa.int32()),
    ]
    if len(schema) == 8:
        headers = [m.headers() for m in msgs]
        if any(headers):
            columns.append(pa.array(headers, HEADERS_TYPE))
        else:
            columns.append(pa.nulls(n, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
