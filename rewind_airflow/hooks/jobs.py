"""Rewind's bounded Spark jobs (a replay, an upgrade's pre-flight), submitted from an Airflow task through the
Spark provider and waited for: where the stream's Spark connection runs drivers, on this worker or in a YARN
container (then as a stream's driver is submitted, ``RewindStreamHook.submit_job_to_yarn``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from rewind_airflow.hooks.stream import RewindStreamHook, submit_env

__all__ = ["job_in_cluster", "submit_job"]


def job_in_cluster(stream: str, registry: str, conn_id: str) -> bool:
    """A bounded job of ``stream`` submitted on ``conn_id`` runs in a YARN container (cluster mode): its files
    go with it and what it reports must be written where this worker can read it (S3), not to a local path."""
    return RewindStreamHook(stream, registry, conn_id=conn_id).is_yarn_cluster()


def submit_job(job: Path, args: list[str], name: str, conn_id: str, *, stream: str | None = None,
               registry: str | None = None, files: list[Path] | None = None,
               transforms: Sequence[str] = (), deadline_s: float | None = None) -> Exception | None:
    """spark-submit one of Rewind's bounded jobs (``spark_jobs/``: a replay, a pre-flight) through the Spark
    provider and wait for it; the exception it ended with (None: exit 0). The job's own report says more than
    an exit code, so the caller reads it either way. On this worker (local, standalone, YARN client mode):
    the connector jars and `submit_env`. In a YARN container (``stream`` given and `job_in_cluster`): the
    stream's code archive (with ``transforms``' code) and ``files`` go with it, as a stream's driver is submitted,
    and ``deadline_s`` bounds it (a ``TimeoutError`` is returned when it had to be killed)."""
    from rewind.runtime.jars import connector_jars

    try:
        if stream is not None and job_in_cluster(stream, str(registry), conn_id):
            killed = RewindStreamHook(stream, registry, conn_id=conn_id).submit_job_to_yarn(
                job, args, list(files or []), name, transforms, deadline_s)
            if killed:
                return TimeoutError(f"{name} did not end within {deadline_s:.0f}s: YARN application(s) "
                                    f"{', '.join(killed)} killed (queued or running: see the ResourceManager)")
            return None
        from rewind_airflow.lineage import parent_spark_conf

        # without the native libraries' folder: on YARN the provider hands env_vars to the application master's
        # container too (spark.yarn.appMasterEnv.*), where this worker's path means nothing; a bounded batch job
        # keeps no RocksDB state, and is not what a supervisor kills and relaunches
        hook = SparkSubmitHook(conn_id=conn_id, application_args=args, name=name, conf=parent_spark_conf() or None,
                               jars=",".join(connector_jars(required=False)) or None,
                               env_vars=submit_env(native=False))
        hook.submit(str(job))
    except Exception as exc:  # noqa: BLE001 - handed to the caller, which reads the job's report
        return exc
    return None
