"""DAGs generated from the stream registry: per stream a supervisor, a savepoint and a DQ DAG.

Parse time does no network I/O: it reads the registry file and builds task graphs; every
connection to Kafka, S3, Spark or the sink happens inside tasks. A registry error raises at
import, so Airflow shows it as an import error naming the file and the key.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

from rewind_airflow.operators import LaunchStreamOperator, WatchStreamOperator, launch, s3_store

ROOT = Path(__file__).resolve().parents[2]
REPLAY_APP = ROOT / "spark_jobs" / "replay.py"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def registry_path() -> str:
    return os.environ.get("REWIND_REGISTRY") or str(ROOT / "streams.yaml")


def supervisor_dag(spec: Any, registry: str) -> DAG:
    """launch -> watch (deferred) -> diagnose -> recover checkpoint -> relaunch -> prove -> next run."""
    from rewind.registry import parse_duration

    name = spec.name
    with DAG(
        dag_id=f"rewind_{name}_supervisor", schedule=None, start_date=START, catchup=False, max_active_runs=1,
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
            from rewind.registry import load_registry
            from rewind.supervision.reconcile import reset_history

            if context["params"].get("reset"):
                reset_history(load_registry(registry).get(name))

        ensure = LaunchStreamOperator(task_id="launch", stream=name, registry=registry)
        watch = WatchStreamOperator(task_id="watch", stream=name, registry=registry,
                                    poll_s=parse_duration(spec.supervision.poll).total_seconds(),
                                    thresholds=spec.supervision.thresholds(),
                                    watch_s="{{ params.watch_s }}")  # type: ignore[arg-type]

        @task
        def diagnose(event: dict[str, Any]) -> dict[str, Any]:
            from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

            from rewind.registry import load_registry
            from rewind.stream.control import stop_stream
            from rewind.supervision.reconcile import record_failure

            if event.get("healthy"):
                raise AirflowSkipException("healthy for the whole watch period: nothing to recover")
            spec_ = load_registry(registry).get(name)
            if event["cause"] in ("heartbeat_stale", "stalled"):
                stop_stream(spec_, timeout=60)  # a hung driver is stopped before a new one starts
            decision = record_failure(spec_, event["cause"], event["detail"], now=event["detected_at"])
            print(f"failure: {event['cause']}: {event['detail']}\ndecision: {decision.reason}")
            if not decision.restart:
                raise AirflowFailException(decision.reason)
            st = event.get("status") or {}
            return {"cause": event["cause"], "detected_at": event["detected_at"], "delay_s": decision.delay_s,
                    "attempt": decision.attempt, "after_batch": st.get("last_batch_id")}

        @task
        def recover_checkpoint() -> dict[str, Any]:
            from rewind.registry import load_registry
            from rewind.supervision.reconcile import recover_checkpoint as recover

            try:
                store = s3_store()
            except Exception as exc:  # noqa: BLE001 - repair needs no S3; a restore would say so
                print(f"no savepoint storage ({exc}): a restore will not be possible")
                store = None
            result = recover(load_registry(registry).get(name), store)
            print(f"checkpoint: {result['action']}: {result}")
            return result

        @task
        def relaunch(failure: dict[str, Any], checkpoint: dict[str, Any]) -> dict[str, Any]:
            from airflow.sdk.exceptions import AirflowFailException

            from rewind.registry import load_registry
            from rewind.supervision.reconcile import CrashLoop, relaunch_until_progress

            try:
                started = relaunch_until_progress(
                    load_registry(registry).get(name), lambda: launch(name, registry, "spark_default", 240.0),
                    failure["after_batch"], failure["delay_s"])
            except CrashLoop as exc:  # the strategy gave up: fail loudly, no retry of this task
                raise AirflowFailException(str(exc)) from exc
            timings = {"detect_to_relaunch_s": started["launched_at"] - failure["detected_at"],
                       "detect_to_running_s": started["running_at"] - failure["detected_at"],
                       "detect_to_first_batch_s": time.time() - failure["detected_at"]}
            print(f"recovered after {failure['cause']}: {timings}, first batch {started['first_batch']}, "
                  f"{started['relaunches']} launch(es)")
            return {**started, **timings, "checkpoint_action": checkpoint["action"]}

        @task
        def prove(recovery: dict[str, Any]) -> dict[str, Any]:
            return run_proof_task(name, registry)

        next_run = TriggerDagRunOperator(
            task_id="next_run", trigger_dag_id=f"rewind_{name}_supervisor", trigger_rule="none_failed",
            conf={"chain": True}, skip_when_already_exists=True)

        @task.short_circuit(trigger_rule="all_done")
        def chain_enabled(**context: Any) -> bool:
            """Keep watching a stream that runs, whatever this run's tasks did: a failed proof or a
            transient task error fails the run visibly but must not leave the stream unsupervised.
            No next run when the strategy gave up (crash loop) or no driver runs (launch failed):
            those need a person, and chaining would only repeat the failure."""
            from rewind.registry import load_registry
            from rewind.platform.processes import pid_alive
            from rewind.stream.status import read_status, status_path
            from rewind.supervision.reconcile import read_history

            if not context["params"].get("chain", True):
                return False
            spec_ = load_registry(registry).get(name)
            gave_up = read_history(spec_).get("gave_up")
            if gave_up:
                print(f"not chaining: the supervisor gave up ({gave_up['reason']}); "
                      f"after the fix: rewind supervisor reset {name}")
                return False
            st = read_status(status_path(spec_.status_dir, name))
            if st is None or st.state in ("stopped", "failed") or not pid_alive(st.pid):
                print(f"not chaining: no running driver for {name} (status: {st.state if st else 'none'})")
                return False
            return True

        reset = reset_if_asked()
        event = watch.output
        failure = diagnose(event)
        cp = recover_checkpoint()
        failure >> cp
        rec = relaunch(failure, cp)
        proof = prove(rec)
        reset >> ensure >> watch
        proof >> chain_enabled() >> next_run
    return dag


def run_proof_task(name: str, registry: str) -> dict[str, Any]:
    """The Great Expectations proof for what the stream has committed; fails the task with the counts,
    example rows and links to the stored results and Data Docs."""
    from airflow.sdk.exceptions import AirflowFailException
    from airflow.sdk import get_current_context

    from rewind.proof.dq import format_proof, run_proof
    from rewind.registry import load_registry
    from rewind.safe_names import run_dir_name

    from rewind_airflow.operators import kafka_bootstrap

    spec = load_registry(registry).get(name)
    run_id = run_dir_name(get_current_context()["run_id"])
    try:
        store = s3_store()
    except Exception as exc:  # noqa: BLE001 - the proof still runs; results stay in the run dir
        print(f"no S3 for the results ({exc}): keeping them in the run dir only")
        store = None
    result = run_proof(spec, kafka_bootstrap(), run_dir=Path(spec.status_dir).parent / "dq" / name / run_id,
                       s3=store, run_id=run_id)
    text = format_proof(result)
    print(text)
    if not result.ok:
        raise AirflowFailException(text)
    return {"ok": True, "counts": result.counts}


def savepoint_dag(spec: Any, registry: str) -> DAG:
    name = spec.name
    # Active from the start (is_paused_upon_creation=False): a registry's savepoint schedule is a
    # promise, and a DAG that starts paused keeps none of it until someone finds the toggle.
    with DAG(dag_id=f"rewind_{name}_savepoint", schedule=spec.savepoints.airflow_schedule(), start_date=START, catchup=False,
             max_active_runs=1, tags=["rewind", name], is_paused_upon_creation=False,
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
            return restore_task(name, registry, p.get("savepoint_id") or "", bool(p.get("relaunch", True)))

        @task
        def take_savepoint() -> dict[str, Any]:
            from airflow.sdk.exceptions import AirflowSkipException

            from rewind.registry import load_registry
            from rewind.checkpoints.savepoints import NothingToSave, create_savepoint

            try:
                m = create_savepoint(load_registry(registry).get(name), s3_store())
            except NothingToSave as exc:  # a schedule that fires before the first batch: not a failure
                raise AirflowSkipException(str(exc)) from None
            print(f"savepoint {m.savepoint_id}: batch {m.batch_id}, {len(m.files)} files, {m.total_bytes} bytes, "
                  f"offsets {m.offsets}")
            return {"savepoint_id": m.savepoint_id, "batch_id": m.batch_id, "bytes": m.total_bytes}

        @task
        def apply_retention(saved: dict[str, Any]) -> dict[str, Any]:
            from rewind.registry import load_registry, parse_duration
            from rewind.checkpoints.savepoints import apply_prune, list_savepoints, plan_prune

            spec_ = load_registry(registry).get(name)
            store = s3_store()
            plan = plan_prune(list_savepoints(store, name), spec_.savepoints.keep_last,
                              parse_duration(spec_.savepoints.max_age), datetime.now(timezone.utc))
            apply_prune(store, name, plan)
            deleted = [m.savepoint_id for m in plan.delete]
            print(f"retention: deleted {deleted}, kept {[m.savepoint_id for m in plan.keep]}")
            return {"deleted": deleted}

        saved = take_savepoint()
        choose() >> [saved, restore()]
        apply_retention(saved)
    return dag


def restore_task(name: str, registry: str, savepoint_id: str, relaunch: bool, store: Any = None,
                 conn_id: str = "spark_default") -> dict[str, Any]:
    """Restore one savepoint: check the id and that it exists (nothing is touched before), stop the stream
    after its current batch, download and verify into a fresh checkpoint, point the stream at it, and
    launch it again (also when the restore was refused, if it had been running)."""
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.registry import load_registry
    from rewind.safe_names import UnsafeName, check_savepoint_id
    from rewind.checkpoints.savepoints import SavepointError, load_manifest, restore_savepoint
    from rewind.stream.control import stop_stream, stream_liveness

    try:
        sid = check_savepoint_id(savepoint_id)
    except UnsafeName as exc:
        raise AirflowFailException(f"restore refused: {exc}; nothing was stopped or changed") from None
    spec = load_registry(registry).get(name)
    store = store if store is not None else s3_store()
    try:
        manifest = load_manifest(store, name, sid)
    except SavepointError as exc:
        raise AirflowFailException(f"restore refused: {exc}; nothing was stopped or changed") from None
    print(f"restoring {name} to savepoint {sid} (batch {manifest.batch_id}, offsets {manifest.offsets})")
    was_running = stop_stream(spec, timeout=120)
    print(f"{name} stopped after its current batch" if was_running else f"{name} was not running")
    result = None
    try:
        result = restore_savepoint(spec, store, sid)
    except SavepointError as exc:
        raise AirflowFailException(f"restore of {sid} refused: {exc}") from None
    finally:
        launched = None
        if relaunch and (was_running or result is not None) and not stream_liveness(spec).running:
            launched = launch(name, registry, conn_id, 240.0)
            print(f"{name} launched again: {launched}")
    for warning in result.warnings:
        print(f"warning: {warning}")
    print(f"restored {sid} into {result.path} in {result.seconds:.1f}s; {name} resumes at {manifest.offsets}")
    return {"savepoint_id": sid, "batch_id": manifest.batch_id, "path": str(result.path),
            "was_running": was_running, "launched": bool(launched)}


def dq_dag(spec: Any, registry: str) -> DAG:
    name = spec.name
    with DAG(dag_id=f"rewind_{name}_dq", schedule=timedelta(hours=1), start_date=START, catchup=False,
             max_active_runs=1, tags=["rewind", name], is_paused_upon_creation=False,
             doc_md=f"Data-quality proof of `{name}`: every Kafka record up to the last committed batch is in "
                    "the sink or the dead-letter table exactly once, windows reconcile.") as dag:
        @task
        def proof() -> dict[str, Any]:
            return run_proof_task(name, registry)

        proof()
    return dag


def replay_dag(streams: list[str], registry: str) -> DAG:
    """The on-call interface: the trigger form plans a replay (dry run by default) or runs it."""
    with DAG(
        dag_id="rewind_replay", schedule=None, start_date=START, catchup=False, tags=["rewind", "replay"],
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
            return plan_replay_task(context["params"], registry)

        @task.short_circuit
        def not_dry_run(planned: dict[str, Any], **context: Any) -> bool:
            if context["params"].get("dry_run", True):
                print("dry run: nothing was read or written; trigger again with dry_run off to replay this plan")
                return False
            return True

        @task
        def replay(planned: dict[str, Any], **context: Any) -> dict[str, Any]:
            return run_replay_task(planned, context["params"], registry)

        planned = plan()
        not_dry_run(planned) >> replay(planned)
    return dag


def plan_replay_task(params: dict[str, Any], registry: str) -> dict[str, Any]:
    """Validate the form and plan against Kafka; bad input fails here, before any Spark job."""
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.registry import load_registry
    from rewind.replay.guard import check_mode, check_replay_id, new_replay_id
    from rewind.replay.plan import ReplayRefused, ReplayRequest, format_plan, plan_replay

    from rewind_airflow.operators import kafka_bootstrap

    reg = load_registry(registry)
    try:
        check_mode(params.get("mode") or "into-sink")
        replay_id = check_replay_id(params["replay_id"]) if params.get("replay_id") else new_replay_id()
        request = ReplayRequest.parse(params["stream"], params.get("from") or "", params.get("to") or "",
                                      params.get("topics") or None, params.get("partitions") or None,
                                      bool(params.get("allow_beyond_retention")), registry=reg)
        planned = plan_replay(request, reg, kafka_bootstrap())
    except ReplayRefused as exc:
        raise AirflowFailException(str(exc)) from exc
    spec = reg.get(params["stream"])
    run_dir = Path(spec.status_dir).parent / "replays" / spec.name / replay_id
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_file = run_dir / "plan.json"
    plan_file.write_text(json.dumps(planned.to_json(), indent=1))
    print(format_plan(planned))
    print(f"plan stored in {plan_file}")
    return {"replay_id": replay_id, "plan_file": str(plan_file), "run_dir": str(run_dir),
            "records": planned.total_records}


def run_replay_task(planned: dict[str, Any], params: dict[str, Any], registry: str,
                    conn_id: str = "spark_default") -> dict[str, Any]:
    """The bounded Spark job through spark-submit; its report (plan, counts, proof) in the log."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.registry import load_registry
    from rewind.replay.guard import busy_message, current_holder, lock_path
    from rewind.replay.report import ReplayReport, format_report

    from rewind_airflow.operators import kafka_bootstrap

    spec = load_registry(registry).get(params["stream"])
    holder = current_holder(spec.status_dir, spec.name)
    if holder:  # the job's own lock is what holds; this says it before a Spark start
        raise AirflowFailException(busy_message(spec.name, holder, lock_path(spec.status_dir, spec.name)))
    report_file = Path(planned["run_dir"]) / "report.json"
    args = [spec.name, "--registry", registry, "--bootstrap", kafka_bootstrap(), "--plan-json",
            planned["plan_file"], "--mode", params.get("mode") or "into-sink", "--replay-id", planned["replay_id"],
            "--run-dir", planned["run_dir"]]
    from rewind.platform.jars import connector_jars

    hook = SparkSubmitHook(conn_id=conn_id, application_args=args, name=f"rewind-replay-{spec.name}",
                           jars=",".join(connector_jars(required=False)) or None,
                           env_vars={"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                                     "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    failure: Exception | None = None
    try:
        hook.submit(str(REPLAY_APP))
    except Exception as exc:  # noqa: BLE001 - the report (if any) says more than the exit code
        failure = exc
    if not report_file.exists():
        raise AirflowFailException(f"the replay job wrote no report ({failure}); see the spark-submit output above")
    report = ReplayReport.from_json(report_file.read_text())
    print(format_report(report))
    if failure is not None or not report.ok:
        why = report.error or ("the DQ proof over the replayed range failed" if report.status != "ok" else failure)
        raise AirflowFailException(f"replay {planned['replay_id']} {report.status}: {why}; report {report_file}")
    return {"replay_id": planned["replay_id"], "report": str(report_file), "ok": True}


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
