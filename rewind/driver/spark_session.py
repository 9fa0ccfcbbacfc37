"""One place that builds a SparkSession the way Rewind needs it."""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from typing import Any

from rewind import settings
from rewind.driver import spark_conf
from rewind.driver.checkpoint_fence import use_fenced_file_manager
from rewind.kafka.options import SOURCE_NAME
from rewind.runtime.class_sharing import submit_env as class_sharing_env
from rewind.runtime.jars import connector_jars
from rewind.runtime.jvm import rewind_jar
from rewind.runtime.native_libs import jvm_library_path


def python_env() -> dict[str, str]:
    """Spark's Python workers must run this interpreter (it has pyarrow); see ENVIRONMENT.md."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


#: RocksDB changelog checkpointing (read when a state store is created): on unless the deployment says otherwise.
CHANGELOG = spark_conf.CHANGELOG


def deployment_conf() -> dict[str, str]:
    """What the deployment set (``--conf``, ``spark-defaults.conf``): under spark-submit the running JVM's
    conf (its system properties), else what the JVM pyspark is about to start will read."""
    if os.environ.get("PYSPARK_GATEWAY_PORT") or _active_context():
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # attaches to spark-submit's JVM (or the running one): no new JVM
        return dict(SparkConf().getAll())
    return spark_conf.file_preset()


def _active_context() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def build_session(app_name: str, master: str | None = None, conf: dict[str, Any] | None = None, *,
                  sources: bool = True, defaults: dict[str, str] | None = None, delta: bool = False,
                  jdbc: bool = True):
    """A local-by-default session with RocksDB state, Spark's Kafka connector on the classpath
    (``format("kafka")``) and, with ``sources``, the Rewind Kafka source registered
    (``format("rewind_kafka")``; a stream or replay passes False and calls ``ensure_source``).

    Precedence (``rewind.driver.spark_conf``): ``conf`` (the registry's ``spark_conf``, S3A settings)
    over ``--conf`` and ``spark-defaults.conf`` over Rewind's defaults (``spark_conf.DEFAULTS`` and
    ``defaults``, e.g. a driver's UI), which fill only the keys left unset.

    The connector jars go in ``spark.jars`` (after the deployment's own), which works when this
    process starts the JVM (plain ``python``); under ``spark-submit`` the JVM is already running and
    they must come with ``--jars`` (``connector_jars()``; the Airflow hooks pass them).

    ``jdbc``: sqlite-jdbc and PostgreSQL's driver (``jdbc_jars``), which only the real-time sink's JVM writer
    uses; a stream's driver passes them only then.

    ``delta``: the session of a Delta sink written from the executors (``rewind.driver.delta_writer``):
    delta-spark's jars, SQL extension and catalog. Every other session goes without: the extension's
    rules take part in the analysis of every plan, each micro-batch's included (a session and two small
    queries: 2.7 s of 12 less without it, 2026-11-29), and Rewind writes Delta otherwise through delta-rs.
    """
    os.environ.update(python_env())
    from pyspark.sql import SparkSession

    under_submit = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # spark-submit's JVM runs; else this process starts one
    if not under_submit:  # from the class-data archive
        os.environ.update(class_sharing_env())

    preset = deployment_conf()
    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit (its JVM hands pyspark a gateway port) the master comes from --master (the
    # Airflow connection: spark://... for a standalone cluster); setting one here would override it.
    if master or os.environ.get("REWIND_SPARK_MASTER") or not under_submit:
        master = master or settings.spark_master()
        builder = builder.master(master)
    else:
        master = preset.get("spark.master", "")
    given = {str(k): str(v) for k, v in (conf or {}).items()}
    chosen = {**spark_conf.DEFAULTS, **spark_conf.master_defaults(master), **(defaults or {})}
    for key, value in spark_conf.effective(preset, given, chosen).items():
        builder = builder.config(key, value)
    # rewind_jar: the fenced checkpoint file manager. Under spark-submit the JVM's class path is fixed before this
    # runs and the submit brought it with --jars (``rewind.runtime.jvm.submit_jars``); in a YARN container there
    # is neither a JDK to compile it with nor Spark's jars beside pyspark's zip.
    jars = [*connector_jars(required=False, delta=delta, jdbc=jdbc), *([] if under_submit else [rewind_jar()])]
    if jars:
        own = [j for j in (given.get("spark.jars") or preset.get("spark.jars") or "").split(",") if j]
        builder = builder.config("spark.jars", ",".join(dict.fromkeys([*own, *jars])))
    if delta and any("delta-spark_" in j for j in jars):
        # Delta sinks written from the executors (rewind.driver.delta_writer): delta-spark's MERGE
        # refuses a session without its extension and catalog, and these are fixed at start.
        # Non-Delta tables are left to Spark's own catalog; a state snapshot of a small Delta log
        # is read in 2 tasks, not 50.
        builder = (builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
                   .config("spark.databricks.delta.snapshotPartitions", "2"))
    # a JVM this process starts loads Spark's native libraries unpacked once, not into /tmp (spark-submit's has its own)
    with nullcontext() if under_submit else jvm_library_path():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark_log_level())
    if sources:
        register_sources(spark)
    return spark


#: Spark's checkpoint file manager (a SQL conf, read when a query starts).
FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FS_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def use_checkpoint_file_manager(spark: Any, checkpoint: str) -> None:
    """Every checkpoint is written through Rewind's fenced manager (``rewind.driver.checkpoint_fence``).

    It writes a local checkpoint through Hadoop's FileSystem, not its FileContext: without Hadoop's
    native library, the FileContext manager (Spark's default) makes the local file system fork
    ``readlink`` for every rename and ``chmod`` for every file it creates (docs/benchmarks.md). On
    other file systems (``s3a://``) it keeps Spark's default. Either way it refuses writes once the
    driver's lease has lapsed and publishes offset and commit files only if absent.
    """

    use_fenced_file_manager(spark)


def register_sources(spark) -> None:
    """Register ``format("rewind_kafka")`` in this session (once).

    Why not always: the first Python data source of a session makes Spark look up the static ones,
    a Python process that scans the interpreter's packages (Spark's DataSourceManager). Measured
    2026-11-25 on 2 cores: 2.3 s of a 15.7 s driver start on a quiet machine, 14.7 s on a loaded
    one; a stream on Spark's own connector never needs it."""
    if getattr(spark, "_rewind_sources", False):
        return
    from rewind.kafka.source import KafkaDataSource  # lazy: PySpark

    spark.dataSource.register(KafkaDataSource)
    spark._rewind_sources = True


def ensure_source(spark, source_format: str) -> None:
    """Before ``spark.read(Stream).format(source_format)``: register Rewind's source if that is it."""

    if source_format == SOURCE_NAME:
        register_sources(spark)
