"""The tests' Spark JVMs map Rewind's class-data archive (``rewind.runtime.class_sharing``), built once per
machine before the first one starts.

Why: the suite starts a few hundred Spark JVMs (each stream, replay and pre-flight driver, each worker's
session), and on 2 cores each spends much of its start loading and verifying Spark's classes. Measured
2026-11-29: a one-line PySpark job through spark-submit 10.8 -> 5.8 s of CPU. Built under a file lock in
the archive's folder, so that the pytest-xdist controller builds it and its workers only read it (about
40 s of CPU, once per JDK and Spark installation; ``REWIND_TESTS_CDS=0`` leaves it out). The options go
into ``SPARK_SUBMIT_OPTS`` here, so Rewind's own launches find them set and add nothing.
"""

from __future__ import annotations

import fcntl
import os
import sys

from rewind.errors import RewindError
from rewind.runtime.class_sharing import archive, build, submit_opts


def spark_cds_options(base: str) -> str:
    """``base`` (the tests' SPARK_SUBMIT_OPTS) with the archive's options, building the archive first if this
    machine has none; ``base`` alone when it cannot be built (the reason on stderr)."""
    if os.environ.get("REWIND_TESTS_CDS", "1") == "0":
        return base
    path = archive()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                try:
                    build(jvm_opts=base)
                except RewindError as exc:
                    print(f"spark_cds: {exc}; the tests' Spark JVMs start without an archive", file=sys.stderr)
                    return base
    return submit_opts(base) or base
