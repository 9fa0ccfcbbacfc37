"""No false alarm on a fresh start (fast, no services): before its first committed batch a stream has
nothing to prove, in the DQ task, the page, ``rewind verify`` and ``rewind dq``; and the verdict line.

Kafka is a closed port in these tests: a proof that had nothing to prove and read Kafka anyway would
fail with a connection error instead of passing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from rewind.control.status import StreamStatus, write_status
from rewind.paths import status_file
from rewind.proof.scope import committed_batch, nothing_to_prove
from rewind.proof.verdict import verdict_line
from rewind.registry import load_registry
from tests.harness.registry_templates import demo_stream, write_registry

NO_KAFKA = "127.0.0.1:9"  # discard port: nothing listens


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A registered stream that has never run (no status, no checkpoint), and no Kafka to read."""
    registry = write_registry(tmp_path / "r.yaml", demo_stream("fresh", "t", tmp_path),
                              demo_stream("inv", "t2", tmp_path, dq_suite="contract"))
    monkeypatch.setenv("REWIND_KAFKA_BOOTSTRAP", NO_KAFKA)
    monkeypatch.setenv("REWIND_REGISTRY", str(registry))
    monkeypatch.setenv("REWIND_S3_BUCKET", "")
    return load_registry(registry)


def test_the_rule() -> None:
    assert nothing_to_prove("s", None, explicit_range=False)
    assert "has not committed a batch" in (nothing_to_prove("s", None, False) or "")
    assert nothing_to_prove("s", 0, explicit_range=False) is None  # batch 0 is a committed batch
    assert nothing_to_prove("s", None, explicit_range=True) is None  # a range someone asked for is proved


def test_committed_batch_from_the_status_else_the_checkpoint(fresh: Any, tmp_path: Path) -> None:
    spec = fresh.get("fresh")
    assert committed_batch(spec) is None
    (Path(spec.checkpoint) / "commits").mkdir(parents=True)
    (Path(spec.checkpoint) / "commits" / "4").write_text("v1\n{}")
    (Path(spec.checkpoint) / "commits" / ".4.crc").write_text("")
    assert committed_batch(spec) == 4  # the status file is lost, the checkpoint says
    write_status(status_file(spec), StreamStatus(stream=spec.name, last_batch_id=9))
    assert committed_batch(spec) == 9


@pytest.mark.parametrize("stream", ["fresh", "inv"])
def test_the_proof_of_a_fresh_stream_passes_with_nothing_to_prove(fresh: Any, tmp_path: Path, stream: str) -> None:
    from rewind.ops.view import dq_view, newest_proof
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof

    spec = fresh.get(stream)
    result = run_proof(spec, NO_KAFKA, run_dir=tmp_path / "dq" / stream / "r1", run_id="r1")
    assert result.ok and result.nothing_to_prove and result.expectations == 0
    assert format_proof(result).startswith(f"DQ proof {stream} run r1: NOTHING TO PROVE")
    proof, at, _ = newest_proof(spec)  # what the page reads
    view = dq_view(proof, at)
    assert view is not None and view["ok"] is True and "not committed a batch" in view["nothing_to_prove"]


def test_the_dq_task_is_skipped_not_failed(fresh: Any) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from rewind_airflow.operators.proof import ProveStreamOperator

    op = ProveStreamOperator(task_id="proof", stream="fresh", registry=fresh.source_file)
    with pytest.raises(AirflowSkipException, match="NOTHING TO PROVE"):
        op.execute({"run_id": "scheduled__2026-11-27T00:00:00+00:00"})


def test_the_dq_dag_waits_for_the_first_committed_batch(fresh: Any) -> None:
    """The DQ DAG's first task defers to the triggerer until the stream commits (a rescheduling sensor can be
    failed by Airflow's scheduler under load: apache/airflow#71172), and is skipped, not failed, when nothing
    comes within its timeout."""
    import asyncio

    from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

    from rewind_airflow.dags.factory import build_dags
    from rewind_airflow.sensors.committed import FirstBatchSensor
    from rewind_airflow.triggers.committed import FirstBatchTrigger

    dag = build_dags(fresh.source_file)["rewind_fresh_dq"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {"wait_first_batch": ["proof"],
                                                                             "proof": []}
    sensor = dag.get_task("wait_first_batch")
    assert isinstance(sensor, FirstBatchSensor) and sensor.soft_fail
    assert sensor.timeout < 3600  # done (or skipped) before the next hourly run
    assert sensor.poke({}) is False
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, FirstBatchTrigger) and deferred.value.method_name == "execute_complete"
    path, kwargs = trigger.serialize()
    again = FirstBatchTrigger(**{**kwargs, "poll_s": 0.05, "timeout_s": 0.2})
    assert path == "rewind_airflow.triggers.committed.FirstBatchTrigger" and again.since == trigger.since

    def first_event(t: FirstBatchTrigger) -> dict[str, Any]:
        async def one() -> dict[str, Any]:
            async for event in t.run():
                return dict(event.payload)
            raise AssertionError("the trigger ended without an event")
        return asyncio.run(asyncio.wait_for(one(), 10))

    timed_out = first_event(again)  # since: the deferral's start, so its timeout has passed
    assert timed_out["batch"] is None
    with pytest.raises(AirflowSkipException, match="committed no batch within"):
        sensor.execute_complete({}, timed_out)
    spec = fresh.get("fresh")
    write_status(status_file(spec), StreamStatus(stream="fresh", last_batch_id=0))
    assert first_event(FirstBatchTrigger("fresh", fresh.source_file, 0.05, 60))["batch"] == 0
    assert sensor.execute_complete({}, {"batch": 0, "waited_s": 1.0}) == 0
    assert sensor.poke({}) is True and sensor.execute({}) == 0  # committed already: no deferral


