"""How many tasks a Spark application runs at once, and whether a real-time stream's partitions fit in them.

Why: Spark's real-time mode runs one task per Kafka partition for the whole epoch, all at once. With fewer
slots than partitions a partition is not read, and nothing fails (measured on Spark 4.2: a 3-partition topic
on ``local[2]``, the third partition unread for 90 s while the other two advanced). Spark does not check it,
so Rewind refuses such a stream before anything is written, naming the setting to give.

Pure functions over the master URL and the application's settings; the driver passes what its session has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["slots_refusal", "task_slots"]

_LOCAL = re.compile(r"^local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def _int(conf: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = conf.get(key)
    if raw is None or not str(raw).strip():
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        return default


def task_slots(master: str, conf: Mapping[str, str], cpu_count: int) -> int | None:
    """Tasks the application can run at once: cores over ``spark.task.cpus``; None where the settings do not
    say (dynamic allocation without a maximum, a standalone master without ``spark.cores.max``, an unknown
    master). ``cpu_count`` is what the driver's JVM sees (its container's limit), for ``local[*]``."""
    task_cpus = max(1, _int(conf, "spark.task.cpus", 1) or 1)
    m = master.strip().lower()
    local = _LOCAL.match(m)
    if local:
        cores = 1 if local.group(1) is None else cpu_count if local.group(1) == "*" else int(local.group(1))
        return cores // task_cpus
    cluster = _LOCAL_CLUSTER.match(m)
    if cluster:
        return int(cluster.group(1)) * int(cluster.group(2)) // task_cpus
    if m == "yarn" or m.startswith("k8s://"):
        cores = _int(conf, "spark.executor.cores", 1) or 1
        if str(conf.get("spark.dynamicAllocation.enabled", "false")).strip().lower() == "true":
            executors = _int(conf, "spark.dynamicAllocation.maxExecutors", None)
        else:
            executors = _int(conf, "spark.executor.instances", 2)  # Spark's default on YARN and Kubernetes
        return None if executors is None else executors * cores // task_cpus
    if m.startswith("spark://"):
        total = _int(conf, "spark.cores.max", None)
        return None if total is None else total // task_cpus
    return None


def slots_refusal(stream: str, master: str, partitions: int, slots: int | None) -> str | None:
    """The one-line refusal when ``partitions`` tasks cannot all run at once in ``slots``, else None."""
    if slots is None or partitions <= slots:
        return None
    where = f"stream {stream}: trigger real_time"
    why = (f"the source has {partitions} Kafka partitions and the Spark application runs {slots} task(s) at once "
           f"(master {master}); real-time mode runs one task per partition for a whole epoch, and a partition "
           "without a task slot is never read")
    if master.strip().lower().startswith("local"):
        fix = (f"give the driver at least {partitions} cores: the Airflow Spark connection's master (or "
               f"REWIND_SPARK_MASTER) local[{partitions}]")
    else:
        fix = (f"give the application at least {partitions} task slots: spark.executor.instances x "
               "spark.executor.cores / spark.task.cpus in the entry's spark_conf")
    return f"{where}: {why}: {fix}, or use a processing-time trigger"
