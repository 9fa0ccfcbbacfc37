"""The replay DAG's tasks: plan (refusing bad input before any Spark job), then run the bounded job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from rewind_airflow.hooks.kafka import RewindKafkaHook
from rewind_airflow.operators.base import registry_file


def plan_replay_task(params: dict[str, Any], registry: str) -> dict[str, Any]:
    """Validate the form and plan against Kafka; bad input fails here, before any Spark job."""
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.paths import paths_of
    from rewind.registry import load_registry
    from rewind.replay.guard import check_mode, check_replay_id, new_replay_id
    from rewind.replay.plan import format_plan
    from rewind.replay.planner import plan_replay
    from rewind.replay.problems import ReplayRefused
    from rewind.replay.request import ReplayRequest

    reg = load_registry(registry)
    try:
        check_mode(params.get("mode") or "into-sink")
        replay_id = check_replay_id(params["replay_id"]) if params.get("replay_id") else new_replay_id()
        request = ReplayRequest.parse(params["stream"], params.get("from") or "", params.get("to") or "",
                                      params.get("topics") or None, params.get("partitions") or None,
                                      bool(params.get("allow_beyond_retention")), registry=reg)
        planned = plan_replay(request, reg, RewindKafkaHook().bootstrap())
    except ReplayRefused as exc:
        raise AirflowFailException(str(exc)) from exc
    spec = reg.get(params["stream"])
    run_dir = paths_of(spec).replay_run(replay_id)
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
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.control.location import control_store
    from rewind.registry import load_registry
    from rewind.replay.guard import busy_message, current_holder, lock_path
    from rewind.replay.report import ReplayReport, format_report

    spec = load_registry(registry).get(params["stream"])
    control = control_store(spec)
    holder = current_holder(control, spec.name)
    if holder:  # the job's own lease is what holds; this says it before a Spark start
        raise AirflowFailException(busy_message(spec.name, holder, lock_path(control, spec.name)))
    report_file = Path(planned["run_dir"]) / "report.json"
    args = [spec.name, "--registry", registry, "--bootstrap", RewindKafkaHook().bootstrap(), "--plan-json",
            planned["plan_file"], "--mode", params.get("mode") or "into-sink", "--replay-id", planned["replay_id"],
            "--run-dir", planned["run_dir"]]
    from rewind_airflow.hooks.jobs import submit_job
    from spark_jobs import REPLAY_JOB

    failure = submit_job(REPLAY_JOB, args, f"rewind-replay-{spec.name}", conn_id)
    if not report_file.exists():
        raise AirflowFailException(f"the replay job wrote no report ({failure}); see the spark-submit output above")
    report = ReplayReport.from_json(report_file.read_text())
    print(format_report(report))
    if failure is not None or not report.ok:
        why = report.error or ("the DQ proof over the replayed range failed" if report.status != "ok" else failure)
        raise AirflowFailException(f"replay {planned['replay_id']} {report.status}: {why}; report {report_file}")
    return {"replay_id": planned["replay_id"], "report": str(report_file), "ok": True}


class PlanReplayOperator(BaseOperator):
    """Validate a replay request and plan it against Kafka (``rewind.replay.planner``); nothing is read or
    written. Bad input (a range beyond retention, an unknown partition, a time without a zone) fails the
    task, without retries, with the planner's message. Returns the stored plan (XCom) for ``ReplayOperator``.

    :param request: the replay form (``stream``, ``from``, ``to``, ``topics``, ``partitions``, ``mode``,
        ``allow_beyond_retention``, ``replay_id``); default: the DAG run's ``params``
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    """

    template_fields = ("request",)

    def __init__(self, *, request: dict[str, Any] | None = None, registry: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.request, self.registry = request, registry

    def execute(self, context: Any) -> dict[str, Any]:
        return plan_replay_task(dict(self.request or context["params"]), registry_file(self.registry))


class ReplayOperator(BaseOperator):
    """Run a planned replay: the bounded Spark job through spark-submit (``spark_jobs/replay.py``), which
    writes the range through the stream's transform into its sink (or shadow tables) and proves it.
    Fails with the report's verdict when the job or its proof fails; one replay per stream at a time.

    :param planned: what ``PlanReplayOperator`` returned (its ``output``)
    :param request: the replay form (default: the DAG run's ``params``)
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param conn_id: the Spark connection spark-submit uses
    """

    template_fields = ("planned", "request")

    def __init__(self, *, planned: Any, request: dict[str, Any] | None = None, registry: str | None = None,
                 conn_id: str = "spark_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.planned, self.request, self.registry, self.conn_id = planned, request, registry, conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        return run_replay_task(dict(self.planned), dict(self.request or context["params"]),
                               registry_file(self.registry), self.conn_id)