def test_rewind_verify_of_a_fresh_stream(fresh: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from rewind.cli.main import main

    assert main(["verify", "fresh"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("NOTHING TO PROVE fresh: nothing to prove: fresh has not committed a batch"), out
    assert main(["verify", "inv", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"stream": "inv", "ok": True, "nothing_to_prove": json.loads(
        captured.out)["nothing_to_prove"]} and captured.err.startswith("NOTHING TO PROVE inv")
    assert main(["dq", "fresh", "--no-s3"]) == 0
    assert "NOTHING TO PROVE" in capsys.readouterr().out


@pytest.mark.parametrize("summary,line", [
    ({"ok": True, "kafka_records": 12000}, "PASS s: 12,000 Kafka records in the proved range"),
    ({"ok": True, "records_in_range": 5}, "PASS s: 5 Kafka records"),
    ({"ok": False, "kafka_records": 10, "missing_events": {"count": 3, "examples": []}, "duplicate_event_rows": 2,
      "unexpected_events": {"count": 0, "examples": []}}, "FAIL s: missing_events 3, duplicate_event_rows 2 (of 10"),
    ({"ok": True, "nothing_to_prove": "why"}, "NOTHING TO PROVE s: why"),
])
def test_verdict_lines(summary: dict[str, Any], line: str) -> None:
    assert verdict_line("s", summary).startswith(line)


def test_great_expectations_import_chatter_is_silenced(caplog: pytest.LogCaptureFixture) -> None:
    """GE's decorator logs a line per closure at INFO while it is imported; the proof's logs must not carry them."""
    import importlib
    import sys

    from rewind.proof.gx import CHATTY_LOGGERS, quiet_great_expectations

    quiet_great_expectations()
    for name in [m for m in sys.modules if m == "great_expectations._docs_decorators"]:
        del sys.modules[name]
    with caplog.at_level(logging.INFO):
        decorators = importlib.import_module("great_expectations._docs_decorators")

        def outer() -> None:
            @decorators.public_api
            def closure() -> None:  # what GE's DataSourceManager does, some two hundred times
                pass

        outer()
    assert CHATTY_LOGGERS == ("great_expectations._docs_decorators",)
    assert not [r for r in caplog.records if "Skipping registering function" in r.getMessage()]


def test_the_rewind_up_check_catches_a_failed_dq_run_and_a_fail_on_the_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """harness/no_false_alarm.py (run on the shared `rewind up`) against stand-ins: quiet passes, each alarm fails."""
    import httpx
    from harness.no_false_alarm import look

    class Client:
        url = "http://af"

        def __init__(self, run_state: str, proof_state: str) -> None:
            self.run_state, self.proof_state = run_state, proof_state

        def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
            return [{"dag_run_id": "scheduled__1", "state": self.run_state}]

        def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
            return [{"task_id": "wait_first_batch", "state": "success"},
                    {"task_id": "proof", "state": self.proof_state}]

        def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
            return f"{task_id} try {try_number}: FaultInjected: the cause"

        def token(self) -> str:
            return "t"

    page: dict[str, Any] = {"dq": {"ok": True, "nothing_to_prove": "no batch yet"}, "dags": {}}
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, json=page))
    seen: dict[str, Any] = {"dq_runs": {}, "page_dq": None, "proofs": []}
    look(Client("success", "skipped"), tmp_path, "demo", seen)
    assert seen["page_dq"] == "nothing_to_prove" and seen["dq_runs"]["scheduled__1"]["state"] == "success"
    look(Client("running", "deferred"), tmp_path, "demo", seen)  # still waiting for the first batch
    with pytest.raises(AssertionError, match=r"\(failed\) on a fresh start(.|\n)*try 1: FaultInjected: the cause"):
        look(Client("failed", "failed"), tmp_path, "demo", seen)
    with pytest.raises(AssertionError, match="tasks .*'proof': 'failed'"):
        look(Client("running", "failed"), tmp_path, "demo", seen)
    (tmp_path / "dq" / "demo" / "r1").mkdir(parents=True)
    (tmp_path / "dq" / "demo" / "r1" / "proof.json").write_text(json.dumps({"ok": False, "failures": ["x"]}))
    with pytest.raises(AssertionError, match="r1/proof.json failed"):
        look(Client("success", "success"), tmp_path, "demo", seen)
    (tmp_path / "dq" / "demo" / "r1" / "proof.json").unlink()
    page["dq"] = {"ok": False}
    with pytest.raises(AssertionError, match="shows FAIL"):
        look(Client("success", "success"), tmp_path, "demo", seen)
