"""Spark's Python worker daemon, with the workers' imports done once, before it forks them.

Why: Spark starts one daemon per executor (``python -m pyspark.daemon``) and forks a worker from it
for each task slot; each worker then imports ``pyspark.worker``, pyarrow and, unpickling the stream's
functions, the stream's transform module and what it imports, paid again by every driver that starts.
Imported here, in the daemon, the forked workers find them loaded (and share their pages). Spark's own
setting selects this module (``spark.python.daemon.module``, ``rewind.driver.spark_conf.LOCAL_DEFAULTS``);
the fork, the protocol and everything after it are ``pyspark.daemon``'s.

What it imports: ``PRELOAD`` and the modules the driver names in ``REWIND_PRELOAD`` (its transform's,
``rewind.driver.runner.driver_defaults_for``), nothing more: pandas only when the transform's module
imports it (an Arrow or SQL transform's workers never do; pandas alone is 0.27 s of CPU, on a relaunched
driver's first batch's path, since the daemon starts with its first Python task).

A preload that fails is skipped: the worker then imports it as it would have, and reports the error
where Spark reports a task's.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

#: What every Rewind worker imports (``pyspark.worker``; pyarrow for Arrow's batches; the contract).
PRELOAD = ("pyspark.worker", "pyarrow", "rewind.api")
#: The environment variable (``spark.executorEnv.REWIND_PRELOAD``) naming more modules, comma-separated.
ENV = "REWIND_PRELOAD"


def modules_to_preload(env: Mapping[str, str]) -> tuple[str, ...]:
    """``PRELOAD`` and the modules ``env`` names (``ENV``), each once."""
    named = [m.strip() for m in env.get(ENV, "").split(",") if m.strip()]
    return tuple(dict.fromkeys([*PRELOAD, *named]))


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
    preload(modules_to_preload(os.environ))
    from pyspark.daemon import manager

    manager()
