"""A class-data-sharing (CDS) archive of the classes a Spark driver loads, for the tests' Spark JVMs.

Why: the suite starts a few hundred Spark JVMs (each stream, replay and pre-flight driver, each worker's
session), and on 2 cores each spends most of its start loading and verifying Spark's ~13,000 classes.
Measured 2026-11-29 (a one-line PySpark job through spark-submit, C1 only): 10.8 s of CPU without the
archive, 5.8 s with it. Java 17 writes the archive at the exit of one JVM started with
``-XX:ArchiveClassesAtExit``; later JVMs with the same JDK and class path map it read-only
(``-XX:SharedArchiveFile``). One that does not match (another SPARK_CONF_DIR before Spark's jars, a YARN
container) starts as before: ``-Xshare:auto`` is the default, and ``-Xlog:cds=off,cds+dynamic=off`` keeps
the JVM's warning about it off stdout, where a command's JSON answer is read.

Built once per machine and per JDK, Spark and Python environment (the key), under a file lock so that the
pytest-xdist controller builds it and its workers only read it; about 40 s. Rewind itself does not set
this: a deployment's JVMs are its own (docs/benchmarks.md has the measurement).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

#: The dump job: what a stream driver's JVM loads (a streaming query with RocksDB state and a watermark,
#: foreachBatch, Arrow both ways, a batch read), so that those classes come from the archive too.
DUMP_JOB = """
import tempfile, time
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
rows = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
deduped = (rows.withWatermark("timestamp", "5 seconds").dropDuplicatesWithinWatermark(["value"])
           .groupBy(F.window("timestamp", "2 seconds")).agg(F.count("*").alias("n")))
seen = []
def batch(df, batch_id):
    seen.append(df.toArrow().num_rows)
    df.mapInArrow(lambda it: it, df.schema).count()
query = (deduped.writeStream.foreachBatch(batch).outputMode("append")
         .option("checkpointLocation", tempfile.mkdtemp()).trigger(processingTime="1 second").start())
time.sleep(8)
query.stop()
spark.createDataFrame(spark.range(100).toPandas()).selectExpr("sum(id)").collect()
spark.stop()
"""


def _key() -> str:
    import pyspark

    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    return hashlib.sha256("\n".join([java, pyspark.__version__, sys.prefix, *jars]).encode()).hexdigest()[:16]


def spark_cds_options(base: str) -> str:
    """``base`` (the tests' SPARK_SUBMIT_OPTS) with the archive's options, building the archive first if
    this machine has none; ``base`` alone when it cannot be built (the reason on stderr)."""
    if os.environ.get("REWIND_TESTS_CDS", "1") == "0":
        return base
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rewind-tests"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"spark-{_key()}.jsa"
    use = f"{base} -XX:SharedArchiveFile={archive} -Xlog:cds=off,cds+dynamic=off"
    if archive.exists():
        return use
    with open(folder / "spark-cds.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            return use
        import pyspark

        job = folder / "spark_cds_dump.py"
        job.write_text(DUMP_JOB)
        partial = archive.with_suffix(".partial")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "SPARK_SUBMIT_OPTS": f"{base} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off,cds+dynamic=off"}
        env.pop("SPARK_CONF_DIR", None)
        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        try:
            run = subprocess.run([str(submit), "--master", "local[2]", str(job)], env=env, capture_output=True,
                                 text=True, timeout=300)
        except subprocess.TimeoutExpired:
            print("spark_cds: the dump job timed out; the tests' Spark JVMs start without an archive",
                  file=sys.stderr)
            return base
        if run.returncode != 0 or not partial.exists():
            print(f"spark_cds: the dump job failed (exit {run.returncode}); the tests' Spark JVMs start without "
                  f"an archive:\n{run.stderr[-2000:]}", file=sys.stderr)
            return base
        partial.rename(archive)
    return use
