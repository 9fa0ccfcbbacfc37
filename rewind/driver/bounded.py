"""The stream's own ``build`` as a bounded batch: over an exact Kafka range, collected and split into tables.

Why one place: a replay writes what it returns, the proofs of a stream without ``expect()`` hold
the sink to it, and the recomputation of aggregate groups (a replay's and every proof's) takes
the aggregate tables' rows from it: the same code as the stream, over the same records, with no
second implementation. A bounded batch has no watermark: records the live stream dropped as
behind the watermark (they are dead letters) would count again, so a recomputation leaves them
out (``exclude``), and only closed groups are compared (``rewind.proof.aggregates``).

Spark is needed: the active session (a replay's, a test's, an Airflow worker's), else a local
one (``rewind.driver.outputs.spark_for``); on Airflow the proof task runs it in its worker, or the
proof runs inside the spark-submit job of a replay.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pandas as pd

from rewind.driver.batch_writer import arrow_to_pandas
from rewind.driver.outputs import KIND, _empty_source, output_frame, resolved_tables
from rewind.driver.source import bounded_options, bounded_read
from rewind.kafka.client_config import stream_consumer_config
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.kafka.types import TP

log = logging.getLogger(__name__)

__all__ = ["Coord", "Ranges", "build_batch", "build_records", "partitions_of", "whole_span"]

Coord = tuple[str, int, int]
Ranges = dict[TP, tuple[int, int]]


def partitions_of(spec: Any, bootstrap: str) -> tuple[dict[TP, int], dict[TP, int]]:
    """(earliest retained offset, end offset) of every partition of the stream's topics."""

    config = stream_consumer_config(spec.source.options, bootstrap, f"rewind-bounded-{spec.name}")
    with KafkaOffsetClient(config, 60.0) as client:
        tps = client.partitions(spec.topics)
        return client.earliest_offsets(tps), client.end_offsets(tps)


def whole_span(earliest: Mapping[TP, int], ends: Mapping[TP, int],
               upper: Mapping[TP, int] | None = None) -> Ranges:
    """Every partition from its earliest retained offset to ``upper`` (where given, else its end): the
    span a group's records can lie in when nothing bounds their offsets (pure)."""
    out: Ranges = {}
    for tp, first in earliest.items():
        end = ends.get(tp, first) if upper is None or tp not in upper else upper[tp]
        out[tp] = (first, max(first, end))
    return out


def _padded(ranges: Mapping[TP, tuple[int, int]], earliest: Mapping[TP, int]) -> Ranges:
    """A batch read with per-partition offsets must name every partition of its topics: the others empty."""
    topics = {tp.topic for tp in ranges}
    return {**{tp: (off, off) for tp, off in earliest.items() if tp.topic in topics and tp not in ranges},
            **dict(ranges)}


def build_batch(spark: Any, spec: Any, transform: Any, bootstrap: str, ranges: Mapping[TP, tuple[int, int]], *,
                earliest: Mapping[TP, int] | None = None, exclude: Collection[Coord] = (),
                kinds: Sequence[str] | None = None, description: str = "") -> dict[str, pd.DataFrame]:
    """``build`` over exactly ``[start, end)`` per partition, records at ``exclude`` left out, only rows of
    ``kinds`` (None: all), collected and split into tables (``batch_id`` None).

    ``earliest``: every partition's earliest offset (to name the partitions ``ranges`` leaves out;
    looked up when not given). Filtering by ``kind`` right after ``build`` lets Spark drop the
    branches of other kinds from the plan.
    """

    resolved_tables(transform, spec, spark)  # the default split routes to the columns build outputs
    live = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    if not live:
        return transform.split(pd.DataFrame({KIND: pd.Series([], dtype=object)}), None)
    if earliest is None:
        earliest = partitions_of(spec, bootstrap)[0]
    topics = sorted({tp.topic for tp in ranges})
    spark.sparkContext.setJobDescription(description or f"rewind: {spec.name} build() as a bounded batch")
    try:
        src = bounded_read(spark, spec, bounded_options(spec, bootstrap, topics), _padded(ranges, earliest))
        if exclude:
            src = _without(spark, src, exclude)
        return _built(transform, src, spec, kinds)
    finally:
        spark.sparkContext.setJobDescription(None)


def build_records(spark: Any, spec: Any, transform: Any, records: Sequence[Any], *,
                  kinds: Sequence[str] | None = None, description: str = "") -> dict[str, pd.DataFrame]:
    """``build`` over exactly ``records`` (``rewind.proof.verify.KafkaRecord``s read with a plain consumer,
    handed to Spark as a small batch with Kafka's columns), split into tables (``batch_id`` None).

    Why: a proof without ``expect()`` must say what became of every Kafka record, also of those
    ``build``'s own deduplication dropped from a batch over the whole range; ``build`` over only
    them tells which identity each one carries.
    """
    from datetime import UTC, datetime

    resolved_tables(transform, spec, spark)
    if not records:
        return transform.split(pd.DataFrame({KIND: pd.Series([], dtype=object)}), None)
    rows = [(r.key, r.value, r.topic, int(r.partition), int(r.offset),
             None if r.timestamp_ms is None else datetime.fromtimestamp(r.timestamp_ms / 1000, UTC), 0)
            for r in records]
    spark.sparkContext.setJobDescription(description or f"rewind: {spec.name} build() over {len(rows)} records")
    try:
        return _built(transform, spark.createDataFrame(rows, _empty_source(spark).schema), spec, kinds)
    finally:
        spark.sparkContext.setJobDescription(None)


def _built(transform: Any, src: Any, spec: Any, kinds: Sequence[str] | None) -> dict[str, pd.DataFrame]:
    """``build`` over the source frame ``src``, only rows of ``kinds`` (None: all), collected and split."""
    out = output_frame(transform, src, spec)
    if kinds is not None:
        from pyspark.sql import functions as F

        out = out.filter(F.col(KIND).isin(list(kinds)))
    return transform.split(arrow_to_pandas(out.toArrow()), None)


def _without(spark: Any, src: Any, exclude: Collection[Coord]) -> Any:
    """``src`` without the records at ``exclude`` (a broadcast anti-join on the coordinates)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("_t", T.StringType()), T.StructField("_p", T.IntegerType()),
                           T.StructField("_o", T.LongType())])
    gone = spark.createDataFrame([(t, int(p), int(o)) for t, p, o in exclude], schema)
    cond = (src["topic"] == gone["_t"]) & (src["partition"] == gone["_p"]) & (src["offset"] == gone["_o"])
    return src.join(F.broadcast(gone), cond, "left_anti")
