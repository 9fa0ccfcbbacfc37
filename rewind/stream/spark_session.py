"""One place that builds a SparkSession the way Rewind needs it."""

from __future__ import annotations

import os
import sys
from typing import Any

from rewind import settings


def python_env() -> dict[str, str]:
    """Spark's Python workers must run this interpreter (it has pyarrow); see ENVIRONMENT.md."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


#: RocksDB changelog checkpointing (read when a state store is created): on in every session (build_session).
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def build_session(app_name: str, master: str | None = None, conf: dict[str, Any] | None = None, *,
                  sources: bool = True):
    """A local-by-default session with RocksDB state, Spark's Kafka connector on the classpath
    (``format("kafka")``) and, with ``sources``, the Rewind Kafka source registered
    (``format("rewind_kafka")``; a stream or replay passes False and calls ``ensure_source``).

    The connector jars go in ``spark.jars``, which works when this process starts the JVM (plain
    ``python``); under ``spark-submit`` the JVM is already running and they must come with
    ``--jars`` (``connector_jars()``; the Airflow hooks pass them).
    """
    os.environ.update(python_env())
    from pyspark.sql import SparkSession

    from rewind.platform.jars import connector_jars
    from rewind.platform.jvm import rewind_jar

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
        # Each batch commits a small changelog per state partition instead of a RocksDB checkpoint
        # zipped and copied (a full snapshot is uploaded in the background every 10 versions). Measured
        # 2026-11-25 (bench/latency.py, demo stream at 1,000 events/s, trigger "0 seconds", 90 s,
        # quiet machine): state commit 0.10-0.11 s -> 0.005 s per operator and batch, batch 0.71 s ->
        # 0.48 s, p99 latency 3.28 s -> 1.17 s. Rewind's checkpoint tools read both layouts
        # (rewind.checkpoints.state_files: a snapshot plus the changelogs after it), and RocksDB
        # loads a checkpoint written with either setting.
        .config(CHANGELOG, "true")
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
    jars = [*connector_jars(required=False), rewind_jar()]  # rewind_jar: the fenced checkpoint file manager
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
    if sources:
        register_sources(spark)
    return spark


#: Spark's checkpoint file manager (a SQL conf, read when a query starts).
FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FS_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def use_checkpoint_file_manager(spark: Any, checkpoint: str) -> None:
    """Every checkpoint is written through Rewind's fenced manager (``rewind.stream.checkpoint_fence``).

    It writes a local checkpoint through Hadoop's FileSystem, not its FileContext: without Hadoop's
    native library, the FileContext manager (Spark's default) makes the local file system fork
    ``readlink`` for every rename and ``chmod`` for every file it creates (docs/benchmarks.md). On
    other file systems (``s3a://``) it keeps Spark's default. Either way it refuses writes once the
    driver's lease has lapsed and publishes offset and commit files only if absent.
    """
    from rewind.stream.checkpoint_fence import use_fenced_file_manager

    use_fenced_file_manager(spark)


def register_sources(spark) -> None:
    """Register ``format("rewind_kafka")`` in this session (once).

    Why not always: the first Python data source of a session makes Spark look up the static ones,
    a Python process that scans the interpreter's packages (Spark's DataSourceManager). Measured
    2026-11-25 on 2 cores: 2.3 s of a 15.7 s driver start on a quiet machine, 14.7 s on a loaded
    one; a stream on Spark's own connector never needs it."""
    if getattr(spark, "_rewind_sources", False):
        return
    from rewind.kafka.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    spark._rewind_sources = True


def ensure_source(spark, source_format: str) -> None:
    """Before ``spark.read(Stream).format(source_format)``: register Rewind's source if that is it."""
    from rewind.kafka.options import SOURCE_NAME

    if source_format == SOURCE_NAME:
        register_sources(spark)
