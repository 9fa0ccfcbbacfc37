"""Spark's Python worker daemon, with the workers' imports done once, before it forks them.

Why: Spark starts one daemon per executor (``python -m pyspark.daemon``) and forks a worker from it
for each task slot; each worker then imports ``pyspark.worker`` and, unpickling the stream's
transform, pandas, pyarrow and ``rewind.api`` -- about 0.4 s of CPU per worker, paid again by every
driver that starts. Imported here, in the daemon,
the forked workers find them loaded (and share their pages). Spark's own setting selects this module
(``spark.python.daemon.module``, ``rewind.driver.spark_conf.LOCAL_DEFAULTS``); the fork, the protocol
and everything after it are ``pyspark.daemon``'s.

A preload that fails is skipped: the worker then imports it as it would have, and reports the error
where Spark reports a task's.
"""

from __future__ import annotations

import importlib

#: What every Rewind worker imports (``pyspark.worker`` brings Spark's Arrow serializers).
PRELOAD = ("pyspark.worker", "pandas", "pyarrow", "rewind.api")


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``; the names of those that could not be imported."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports it again and reports the error as a task's
            failed.append(name)
    return failed


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
