"""One place that builds a SparkSession the way Rewind needs it."""

from __future__ import annotations

import os
import sys
from typing import Any

from rewind import settings


def python_env() -> dict[str, str]:
    """Spark's Python workers must run this interpreter (it has pyarrow); see ENVIRONMENT.md."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def build_session(app_name: str, master: str | None = None, conf: dict[str, Any] | None = None):
    """A local-by-default session with RocksDB state, Spark's Kafka connector on the classpath
    (``format("kafka")``) and the Rewind Kafka source registered (``format("rewind_kafka")``).

    The connector jars go in ``spark.jars``, which works when this process starts the JVM (plain
    ``python``); under ``spark-submit`` the JVM is already running and they must come with
    ``--jars`` (``connector_jars()``; the Airflow hooks pass them).
    """
    os.environ.update(python_env())
    from pyspark.sql import SparkSession

    from rewind.platform.jars import connector_jars

    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit (its JVM hands pyspark a gateway port) the master comes from --master (the
    # Airflow connection: spark://... for a standalone cluster); setting one here would override it.
    if master or os.environ.get("REWIND_SPARK_MASTER") or not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(master or settings.spark_master())
    builder = (
        builder
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        # Counting the rows of a RocksDB store costs a read before every write (a dedup writes every
        # record); the count only feeds the numRowsTotal progress metric, which Rewind does not use.
        .config("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false")
        # Rows sent to Python (mapInArrow) are batched by count (maxRecordsPerBatch, 10,000); a byte
        # limit on top makes Spark measure the Arrow buffers after every row (~14% of executor time
        # in the demo stream's profile).
        .config("spark.sql.execution.arrow.maxBytesPerBatch", str(2 ** 31 - 1))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    jars = connector_jars(required=False)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if any("delta-spark_" in j for j in jars):
        # Delta sinks written from the executors (rewind.stream.delta_writer): delta-spark's MERGE
        # refuses a session without its extension and catalog, and these are fixed at start.
        # Non-Delta tables are left to Spark's own catalog; a state snapshot of a small Delta log
        # is read in 2 tasks, not 50.
        builder = (builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
                   .config("spark.databricks.delta.snapshotPartitions", "2"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark_log_level())
    register_sources(spark)
    return spark


def register_sources(spark) -> None:
    from rewind.kafka.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
