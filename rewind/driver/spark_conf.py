"""Which Spark settings Rewind sets, and which it leaves to the deployment: the precedence, as plain data.

Why: Rewind's settings are sized for 2 cores and a laptop (2 shuffle partitions, 1 GB of driver
memory). Set on ``SparkSession.builder`` they overrode ``spark-defaults.conf`` and ``--conf``, so a
platform team could not change shuffle partitions, the UI or driver memory without editing Rewind.
Now, from the highest:

1. the registry's ``spark_conf`` of the stream (and Rewind's S3A settings for an ``s3a://`` checkpoint);
2. what the deployment set: ``--conf`` and ``spark-defaults.conf`` (``$SPARK_CONF_DIR``, else
   ``$SPARK_HOME/conf``) -- read from the running JVM under spark-submit, else from that file and
   ``PYSPARK_SUBMIT_ARGS``, which the JVM pyspark starts will read;
3. Rewind's defaults (``DEFAULTS``; a stream's driver adds ``driver_defaults``: its UI and event log),
   applied only to keys 1 and 2 leave unset.

``REQUIRED`` is set whatever the deployment says: the checkpoint tools read the RocksDB state
store's files, and the proofs judge event times in UTC.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: RocksDB changelog checkpointing (read when a state store is created).
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"

REQUIRED: dict[str, str] = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.session.timeZone": "UTC",
}

DEFAULTS: dict[str, str] = {
    # Sized for 2 cores. shuffle.partitions is the number of state partitions of a NEW checkpoint.
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # Off for tools, tests and replays; a stream's driver turns it on (driver_defaults).
    "spark.ui.enabled": "false",
    # Each batch commits a small changelog per state partition instead of a RocksDB checkpoint zipped
    # and copied (a full snapshot is uploaded in the background every 10 versions); docs/benchmarks.md
    # has the effect on batch time and latency. Rewind's checkpoint tools read both layouts.
    CHANGELOG: "true",
    # Counting a RocksDB store's rows costs a read before every write (a dedup writes every record);
    # the count only feeds numRowsTotal (state rows in the metrics: turn it on to see them).
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    # Rows sent to Python (mapInArrow) are batched by count; a byte limit on top makes Spark measure the
    # Arrow buffers after every row.
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2 ** 31 - 1),
    "spark.driver.memory": "1g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Spark's own streaming metrics (input and processing rates, latency, watermark) in its metrics
    # system, served by the driver's UI in Prometheus' format (the servlet below).
    "spark.sql.streaming.metricsEnabled": "true",
    "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
    "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
}


#: Only where the executors run this interpreter (a ``local`` master), where Rewind is installed: the Python
#: worker daemon that imports what every worker needs once, before it forks them
#: (``rewind.driver.python_daemon``; each worker 0.4 s of CPU less before its first task). A cluster's
#: executors keep Spark's own daemon unless the deployment names this one.
LOCAL_DEFAULTS: dict[str, str] = {"spark.python.daemon.module": "rewind.driver.python_daemon"}


def master_defaults(master: str) -> dict[str, str]:
    """The defaults that depend on where the executors run (``LOCAL_DEFAULTS`` for ``local``, ``local[N]``)."""
    return dict(LOCAL_DEFAULTS) if master.strip().lower().startswith("local") else {}


def event_log_dir(checkpoint: str) -> str | None:
    """Beside the registry's checkpoint: ``<checkpoint>.eventlog`` (None for a remote checkpoint: Spark
    refuses an event log directory that does not exist, and an object store has none to create)."""
    if "://" in checkpoint and not checkpoint.startswith("file://"):
        return None
    return f"{checkpoint.rstrip('/')}.eventlog"


def driver_defaults(checkpoint: str, ui_port: int, asked: Mapping[str, Any] | None = None) -> dict[str, str]:
    """A stream driver's defaults on top of ``DEFAULTS``: its UI on ``ui_port`` (linked from the Rewind
    page; it serves the Prometheus metrics). The event log is off, as in Spark: on 2 cores it cost 0.27 s
    of a batch's latency at the median and writes ~3.7 GB a day at a batch a second (docs/benchmarks.md).
    Where the deployment or the registry turns it on (``asked``: their settings) without a directory,
    it goes beside the checkpoint, rolled so that a long-running stream's log stays bounded."""
    out = {"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)}
    logs = event_log_dir(checkpoint)
    wanted = str((asked or {}).get("spark.eventLog.enabled", "false")).strip().lower() == "true"
    if logs and wanted:
        out.update({"spark.eventLog.dir": logs,
                    "spark.eventLog.rolling.enabled": "true", "spark.eventLog.rolling.maxFileSize": "32m"})
    return out


def effective(preset: Mapping[str, str], registry_conf: Mapping[str, str],
              defaults: Mapping[str, str]) -> dict[str, str]:
    """What Rewind sets on the builder: ``REQUIRED``, the registry's conf, and each default whose key neither
    the deployment (``preset``) nor the registry set."""
    chosen = {k: v for k, v in defaults.items() if k not in preset and k not in registry_conf}
    return {**chosen, **{k: str(v) for k, v in registry_conf.items()}, **REQUIRED}


def parse_properties(text: str) -> dict[str, str]:
    """``spark-defaults.conf``: a Java properties file (``key value``, ``key=value`` or ``key: value``;
    ``#`` and ``!`` comments). Continuation lines and escapes are not used by Spark's settings."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":"), *(line.find(c) for c in " \t")) if i > 0),
                  default=len(line))
        key, value = line[:cut].strip(), line[cut:].lstrip(" \t")
        if value[:1] in ("=", ":"):
            value = value[1:]
        out[key] = value.strip()
    return out


def spark_defaults_file(env: Mapping[str, str] | None = None) -> Path | None:
    """The ``spark-defaults.conf`` spark-submit reads: ``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``,
    else the pyspark installation's ``conf`` (pyspark's own ``SPARK_HOME``)."""
    env = os.environ if env is None else env
    if env.get("SPARK_CONF_DIR"):
        folder = Path(env["SPARK_CONF_DIR"])
    elif env.get("SPARK_HOME"):
        folder = Path(env["SPARK_HOME"]) / "conf"
    else:
        import pyspark

        folder = Path(pyspark.__file__).parent / "conf"
    path = folder / "spark-defaults.conf"
    return path if path.is_file() else None


def submit_args_conf(submit_args: str) -> dict[str, str]:
    """The ``--conf KEY=VALUE`` pairs of ``PYSPARK_SUBMIT_ARGS``."""
    words = shlex.split(submit_args)
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        pair = words[i + 1] if word == "--conf" and i + 1 < len(words) else \
            word[len("--conf="):] if word.startswith("--conf=") else None
        if pair and "=" in pair:
            key, value = pair.split("=", 1)
            out[key] = value
    return out


def file_preset(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Before a JVM runs: what the JVM pyspark starts will read (``spark-defaults.conf`` and
    ``PYSPARK_SUBMIT_ARGS``'s ``--conf``; the latter wins, as in spark-submit)."""
    env = os.environ if env is None else env
    path = spark_defaults_file(env)
    found = parse_properties(path.read_text()) if path else {}
    return {**found, **submit_args_conf(env.get("PYSPARK_SUBMIT_ARGS", ""))}
