"""Where Rewind's JVM dependencies are, and the one-line errors when they are not.

``pom.xml`` names them, pinned; ``make jars`` (run by ``make up`` and ``make test`` on first use)
fetches them with Maven into ``.jars/`` beside ``.venv``: ``.jars/kafka/`` holds Apache Kafka's
broker and its runtime closure, ``.jars/spark/`` Spark's Kafka connector with its exact
companions. Nothing here touches the network: a missing folder is an error that says how to
fetch it. ``REWIND_JARS`` points elsewhere (an image that baked the jars in, say).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rewind.errors import Refused
from rewind.runtime.processes import ServiceError
from rewind.settings import jars_dir as configured

#: The jars of Spark's Kafka connector, by artifact name prefix: all must be present.
CONNECTOR_ARTIFACTS = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "kafka-clients-",
                       "commons-pool2-")
FETCH_HINT = ("run `make jars` in the repository (it needs Maven: apt-get install -y maven), "
              "or set REWIND_JARS to a folder holding kafka/ and spark/")


class JarsMissing(Refused, ServiceError):
    """A JVM dependency is not on disk; the message says how to fetch it."""


def jars_dir() -> Path:

    return configured()


def spark_packages_name_connector() -> bool:
    """Spark resolves the connector itself: ``spark.jars.packages`` (in ``$SPARK_CONF_DIR/spark-defaults.conf``
    or ``PYSPARK_SUBMIT_ARGS``) names ``spark-sql-kafka-0-10`` (the compose stack does so)."""
    texts = [os.environ.get("PYSPARK_SUBMIT_ARGS", "")]
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if conf_dir and (Path(conf_dir) / "spark-defaults.conf").exists():
        texts.append((Path(conf_dir) / "spark-defaults.conf").read_text())
    return any("spark.jars.packages" in t and "spark-sql-kafka-0-10" in t for t in texts)


def java_binary() -> str:
    """``$JAVA_HOME/bin/java``, else ``java`` on PATH; one line saying what to install otherwise."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ServiceError("Java 17 is required for Kafka and Spark and was not found: install it "
                           "(Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME")
    return found


def broker_classpath() -> str:
    """The classpath of ``kafka.Kafka`` (``.jars/kafka/*``)."""
    folder = jars_dir() / "kafka"
    if not any(folder.glob("kafka_2.13-*.jar")):
        raise JarsMissing(f"Apache Kafka's broker jars are not in {folder}: {FETCH_HINT}")
    return str(folder / "*")


def kafka_tools_classpath() -> str:
    """The classpath of Apache Kafka's command-line tools (``kafka-consumer-groups``' ConsumerGroupCommand,
    ...): the broker's jars and ``.jars/kafka-tools``."""
    folder = jars_dir() / "kafka-tools"
    if not any(folder.glob("kafka-tools-*.jar")):
        raise JarsMissing(f"Apache Kafka's tools jar is not in {folder}: {FETCH_HINT}")
    return f"{broker_classpath()}:{folder / '*'}"


def connector_jars(required: bool = True, delta: bool = True, jdbc: bool = True) -> list[str]:
    """Spark's Kafka connector jars (``.jars/spark/*.jar``) and, with ``jdbc``, ``jdbc_jars()``, with ``delta``,
    ``delta_jars()``; ``[]`` when the connector is absent and not ``required``."""
    folder = jars_dir() / "spark"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    missing = [a for a in CONNECTOR_ARTIFACTS if not any(Path(j).name.startswith(a) for j in jars)]
    if missing:
        if not required:
            return []
        raise JarsMissing(f"Spark's Kafka connector (format \"kafka\") is not in {folder} "
                          f"(missing {', '.join(m.rstrip('-_') for m in missing)}): {FETCH_HINT}")
    return jars + (jdbc_jars() if jdbc else []) + (delta_jars() if delta else [])


def jdbc_jars() -> list[str]:
    """sqlite-jdbc and PostgreSQL's driver (``.jars/jdbc/*.jar``), for the real-time sink's JVM writer
    (``rewind.driver.realtime``); [] when absent."""
    return sorted(str(p) for p in (jars_dir() / "jdbc").glob("*.jar"))


def delta_jars() -> list[str]:
    """delta-spark and delta-storage (``.jars/delta/*.jar``), for Delta sinks written from the executors;
    [] when absent (``require_delta_jars`` says how to fetch them)."""
    return sorted(str(p) for p in (jars_dir() / "delta").glob("*.jar"))


def require_delta_jars() -> list[str]:
    jars = delta_jars()
    if not any(Path(j).name.startswith("delta-spark_") for j in jars):
        raise JarsMissing(f"delta-spark is not in {jars_dir() / 'delta'} (a Delta sink with write_from: "
                          f"executors needs it): {FETCH_HINT}")
    return jars


#: The jars of Hadoop's S3A file system (``s3a://``), by artifact name prefix: all must be present.
S3A_ARTIFACTS = ("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-")


def s3a_jars() -> list[str]:
    """hadoop-aws, the AWS SDK v2 bundle and the analytics accelerator (``.jars/s3a/*.jar``), for
    sessions whose checkpoint is ``s3a://``; a one-line error naming ``make jars`` when absent."""
    folder = jars_dir() / "s3a"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    missing = [a for a in S3A_ARTIFACTS if not any(Path(j).name.startswith(a) for j in jars)]
    if missing:
        raise JarsMissing(f"Hadoop's S3A jars (s3a:// checkpoints) are not in {folder} "
                          f"(missing {', '.join(m.rstrip('-') for m in missing)}): {FETCH_HINT}")
    return jars


def yarn_classpath() -> str:
    """The class path of Hadoop YARN's ResourceManager and NodeManager (``.jars/yarn/*``); a one-line error
    naming the missing jar and ``make jars`` when they are absent."""
    folder = jars_dir() / "yarn"
    for artifact in ("hadoop-yarn-server-resourcemanager-", "hadoop-yarn-server-nodemanager-", "hadoop-common-"):
        if not any(folder.glob(f"{artifact}*.jar")):
            raise JarsMissing(f"Hadoop YARN's {artifact.rstrip('-')} jar is not in {folder}: {FETCH_HINT}")
    return str(folder / "*")


def spark_home() -> Path:
    """The Spark installation spark-submit runs from: ``SPARK_HOME`` when it has jars, else pyspark's own."""
    import pyspark

    given = os.environ.get("SPARK_HOME")
    return Path(given) if given and (Path(given) / "jars").is_dir() else Path(pyspark.__file__).resolve().parent
