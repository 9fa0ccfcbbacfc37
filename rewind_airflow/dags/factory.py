"""DAGs generated from the stream registry: per stream a supervisor, a savepoint and a DQ DAG, and
one replay DAG and one upgrade DAG for all streams. Wiring only: every task is an operator of
``rewind_airflow.operators`` (or a thin ``@task`` over one), and a stream with ``alerts`` gets its
notifier on every task's failure (``rewind_airflow.notify``) and, on its savepoint and DQ DAGs, on a
run that misses its deadline (``rewind_airflow.deadlines``).

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
from rewind_airflow.deadlines import deadline_alerts, savepoint_deadline
from rewind_airflow.notify import RewindAlerts, alert_callbacks
from rewind_airflow.operators import supervision as sup
from rewind_airflow.operators.proof import ProveStreamOperator
from rewind_airflow.operators.replay import PlanReplayOperator, ReplayOperator
from rewind_airflow.operators.savepoint import RestoreSavepointOperator, SavepointOperator, SavepointRetentionOperator
from rewind_airflow.operators.supervision import LaunchStreamOperator
from rewind_airflow.operators.upgrade import UpgradeStreamOperator
from rewind_airflow.sensors.committed import FirstBatchSensor
from rewind_airflow.sensors.stream import StreamHealthSensor

START = datetime(2026, 1, 1, tzinfo=UTC)
DQ_SCHEDULE = timedelta(hours=1)


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
        default_args=alert_callbacks(spec, "supervisor", registry),
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

        recovered = [RewindAlerts("supervisor", registry, name, state="success")] if spec.alerts else []

        @task(on_success_callback=recovered)
        def relaunch(failure: dict[str, Any], checkpoint: dict[str, Any]) -> dict[str, Any]:
            return sup.relaunch(name, registry, failure, checkpoint)

        prove = ProveStreamOperator(task_id="prove", stream=name, registry=registry)

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
        relaunch(failure, cp) >> prove  # type: ignore[arg-type]
        reset >> ensure >> watch
        prove >> chain_enabled() >> next_run
    return dag


def savepoint_dag(spec: Any, registry: str) -> DAG:
    name = spec.name
    # Active from the start (is_paused_upon_creation=False): a registry's savepoint schedule is a
    # promise, and a DAG that starts paused keeps none of it until someone finds the toggle.
    with DAG(dag_id=dag_ids(name).savepoint, schedule=spec.savepoints.airflow_schedule(), start_date=START,
             catchup=False, max_active_runs=1, tags=["rewind", name], is_paused_upon_creation=False,
             default_args=alert_callbacks(spec, "savepoint", registry),
             deadline=deadline_alerts(spec, "savepoint", registry, savepoint_deadline(spec)),
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

        restore = RestoreSavepointOperator(task_id="restore", stream=name, registry=registry,
                                           savepoint_id="{{ params.savepoint_id }}", relaunch="{{ params.relaunch }}")
        saved = SavepointOperator(task_id="take_savepoint", stream=name, registry=registry)
        choose() >> [saved, restore]
        saved >> SavepointRetentionOperator(task_id="apply_retention", stream=name, registry=registry)
    return dag


def dq_dag(spec: Any, registry: str) -> DAG:
    name = spec.name
    with DAG(dag_id=dag_ids(name).dq, schedule=DQ_SCHEDULE, start_date=START, catchup=False,
             max_active_runs=1, tags=["rewind", name], is_paused_upon_creation=False,
             default_args=alert_callbacks(spec, "dq", registry),
             deadline=deadline_alerts(spec, "dq", registry, DQ_SCHEDULE),
             doc_md=f"Data-quality proof of `{name}`: every Kafka record up to the last committed batch is in "
                    "the sink or the dead-letter table exactly once, windows reconcile. The first run waits "
                    "for the stream's first committed batch (skipped if none comes within 45 minutes): before "
                    "it there is nothing to prove.") as dag:
        FirstBatchSensor(task_id="wait_first_batch", stream=name, registry=registry) >> ProveStreamOperator(
            task_id="proof", stream=name, registry=registry)
    return dag


def replay_dag(streams: list[str], registry: str, alerts: bool = False) -> DAG:
    """The on-call interface: the trigger form plans a replay (dry run by default) or runs it. With
    ``alerts`` (a stream has them), a failed task alerts the notifier of the run's stream."""
    with DAG(
        dag_id=dag_ids("").replay, schedule=None, start_date=START, catchup=False, tags=["rewind", "replay"],
        is_paused_upon_creation=False, render_template_as_native_obj=False,
        default_args={"on_failure_callback": [RewindAlerts("replay", registry)]} if alerts else {},
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
        planned = PlanReplayOperator(task_id="plan", registry=registry)

        @task.short_circuit
        def not_dry_run(planned: dict[str, Any], **context: Any) -> bool:
            if context["params"].get("dry_run", True):
                print("dry run: nothing was read or written; trigger again with dry_run off to replay this plan")
                return False
            return True

        not_dry_run(planned.output) >> ReplayOperator(task_id="replay", planned=planned.output,  # type: ignore[arg-type]
                                                      registry=registry)
    return dag


def upgrade_dag(streams: list[str], registry: str) -> DAG:
    """The form of ``rewind stream upgrade``: a stream, a mode and its new registry entry."""
    with DAG(
        dag_id=dag_ids("").upgrade, schedule=None, start_date=START, catchup=False, tags=["rewind", "upgrade"],
        is_paused_upon_creation=False, max_active_runs=1,
        doc_md="Upgrade a stream to a new registry entry (its transform and settings). Before anything stops, "
               "the new version runs one batch on a copy of the newest savepoint into a throwaway sink (Spark's "
               "state schema check, the output tables' compatibility); then the stream is stopped with a "
               "savepoint, switched by **mode** (savepoint: restore it; last-state: the same checkpoint; "
               "stateless: a new checkpoint from the committed offsets, state dropped) and launched, and rolled "
               "back to the savepoint and its previous entry if it commits no batch within its startup grace or "
               "crash-loops. Paste the new entry in the registry's own format: `streams: {NAME: {...}}`.",
        params={
            "stream": Param(streams[0], enum=streams, description="stream from the registry"),
            "mode": Param("savepoint", enum=["savepoint", "last-state", "stateless", "blue-green"],
                          description="savepoint: restore the stop's savepoint; last-state: resume the same "
                                      "checkpoint; stateless: a new checkpoint, state dropped; blue-green: the new "
                                      "version proven beside the live one, into shadow tables, then switched"),
            "registry_entry": Param("", type="string", minLength=1, format="multiline",
                                    description="the new entry: YAML `streams: {NAME: {...}}`"),
            "force": Param(False, type="boolean", description="stateless: drop the state of a stream that has some"),
            "grace_s": Param(0, type="integer", minimum=0,
                             description="seconds the new version has to commit a batch; 0: its startup_grace"),
        },
    ) as dag:
        UpgradeStreamOperator(task_id="upgrade", stream="{{ params.stream }}", mode="{{ params.mode }}",
                              entry="{{ params.registry_entry }}", force="{{ params.force }}",
                              grace_s="{{ params.grace_s }}", registry=registry)
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
        dag = replay_dag(sorted(streams), registry, any(s.alerts for s in streams.values()))
        out[dag.dag_id] = dag
        dag = upgrade_dag(sorted(streams), registry)
        out[dag.dag_id] = dag
    return out
