"""Class-data sharing for the Spark drivers Rewind starts: Spark's classes mapped from an archive.

Why: a relaunched driver spends much of its start loading and verifying Spark's ~13,000 classes, on the
same cores the rest of the machine needs (issue 37's recovery: SIGKILL to the first new batch is mostly a
driver's start). Java 17 writes a class-data archive when a JVM started with ``-XX:ArchiveClassesAtExit``
exits; a later JVM with the same JDK and class path maps it read-only (``-XX:SharedArchiveFile``) and
skips that work. Measured 2026-11-29 on 2 cores: a one-line PySpark job through spark-submit 10.8 -> 5.8 s
of CPU (docs/benchmarks.md).

How: ``rewind spark share-classes`` (``build``) runs a short local job that loads what a stream driver loads
(a streaming query with RocksDB state and a watermark, ``foreachBatch``, Arrow both ways) under
``ArchiveClassesAtExit``, into ``REWIND_JVM_CACHE/cds/`` under a name keyed by the JDK's build, the Spark
installation, each of its jars' name, size and modification time (the JVM refuses an archive when any jar's
differ: a reinstalled PySpark, a new virtualenv over the same path), and the class path's conf folders
(``archive``). Building one removes the archives in that folder no JVM has opened for two weeks. A driver's
start uses the archive when it is there (``submit_opts``: the Airflow launch's spark-submit environment, and a
session this process starts itself); it never builds one: a start must not wait for it. A JVM whose class path
differs from the archive's starts as it did before (``-Xshare:auto``, Java's default), and
``-Xlog:cds=off,cds+dynamic=off`` keeps its notice of that off stdout, where commands print their JSON.
``REWIND_CLASS_SHARING=off`` turns it off. A driver in a YARN container is not concerned: its class path is
the container's.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rewind.errors import Failed, RewindError
from rewind.runtime.jars import java_binary, spark_home
from rewind.settings import class_sharing_enabled, jvm_cache_dir

__all__ = ["archive", "build", "prune", "submit_env", "submit_opts"]

#: Silences the JVM's notice that an archive does not match (it goes to stdout otherwise).
QUIET = "-Xlog:cds=off,cds+dynamic=off"

#: An archive no JVM has opened for this long is removed when another is built (each is ~170 MB).
STALE_S = 14 * 24 * 3600

#: The job whose JVM writes the archive at its exit.
DUMP_JOB = """
import tempfile, time
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
rows = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
totals = (rows.withWatermark("timestamp", "5 seconds").dropDuplicatesWithinWatermark(["value"])
          .groupBy(F.window("timestamp", "2 seconds")).agg(F.count("*").alias("n")))
def batch(df, batch_id):
    df.toArrow()
    df.mapInArrow(lambda it: it, df.schema).count()
query = (totals.writeStream.foreachBatch(batch).outputMode("append")
         .option("checkpointLocation", tempfile.mkdtemp()).trigger(processingTime="1 second").start())
time.sleep(8)
query.stop()
spark.createDataFrame(spark.range(100).toPandas()).selectExpr("sum(id)").collect()
spark.stop()
"""


def archive(env: dict[str, str] | None = None) -> Path:
    """Where the archive for this JDK, Spark installation and class path lives (it may not exist yet)."""
    env = dict(os.environ if env is None else env)
    java = Path(os.path.realpath(java_binary()))
    release = java.parent.parent / "release"
    home = spark_home()
    jars = sorted(f"{p.name}:{st.st_size}:{st.st_mtime_ns}" for p in (home / "jars").glob("*.jar")
                  for st in [p.stat()])
    conf = [env.get(k, "") for k in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR")]
    digest = hashlib.sha256("\n".join([str(java), release.read_text() if release.exists() else "", str(home),
                                       *conf, *jars]).encode()).hexdigest()[:16]
    return jvm_cache_dir() / "cds" / f"spark-{digest}.jsa"


def submit_opts(existing: str | None, env: dict[str, str] | None = None) -> str | None:
    """``SPARK_SUBMIT_OPTS`` for a driver's spark-submit: ``existing`` with the archive's options when there is
    an archive (and the deployment did not choose one itself), else ``existing`` unchanged."""
    if not class_sharing_enabled() or "SharedArchiveFile" in (existing or ""):
        return existing
    try:
        path = archive(env)
    except (OSError, ImportError, RewindError):  # no Java, no Spark here (an Airflow without PySpark): as before
        return existing
    if not path.exists():
        return existing
    return " ".join(p for p in (existing or "", f"-XX:SharedArchiveFile={path}", QUIET) if p)


def submit_env() -> dict[str, str]:
    """What a driver's spark-submit (or the JVM this process starts) needs on top of this environment: the
    archive's ``SPARK_SUBMIT_OPTS`` when ``submit_opts`` adds them, else nothing."""
    existing = os.environ.get("SPARK_SUBMIT_OPTS")
    opts = submit_opts(existing)
    return {"SPARK_SUBMIT_OPTS": opts} if opts and opts != existing else {}


def build(timeout_s: float = 600.0, jvm_opts: str | None = None) -> Path:
    """Write the archive for this machine's JDK and Spark (a short local Spark job, about 40 s of CPU);
    returns its path. Refused with the job's output when it fails. ``jvm_opts``: the dump JVM's other options
    (default ``SPARK_SUBMIT_OPTS``); an archive does not depend on them."""
    path = archive()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rewind-cds-", dir=path.parent) as work:
        job = Path(work) / "share_classes.py"
        job.write_text(DUMP_JOB)
        partial = Path(work) / path.name
        given = os.environ.get("SPARK_SUBMIT_OPTS", "") if jvm_opts is None else jvm_opts
        base = " ".join(o for o in given.split() if "SharedArchiveFile" not in o and o != QUIET)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "SPARK_SUBMIT_OPTS": f"{base} -XX:ArchiveClassesAtExit={partial} {QUIET}".strip()}
        submit = spark_home() / "bin" / "spark-submit"
        try:
            run = subprocess.run([str(submit), "--master", "local[2]", str(job)], env=env, capture_output=True,
                                 text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise Failed(f"the class-data archive's job ran past {timeout_s:.0f}s; nothing was written") from exc
        if run.returncode != 0 or not partial.exists():
            raise Failed(f"the class-data archive's job failed (exit {run.returncode}); nothing was written:\n"
                         f"{run.stderr[-3000:]}")
        os.replace(partial, path)
    prune(path)
    return path


def prune(keep: Path, now: float | None = None) -> list[Path]:
    """Remove the archives beside ``keep`` that no JVM has opened (read: ``atime``) for ``STALE_S``: those of
    an earlier PySpark installation or JDK, which no JVM can map any more. Returns what it removed."""
    now = time.time() if now is None else now
    gone = []
    for other in keep.parent.glob("spark-*.jsa"):
        try:
            if other != keep and now - other.stat().st_atime > STALE_S:
                other.unlink()
                gone.append(other)
        except OSError:  # another build removed it, or it is not ours to remove
            continue
    return gone
