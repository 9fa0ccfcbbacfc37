"""Launch a registered stream through spark-submit, detached when it is a long-running local job."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


class RewindStreamHook(SparkSubmitHook):
    """SparkSubmitHook that can leave a streaming driver running.

    ``SparkSubmitHook.submit`` waits for spark-submit to end, which for a stream in local
    or client mode is never. `launch_detached` builds the same command (connection,
    conf, env) and starts it in its own session, returning the pid; the stream then
    reports through its status file. On a cluster (deploy mode ``cluster``) spark-submit
    returns once the driver is accepted, so plain `submit` is right there.
    """

    def __init__(self, stream: str, registry: str | None = None, bootstrap: str | None = None,
                 conn_id: str = "spark_default", standby: bool = False, **kwargs: Any) -> None:
        from rewind.runtime.jvm import submit_jars

        args = [stream] + (["--registry", registry] if registry else []) + \
            (["--bootstrap", bootstrap] if bootstrap else []) + (["--standby"] if standby else [])
        kwargs.setdefault("name", f"rewind-{stream}")
        # Spark's Kafka connector and Rewind's checkpoint file manager: under spark-submit the JVM starts
        # before the session's conf is read, so spark.jars set in Python would not reach its class path.
        kwargs.setdefault("jars", ",".join(submit_jars()))
        # An s3a:// checkpoint: the S3A jars on the driver's class path, which under spark-submit is
        # fixed before the session's spark.driver.extraClassPath is read (rewind.runtime.s3a).
        kwargs.setdefault("driver_class_path", s3a_driver_class_path(stream, registry))
        super().__init__(conn_id=conn_id, application_args=args, **kwargs)
        self.stream = stream

    def submit_command(self) -> list[str]:
        from spark_jobs import STREAM_JOB

        return self._build_spark_submit_command(str(STREAM_JOB))

    def launch_detached(self, log_path: Path, env: dict[str, str] | None = None) -> int:
        from rewind.supervision.process_control import spawn_detached

        full_env = {**os.environ, **(self._env_vars or {}), **(env or {})}
        # spark-submit and the driver's Python come from the interpreter running Airflow.
        full_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full_env.get("PATH", "")])
        full_env.setdefault("PYSPARK_PYTHON", sys.executable)
        full_env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        pid = spawn_detached(self.submit_command(), log_path, full_env)
        self.log.info("launched %s detached: pid %d, log %s", self.stream, pid, log_path)
        return pid


def s3a_driver_class_path(stream: str, registry: str | None) -> str | None:
    """The S3A jars as a class path when the stream's checkpoint is ``s3a://``, else None (also when the
    registry cannot be read here: the stream job then reports that itself)."""
    from rewind.errors import Refused
    from rewind.registry import load_registry
    from rewind.runtime.jars import s3a_jars
    from rewind.runtime.s3a import is_s3a

    try:
        checkpoint = load_registry(registry).get(stream).checkpoint
    except (Refused, OSError):
        return None
    return ":".join(s3a_jars()) if is_s3a(checkpoint) else None


def submit_env() -> dict[str, str]:
    """What a spark-submit of a Rewind job needs in its environment: this interpreter's Python and
    spark-submit on PATH, and (from a checkout) the package on PYTHONPATH."""
    from rewind.settings import python_path

    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if python_path():
        env["PYTHONPATH"] = python_path()
    return env
