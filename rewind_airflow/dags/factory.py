"""DAGs generated from the stream registry: per stream a supervisor, a savepoint and a DQ DAG, and
one replay DAG for all streams. Wiring only: every task calls ``rewind_airflow.operators``.

Parse time does no network I/O: it reads the registry file and builds task graphs; every
connection to Kafka, S3, Spark or the sink happens inside tasks. A registry error raises at
import, so Airflow shows it as an import error naming the file and the key.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param, task

from rewind.paths import dag_ids
from rewind_airflow.operators import proof as proof_ops
from rewind_airflow.operators import replay as replay_ops
from rewind_airflow.operators import savepoint as savepoint_ops
from rewind_airflow.operators import supervision as sup
from rewind_airflow.operators.supervision import LaunchStreamOperator
from rewind_airflow.sensors.stream import StreamHealthSensor

START = datetime(2026, 1, 1, tzinfo=UTC)


def registry_path() -> str:
    from rewind.settings import default_registry

    return str(default_registry())


def supervisor_dag(spec: Any, registry: str) -> DAG:
    """launch -> watch (deferred) -> diagnose -> recover checkpoint -> relaunch -> prove -> next run."""
    from rewind.registry import parse_duration

    name = spec.name
    with DAG(
        dag_id=dag_ids(name).supervisor, schedule=None, start_date=START, catchup=False, max_active_runs=1,
        tags=["rewind", name], is_paused_upon_creation=False,
        doc_md=f"Keeps stream `{name}` running: watches it without holding a worker slot, and on a failure "
               "inspects and repairs (or restores) the checkpoint, relaunches it and proves the output. "
               "Each run triggers the next while `chain` is true.",
        params={"chain": Param(True, type="boolean", description="start the next supervision run at the end"),
                "watch_s": Param(3600, type="integer", minimum=5, description="seconds one run watches"),
                "reset": Param(False, type="boolean", description="clear a crash-loop verdict before launching")},
    ) as dag:
        @task
        def reset_if_asked(**context: Any) -> None:
            sup.reset_if_asked(name, registry, context["params"])

        ensure = LaunchStreamOperator(task_id="launch", stream=name, registry=registry)
        watch = StreamHealthSensor(task_id="watch", stream=name, registry=registry,
                                   poll_s=parse_duration(spec.supervision.poll).total_seconds(),
                                   thresholds=spec.supervision.thresholds(),
                                   watch_s="{{ params.watch_s }}")  # type: ignore[arg-type]

        @task
        def diagnose(event: dict[str, Any]) -> dict[str, Any]:
            return sup.diagnose(name, registry, event)

        @task
        def recover_checkpoint() -> dict[str, Any]:
            return sup.recover_checkpoint(name, registry)

        @task
        def relaunch(failure: dict[str, Any], checkpoint: dict[str, Any]) -> dict[str, Any]:
            return sup.relaunch(name, registry, failure, checkpoint)

        @task
        def prove(recovery: dict[str, Any]) -> dict[str, Any]:
            return proof_ops.run_proof_task(name, registry)

        next_run = TriggerDagRunOperator(
            task_id="next_run", trigger_dag_id=dag_ids(name).supervisor, trigger_rule="none_failed",
            conf={"chain": True}, skip_when_already_exists=True)

        @task.short_circuit(trigger_rule="all_done")
        def chain_enabled(**context: Any) -> bool:
            return sup.chain_enabled(name, registry, context["params"])

        reset = reset_if_asked()
        # TaskFlow passes a task's output (an XComArg) where the @task function takes its value; Airflow's
        # typing does not model that (apache/airflow#39514), hence the arg-type ignores in this module.
        failure = diagnose(watch.output)  # type: ignore[arg-type]
        cp = recover_checkpoint()
        failure >> cp
        proof = prove(relaunch(failure, cp))  # type: ignore[arg-type]
        reset >> ensure >> watch
        proof >> chain_enabled() >> next_run
    return dag


def savepoint_dag(spec: Any, registry: str) -> DAG:
    name = spec.name
    # Active from the start (is_paused_upon_creation=False): a registry's savepoint schedule is a
    # promise, and a DAG that starts paused keeps none of it until someone finds the toggle.
    with DAG(dag_id=dag_ids(name).savepoint, schedule=spec.savepoints.airflow_schedule(), start_date=START,
             catchup=False, max_active_runs=1, tags=["rewind", name], is_paused_upon_creation=False,
             doc_md=f"Savepoint of `{name}` (online copy of its last complete batch) to S3, then retention "
                    f"(keep {spec.savepoints.keep_last}, max age {spec.savepoints.max_age}). Triggered with "
                    "`action=restore` and a `savepoint_id` it restores that savepoint instead: stop the stream, "
                    "download and verify the savepoint, point the stream at it, relaunch.",
             params={"action": Param("savepoint", enum=["savepoint", "restore"],
                                     description="savepoint: take one (the schedule's default); restore: restore "
                                                 "savepoint_id"),
                     "savepoint_id": Param("", type="string", maxLength=200,
                                           description="with action=restore: the savepoint to restore"),
                     "relaunch": Param(True, type="boolean",
                                       description="with action=restore: launch the stream again afterwards")},
             ) as dag:
        @task.branch
        def choose(**context: Any) -> str:
            return "restore" if context["params"].get("action") == "restore" else "take_savepoint"

        @task
        def restore(**context: Any) -> dict[str, Any]:
            p = context["params"]
            return savepoint_ops.restore_task(name, registry, p.get("savepoint_id") or "",
                                              bool(p.get("relaunch", True)))

        @task
        def take_savepoint() -> dict[str, Any]:
            return savepoint_ops.take_savepoint(name, registry)

        @task
        def apply_retention(saved: dict[str, Any]) -> dict[str, Any]:
            return savepoint_ops.apply_retention(name, registry)

        saved = take_savepoint()
        choose() >> [saved, restore()]
        apply_retention(saved)  # type: ignore[arg-type]  # an XComArg (see supervisor_dag)
    return dag


def dq_dag(spec: Any, registry: str) -> DAG:
    name = spec.name
    with DAG(dag_id=dag_ids(name).dq, schedule=timedelta(hours=1), start_date=START, catchup=False,
             max_active_runs=1, tags=["rewind", name], is_paused_upon_creation=False,
             doc_md=f"Data-quality proof of `{name}`: every Kafka record up to the last committed batch is in "
                    "the sink or the dead-letter table exactly once, windows reconcile.") as dag:
        @task
        def proof() -> dict[str, Any]:
            return proof_ops.run_proof_task(name, registry)

        proof()
    return dag


def replay_dag(streams: list[str], registry: str) -> DAG:
    """The on-call interface: the trigger form plans a replay (dry run by default) or runs it."""
    with DAG(
        dag_id=dag_ids("").replay, schedule=None, start_date=START, catchup=False, tags=["rewind", "replay"],
        is_paused_upon_creation=False, render_template_as_native_obj=False,
        doc_md="Replay an exact Kafka range `[from, to)` of a stream through its own transform into its sink "
               "(idempotent), or into shadow tables for comparison. Leave **dry_run** on to see the plan "
               "(offsets and record counts per partition) first. Bounds: an offset, `earliest`/`latest`, an "
               "ISO 8601 time with a zone (`2026-11-22T03:00:00Z`), or JSON like `{\"topic\": {\"0\": 12}}`. "
               "One replay per stream at a time; the DQ proof over the range runs after every replay.",
        params={
            "stream": Param(streams[0], enum=streams, description="stream from the registry"),
            "from": Param("", type="string", minLength=1, title="from (inclusive)",
                          description="offset, earliest, ISO time with zone, or per-partition JSON"),
            "to": Param("", type="string", minLength=1, title="to (exclusive)",
                        description="offset, latest, ISO time with zone, or per-partition JSON"),
            "topics": Param("", type="string", description="comma-separated; empty = all of the stream's"),
            "partitions": Param("", type="string", description="comma-separated numbers; empty = all"),
            "mode": Param("into-sink", enum=["into-sink", "shadow"],
                          description="into-sink: restore into the stream's tables (idempotent); "
                                      "shadow: separate tables named for the replay"),
            "dry_run": Param(True, type="boolean", description="only plan: show what would be read"),
            "allow_beyond_retention": Param(False, type="boolean",
                                            description="replay what is left when part of the range is gone"),
            "replay_id": Param("", type="string", description="optional name (a-z, 0-9, - and _); "
                                                                "default: the time"),
        },
    ) as dag:
        @task
        def plan(**context: Any) -> dict[str, Any]:
            return replay_ops.plan_replay_task(context["params"], registry)

        @task.short_circuit
        def not_dry_run(planned: dict[str, Any], **context: Any) -> bool:
            if context["params"].get("dry_run", True):
                print("dry run: nothing was read or written; trigger again with dry_run off to replay this plan")
                return False
            return True

        @task
        def replay(planned: dict[str, Any], **context: Any) -> dict[str, Any]:
            return replay_ops.run_replay_task(planned, context["params"], registry)

        planned = plan()
        not_dry_run(planned) >> replay(planned)  # type: ignore[arg-type]  # XComArgs (see supervisor_dag)
    return dag


def build_dags(registry: str | None = None) -> dict[str, DAG]:
    from rewind.registry import load_registry

    registry = registry or registry_path()
    out: dict[str, DAG] = {}
    streams = load_registry(registry).streams
    for spec in streams.values():
        for make in (supervisor_dag, savepoint_dag, dq_dag):
            dag = make(spec, registry)
            out[dag.dag_id] = dag
    if streams:
        dag = replay_dag(sorted(streams), registry)
        out[dag.dag_id] = dag
    return out
