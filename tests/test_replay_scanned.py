"""A replay chunk's records read, from Spark's own scan metric (``rewind.replay.scanned``), on a real Kafka range.

The range holds committed and aborted transactions, so its offsets are not its records (markers and aborted
records take offsets a ``read_committed`` scan never returns); the transforms branch, once sharing their parse
through an exchange and once reading the source in each branch, and join a static table larger than the range,
whose scan must not be taken for the source's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.kafka_records import produce_transactions

from rewind.replay.scanned import rows_scanned


def _range(spark: Any, bootstrap: str, topic: str, ends: dict[int, int]) -> Any:
    offsets = {topic: {str(p): 0 for p in ends}}
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("kafka.isolation.level", "read_committed")
            .option("startingOffsets", json.dumps(offsets))
            .option("endingOffsets", json.dumps({topic: {str(p): e for p, e in ends.items()}})).load())


def test_the_records_a_branching_transform_read_are_counted_once_and_apart_from_a_static_table(
        spark: Any, kafka_bootstrap: str, new_topic: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    topic = new_topic(2, "scanned")
    tx = produce_transactions(kafka_bootstrap, topic, 2, [(True, 40), (False, 25), (True, 30), (True, 7)])
    committed = len(tx.committed)
    ends = {p: 1 + max(o for (t, pp, o) in [*tx.committed, *tx.aborted] if pp == p) + 1 for p in (0, 1)}
    assert sum(ends.values()) > committed + len(tx.aborted)  # markers: offsets are not records
    spark.range(0, 5_000).selectExpr("cast(id % 2 as int) as p", "id as n").write.parquet(str(tmp_path / "static"))
    static = spark.read.parquet(str(tmp_path / "static"))

    src = _range(spark, kafka_bootstrap, topic, ends)
    parsed = src.select(F.col("value").cast("string").alias("v"), "partition", "offset")
    shared = parsed.repartition(2, "partition", "offset")  # both branches read one exchange (ReuseExchange)
    for base, how in ((shared, "shared"), (parsed, "read per branch")):
        a = base.filter(F.col("v").startswith("c0")).withColumn("kind", F.lit("a"))
        b = (base.filter(~F.col("v").startswith("c0")).join(F.broadcast(static).limit(3000),
                                                          F.col("partition") == F.col("p"))
             .groupBy("v", "partition", "offset").count().drop("count").withColumn("kind", F.lit("b")))
        out = a.unionByName(b)
        rows = out.toArrow().num_rows
        assert rows == committed, (how, rows, committed)
        assert rows_scanned(out, src) == committed, how


def test_no_scan_of_the_source_means_no_count(spark: Any) -> None:
    src = spark.range(0, 10)
    other = spark.createDataFrame([(1,)], "x int")
    other.toArrow()
    assert rows_scanned(other, src) is None
