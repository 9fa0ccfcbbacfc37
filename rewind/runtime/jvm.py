"""Rewind's own JVM classes (``rewind/jvm/**.java``): compiled once, on first use, into a cached jar.

Why compiled here and not fetched: they are a few hundred lines that must match the installed
pyspark exactly (they implement Spark's ``CheckpointFileManager``), and Java 17's compiler is
already a prerequisite (the JDK ships it). The jar is named by a hash of the sources and of the
pyspark jars it was compiled against, so an upgrade of either recompiles; it is written to a
temporary name and renamed, so processes starting at once never read half a jar. It lives in
``REWIND_JVM_CACHE`` (default ``~/.cache/rewind/jvm``); compiling takes a few seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rewind.runtime.jars import JarsMissing, connector_jars, java_binary
from rewind.settings import jvm_cache_dir

__all__ = ["SOURCES", "rewind_jar", "submit_jars"]

SOURCES = Path(__file__).resolve().parents[1] / "jvm"


def _pyspark_jars() -> Path:
    """Spark's jars: ``$SPARK_HOME/jars`` (under spark-submit pyspark may be imported from a zip), else
    the pyspark package's."""
    import pyspark

    spark_home = Path(os.environ.get("SPARK_HOME") or "/nonexistent")
    for folder in (spark_home / "jars", Path(pyspark.__file__).parent / "jars"):
        if any(folder.glob("spark-sql_*.jar")):
            return folder
    raise JarsMissing(f"Spark's jars were not found (SPARK_HOME={os.environ.get('SPARK_HOME')}, pyspark at "
                      f"{pyspark.__file__}): reinstall pyspark (requirements.txt)")


def _tool(name: str) -> str:
    """``javac`` / ``jar`` of the JDK whose ``java`` Rewind runs (JAVA_HOME, else beside java on PATH)."""
    java = Path(os.path.realpath(java_binary()))
    for candidate in (java.parent / name, Path(shutil.which(name) or "")):
        if candidate.name == name and candidate.exists():
            return str(candidate)
    raise JarsMissing(f"the Java compiler ({name}) was not found beside {java}: Rewind compiles its checkpoint file "
                      "manager on first use; install the JDK, not only the runtime (Debian/Ubuntu: apt-get install -y "
                      "openjdk-17-jdk-headless)")


def _fingerprint(sources: list[Path]) -> str:
    digest = hashlib.sha256()
    for src in sources:
        digest.update(src.relative_to(SOURCES).as_posix().encode())
        digest.update(src.read_bytes())
    spark = sorted(p.name for p in _pyspark_jars().glob("spark-sql_*.jar"))
    digest.update(",".join(spark).encode())
    return digest.hexdigest()[:16]


def submit_jars(delta: bool = False, jdbc: bool = True) -> list[str]:
    """What a spark-submit of a stream passes with ``--jars``: Spark's Kafka connector (when fetched) and
    Rewind's own classes, the JDBC drivers with ``jdbc`` (the real-time sink's JVM writer) and delta-spark's
    jars only for a ``delta`` session (``needs_delta_spark``). Under spark-submit the JVM starts before the
    session's ``spark.jars`` is read.

    Why not all of them always: in a local master's executor each jar is fetched and copied into the
    driver's scratch space at start (sqlite-jdbc alone is 13 MB), and Spark loads every
    ``DataSourceRegister`` on the class path to resolve ``format("kafka")``."""

    return [*connector_jars(required=False, delta=delta, jdbc=jdbc), rewind_jar()]


def _kafka_clients() -> list[str]:
    """kafka-clients from Spark's Kafka connector (``.jars/spark``), which the real-time Kafka writer compiles
    against; [] when the connector was not fetched (that writer is then left out of the jar)."""
    return [j for j in connector_jars(required=False, delta=False) if Path(j).name.startswith("kafka-clients-")]


def rewind_jar(cache: Path | None = None) -> str:
    """The path of the jar holding Rewind's JVM classes, compiling it if this version has none yet."""

    kafka = _kafka_clients()
    sources = sorted(s for s in SOURCES.rglob("*.java") if kafka or not s.name.startswith("Kafka"))
    cache = cache or jvm_cache_dir()
    jar = cache / f"rewind-jvm-{_fingerprint(sources)}.jar"
    if jar.exists():
        return str(jar)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rewind-javac-", dir=cache) as work:
        classes = Path(work) / "classes"
        run = [_tool("javac"), "--release", "17", "-nowarn", "-d", str(classes), "-cp",
               os.pathsep.join([str(_pyspark_jars() / "*"), *kafka]), *map(str, sources)]
        done = subprocess.run(run, capture_output=True, text=True)
        if done.returncode != 0:
            raise JarsMissing(f"compiling Rewind's JVM classes failed ({' '.join(run[:4])} ...):\n"
                              f"{done.stderr[-3000:]}")
        tmp = Path(work) / jar.name
        subprocess.run([_tool("jar"), "cf", str(tmp), "-C", str(classes), "."], check=True, capture_output=True)
        os.replace(tmp, jar)
    return str(jar)
