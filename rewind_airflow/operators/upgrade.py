"""The upgrade DAG's task: ``rewind stream upgrade`` from Airflow's trigger form.

The new registry entry comes as YAML text from the form (the registry's own format, ``streams:
{NAME: {...}}``); the stream is launched the way the supervisor launches it (spark-submit through
``RewindStreamHook``), so the upgraded stream runs where it ran before, and the pre-flight is a Spark job
submitted the way a replay is (``submit_preflight``): the worker needs no PySpark. While the upgrade holds
its guard, the stream's supervisor stands aside (``rewind.upgrade.guard``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from rewind_airflow.errors import fail_without_retry_on_refusal
from rewind_airflow.hooks.kafka import RewindKafkaHook
from rewind_airflow.hooks.s3 import RewindS3Hook

#: How long a pre-flight submitted to YARN may take, queueing included, before it is killed and refused.
PREFLIGHT_DEADLINE_S = 900.0


def submit_preflight(prepared: Any, scratch: Path, registry: str, bootstrap: str, conn_id: str) -> Any:
    """The pre-flight as a Spark job through the Spark provider (``spark_jobs/preflight.py``), where the
    stream's connection runs its driver: on this worker, or in a YARN container (cluster mode: the job's
    files go with it and it writes its outcome to S3). This worker needs no PySpark. The outcome says pass
    or why not (a refusal exits 3)."""
    from rewind.upgrade.preflight_job import job_files, read_outcome
    from rewind.upgrade.rules import UpgradeRefused
    from rewind_airflow.hooks.jobs import job_in_cluster, submit_job
    from rewind_airflow.hooks.s3 import RewindS3Hook
    from spark_jobs import PREFLIGHT_JOB

    name = prepared.old.name
    in_cluster = job_in_cluster(name, registry, conn_id)
    job = job_files(prepared, scratch, registry, bootstrap, RewindS3Hook().config().bucket, in_cluster=in_cluster)
    ended = submit_job(PREFLIGHT_JOB, job.args, f"rewind-preflight-{name}", conn_id, stream=name, registry=registry,
                       files=job.files, transforms=[prepared.new.transform], deadline_s=PREFLIGHT_DEADLINE_S)
    if isinstance(ended, TimeoutError):
        raise UpgradeRefused(f"the pre-flight of {name} did not run: {ended} -- the live stream was not touched")
    log = ("the YARN application's driver log (`yarn logs -applicationId ID`, the ID in spark-submit's output "
           "above)") if in_cluster else "this task's log (spark-submit's output above)"
    return read_outcome(job.outcome, log)


class UpgradeStreamOperator(BaseOperator):
    """Upgrade a stream to a new registry entry: pre-flight, stop with a savepoint, switch by mode,
    watch, roll back when the new version does not become healthy. A refusal (bad entry, a mode that
    cannot apply, incompatible state or tables) fails the task without retries and the live stream
    is untouched; a rollback fails the task too, saying why (the stream runs its previous entry).

    :param stream: the registry stream
    :param mode: ``savepoint``, ``last-state``, ``stateless`` or ``blue-green``
    :param entry: the new entry as YAML text, ``streams: {NAME: {...}}``
    :param force: stateless only: drop the state of a stream that has some
    :param grace_s: seconds the new version has to commit a batch (0: its ``supervision.startup_grace``)
    :param registry: the registry file (default: ``$REWIND_REGISTRY``); it is rewritten (only the stream's entry)
    :param conn_id: the Spark connection spark-submit uses
    """

    template_fields = ("stream", "mode", "entry", "force", "grace_s")

    def __init__(self, *, stream: str, mode: str, entry: str, force: bool | str = False, grace_s: float | str = 0.0,
                 registry: str | None = None, conn_id: str = "spark_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream, self.mode, self.entry, self.force, self.grace_s = stream, mode, entry, force, grace_s
        self.registry, self.conn_id = registry, conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from rewind.settings import default_registry
        from rewind.upgrade.run import UpgradeRequest, prepare, upgrade
        from rewind_airflow.operators.supervision import launch

        registry = str(self.registry or default_registry())
        force = str(self.force).strip().lower() in ("true", "1", "yes")  # a template renders text
        req = UpgradeRequest(self.stream, registry, self.entry, "the form's registry_entry", self.mode, force,
                             float(self.grace_s or 0) or None)
        bootstrap = RewindKafkaHook().bootstrap()
        with fail_without_retry_on_refusal():
            prepared = prepare(req)
            record = upgrade(prepared, RewindS3Hook().store(), bootstrap,
                             lambda spec: int(launch(spec.name, registry, self.conn_id, 240.0)["pid"]),
                             on_step=lambda step, detail: self.log.info("%s: %s", step, detail),
                             run_preflight=lambda p, scratch: submit_preflight(p, scratch, registry, bootstrap,
                                                                                self.conn_id),
                             launch_green=lambda spec, green: int(launch(spec.name, str(green), self.conn_id,
                                                                         240.0)["pid"]))
        if record["result"] != "upgraded":
            raise AirflowFailException(f"{self.stream}: the new version was rolled back: {record['reason']}")
        return {k: record.get(k) for k in ("id", "result", "mode", "from", "to", "savepoint", "checkpoint")}
