"""DAG integrity (no services, no network at parse time) and the supervisor's recovery path via dag.test()."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = ROOT / "dags" / "rewind_streams.py"


def _load(registry: Path | None = None) -> dict[str, Any]:
    from rewind_airflow.dags.factory import build_dags

    return build_dags(str(registry) if registry else None)


def test_dags_import_without_network(airflow_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a DAG file opened a network connection at parse time")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    dags = _load()
    assert set(dags) == {"rewind_demo_supervisor", "rewind_demo_savepoint", "rewind_demo_dq", "rewind_replay",
                         "rewind_inventory_supervisor", "rewind_inventory_savepoint", "rewind_inventory_dq",
                         "rewind_upgrade"}


def test_dagbag_has_no_import_errors(airflow_env: dict[str, str]) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    assert {"rewind_demo_supervisor", "rewind_demo_savepoint", "rewind_demo_dq", "rewind_replay"} <= set(bag.dag_ids)


def test_supervisor_task_graph(airflow_env: dict[str, str]) -> None:
    dag = _load()["rewind_demo_supervisor"]
    edges = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert edges == {
        "reset_if_asked": ["launch"], "launch": ["watch"], "watch": ["diagnose"],
        "diagnose": ["recover_checkpoint", "relaunch"], "recover_checkpoint": ["relaunch"], "relaunch": ["prove"],
        "prove": ["chain_enabled"], "chain_enabled": ["next_run"], "next_run": [],
    }
    assert dag.get_task("watch").__class__.__name__ == "StreamHealthSensor"  # the watch is a sensor (deferrable)
    assert dag.max_active_runs == 1 and dag.schedule is None or dag.timetable.summary in ("None", "")
    sp = _load()["rewind_demo_savepoint"]
    assert [sorted(t.downstream_task_ids) for t in sp.tasks if t.task_id == "take_savepoint"] == [["apply_retention"]]


def test_replay_dag_form_and_graph(airflow_env: dict[str, str]) -> None:
    dag = _load()["rewind_replay"]
    edges = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert edges == {"plan": ["not_dry_run", "replay"], "not_dry_run": ["replay"], "replay": []}
    params = dag.params.dump()
    assert set(params) == {"stream", "from", "to", "topics", "partitions", "mode", "dry_run",
                           "allow_beyond_retention", "replay_id"}
    assert dag.params.get_param("stream").schema["enum"] == ["demo", "inventory"]
    assert dag.params.get_param("mode").schema["enum"] == ["into-sink", "shadow"]
    assert params["dry_run"] is True  # the form plans unless told otherwise


@pytest.mark.parametrize("form,message", [
    ({"from": "500", "to": "100"}, "after"),
    ({"from": "0", "to": "10", "replay_id": "../etc"}, "is not allowed"),
    ({"from": "2026-11-22T03:00:00", "to": "latest"}, "zone"),
    ({"from": "0", "to": "10", "partitions": "7"}, "partition"),
])
def test_replay_dag_refuses_bad_input_in_its_first_task(airflow_env: dict[str, str], platform: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, form: dict[str, str],
                                                        message: str, capfd: pytest.CaptureFixture[str]) -> None:
    """Invalid params fail `plan` with the planner's message; nothing after it runs."""
    from rewind.demo.producer import ProduceSpec, produce

    topic = "replay-form"
    registry = _supervised_registry(tmp_path, topic, platform, monkeypatch)
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=20, partitions=2, id_prefix="f"))
    run = _load(registry)["rewind_replay"].test(run_conf={"stream": "sup", **form})
    states = _states(run)
    assert states["plan"] == "failed" and states["replay"] != "success", states
    log = capfd.readouterr().out  # dag.test() logs the tasks to stdout
    assert "AirflowFailException: replay refused" in log and message in log, log[-3000:]


def test_upgrade_dag_refuses_a_bad_entry_in_its_task(airflow_env: dict[str, str], platform: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    """The form's entry is checked before anything is stopped: a transform that does not load fails the
    task without retries, naming it, and the registry is left as it was."""
    registry = _supervised_registry(tmp_path, "upgrade-form", platform, monkeypatch)
    before = registry.read_text()
    entry = before.replace("rewind.demo.transform:DemoTransform", "rewind.nowhere:Transform")
    run = _load(registry)["rewind_upgrade"].test(run_conf={"stream": "sup", "mode": "last-state",
                                                            "registry_entry": entry})
    assert _states(run)["upgrade"] == "failed"
    log = capfd.readouterr().out
    assert "AirflowFailException" in log and "cannot import module 'rewind.nowhere'" in log, log[-3000:]
    assert registry.read_text() == before


def test_registry_error_is_an_import_error_naming_file_and_key(airflow_env: dict[str, str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bad = tmp_path / "streams.yaml"
    bad.write_text("streams:\n  demo:\n    topics: [t]\n    transform: a.b:c\n    sink: {url: 'sqlite://'}\n"
                   "    checkpoint: /tmp/x\n    status_dir: /tmp/y\n    trigerr: 2 seconds\n")
    monkeypatch.setenv("REWIND_REGISTRY", str(bad))
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert not bag.dag_ids
    (err,) = bag.import_errors.values()
    assert str(bad) in err and "trigerr" in err


def _supervised_registry(tmp_path: Path, topic: str, platform: Any, monkeypatch: pytest.MonkeyPatch,
                         max_offsets: int = 500, restart: str = "{strategy: fixed-delay, max_attempts: 3, "
                                                                "delay: 1 seconds}", **extra: str) -> Path:
    """A one-stream registry (`sup`) in tmp_path, and the env dag.test() tasks need (platform,
    Spark and Kafka connections) set for this test."""
    from tests.harness.registry_templates import demo_stream, write_registry

    registry = write_registry(tmp_path / "streams.yaml", demo_stream(
        "sup", topic, tmp_path, max_offsets=max_offsets, trigger="2 seconds", restart=restart, **extra))
    for k, v in {**platform.env(), "REWIND_REGISTRY": str(registry), "REWIND_LAG_PROBE_S": "2",
                 "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                 "AIRFLOW_CONN_REWIND_KAFKA": json.dumps({"conn_type": "generic",
                                                          "extra": {"bootstrap": platform.kafka_bootstrap}})}.items():
        monkeypatch.setenv(k, v)
    return registry


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances()}


def _kill_hard(pid: int) -> None:
    """SIGKILL the driver and everything in its session (the spark-submit JVM too), and wait."""
    from rewind.runtime.processes import pid_alive

    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.mark.slow
def test_a_corrupted_checkpoint_is_repaired_and_a_driver_killed_between_runs_is_found_by_the_next_launch(
        airflow_env: dict[str, str], platform: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dag.test() of the supervisor against real Kafka/SeaweedFS/Spark, one stream launched through
    spark-submit, two recoveries in turn (one stream for both: they were two tests, each paying a launch,
    a catch-up and a proof of its own):

    1. the stream (process group) is SIGKILLed while the watch looks and, while it is down, the newest
       committed batch's offsets file is truncated: the supervisor rolls the checkpoint back, relaunches
       and the proof passes. (Every offsets file emptied, so that the supervisor's steps restore the
       newest savepoint: tests/test_chaos.py.)
    2. it is SIGKILLed between two supervisor runs (no watch looks), found dead by the next run's launch,
       recorded as a failure that counts towards the restart strategy, and relaunched. (A kill the watch
       sees, healed through a real Airflow: tests/test_airflow_stack.py.)

    Then every Kafka record is checked against the sink: exactly once across both."""
    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.control.status import read_status
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.paths import status_file
    from rewind.proof.verify import verify_stream
    from rewind.registry import load_registry
    from rewind.supervision.failures import read_failures
    from rewind.supervision.process_control import stop_stream, wait_caught_up

    topic = "sup-recover"
    registry = _supervised_registry(tmp_path, topic, platform, monkeypatch, max_offsets=400)
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=2400, partitions=2, malformed_every=60,
                                                  duplicate_every=45, id_prefix="c1"))
    spec = load_registry(registry).get("sup")
    cp = Path(spec.checkpoint)
    done: dict[str, Any] = {}

    def saboteur() -> None:
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                st = read_status(status_file(spec))
                batch = (st.last_batch_id or 0) if st and st.state == "running" else -1
                if batch >= 3:
                    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=1200, partitions=2,
                                                                  id_prefix="c2"))
                    assert st is not None
                    _kill_hard(st.pid)
                    last = inspect_checkpoint(cp).committed[-1]
                    f = cp / "offsets" / str(last)
                    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])
                    done.update(pid=st.pid, batch=last, at=time.time())
                    return
                time.sleep(0.3)
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            done["error"] = repr(exc)

    threading.Thread(target=saboteur, daemon=True).start()
    dag = _load(registry)["rewind_sup_supervisor"]
    run = dag.test(run_conf={"chain": False, "watch_s": 600})
    try:
        # 1. the checkpoint corrupted while down, repaired
        states = _states(run)
        assert "error" not in done and "pid" in done, f"{done}; tasks: {states}"
        assert states["recover_checkpoint"] == "success" and states["prove"] == "success", states
        records = list(Path(f"{cp}.quarantine").glob("*/record.json"))
        assert records, "repair left no quarantine record"
        moved = json.loads(records[0].read_text())["moved"]
        assert any(m["file"] == f"offsets/{done['batch']}" for m in moved), moved
        st = read_status(status_file(spec))
        assert st and st.pid != done["pid"] and st.state == "running"
        wait_caught_up(spec, platform.kafka_bootstrap, timeout=300)

        # 2. killed between two supervisor runs, found by the next launch
        produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=1000, partitions=2, id_prefix="s3"))
        st = read_status(status_file(spec))
        assert st and st.state == "running"
        before = read_failures(spec)["failures"]
        _kill_hard(st.pid)
        dead = read_status(status_file(spec))  # it may have committed a batch since `st`
        assert dead and dead.pid == st.pid, dead
        assert read_failures(spec)["failures"] == before  # no watch looked: nothing recorded yet
        states = _states(dag.test(run_conf={"chain": False, "watch_s": 5}))
        assert states["launch"] == "success", states
        failures = read_failures(spec)["failures"]
        assert len(failures) == len(before) + 1 and failures[-1]["cause"] == "process_gone", failures
        assert "found gone at launch" in failures[-1]["detail"] and failures[-1]["batch_id"] == dead.last_batch_id
        now = read_status(status_file(spec))
        assert now and now.pid != st.pid and now.state == "running", now
        wait_caught_up(spec, platform.kafka_bootstrap, timeout=300)
    finally:
        stop_stream(spec, timeout=90)
    report = verify_stream(spec, platform.kafka_bootstrap)
    assert report.ok, str(report)
    assert report.kafka_records >= 4600  # plus the producer's deliberate duplicates


@pytest.mark.slow
def test_crash_loop_stops_after_configured_attempts_and_skips_nothing(
        airflow_env: dict[str, str], platform: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 2 always fails (a poison batch). With max_attempts 1 the supervisor restarts once,
    then fails the relaunch task naming the batch, its offsets and the exception, and refuses to
    launch again until reset. After the fix (the poison removed) and a reset, the stream resumes
    from the same offsets and every Kafka record reaches the sink exactly once."""
    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.proof.verify import verify_stream
    from rewind.registry import load_registry
    from rewind.supervision.failures import read_failures
    from rewind.supervision.process_control import stop_stream, wait_caught_up

    topic = "crash-loop"
    registry = _supervised_registry(tmp_path, topic, platform, monkeypatch, max_offsets=300,
                                    restart="{strategy: fixed-delay, max_attempts: 1, delay: 1 seconds}")
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=1500, partitions=2, id_prefix="p"))
    spec = load_registry(registry).get("sup")
    from rewind.faults import ENV, Fault, arm

    monkeypatch.setenv(ENV, arm(Fault("batch.write", "raise", batch=2))[ENV])  # a poison batch
    dags = _load(registry)
    started = time.monotonic()
    run = dags["rewind_sup_supervisor"].test(run_conf={"chain": False, "watch_s": 600})
    states = _states(run)
    print(f"[crash loop] gave up after {time.monotonic() - started:.0f}s: {states}")
    assert states["relaunch"] == "failed" and states["prove"] != "success", states
    history = read_failures(spec)
    assert [f["batch_id"] for f in history["failures"]] == [1, 1], history["failures"]
    reason = history["gave_up"]["reason"]
    cause, _, rest = reason.partition(" -- ")  # the exception's own line first, then the batch and offsets
    assert cause.startswith("crash loop: ") and "fault point batch.write (batch 2) raised" in cause, reason
    assert "Traceback" not in reason and "File \"" not in reason, reason  # the traceback is in the log, not here
    assert "2 failures in a row without committing past batch 1" in rest and topic in rest, reason
    report = inspect_checkpoint(spec.checkpoint)
    assert report.committed[-1] == 1 and 2 in report.planned  # batch 2 planned, never committed: nothing skipped

    # No launch behind a person's back while the verdict stands.
    run = dags["rewind_sup_supervisor"].test(run_conf={"chain": False, "watch_s": 5})
    assert _states(run)["launch"] == "failed"

    shown = subprocess.run([str(Path(sys.executable).parent / "rewind"), "supervisor", "status", "sup",
                            "--registry", str(registry)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 1, shown.stderr  # not healthy
    assert "GAVE UP" in shown.stdout and "rewind supervisor reset sup" in shown.stdout, shown.stdout

    monkeypatch.delenv(ENV)  # the fix
    run = dags["rewind_sup_supervisor"].test(run_conf={"chain": False, "watch_s": 5, "reset": True})
    try:
        states = _states(run)
        assert states["launch"] == "success", states
        wait_caught_up(spec, platform.kafka_bootstrap, timeout=300)
    finally:
        stop_stream(spec, timeout=90)
    result = verify_stream(spec, platform.kafka_bootstrap)
    assert result.ok and result.kafka_records == 1500, str(result)


@pytest.mark.slow
def test_replay_dag_restores_lost_rows_and_proves_them(airflow_env: dict[str, str], platform: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The on-call path through Airflow: rows of a range are lost from the sink; a dry run through
    the form plans it and changes nothing; the real run replays it through spark-submit, stores the
    report with a passing proof, and the sink again holds every Kafka record exactly once."""
    import sqlalchemy as sa

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import open_sink
    from rewind.proof.verify import verify_stream
    from rewind.registry import load_registry

    topic = "replay-dag"
    registry = _supervised_registry(tmp_path, topic, platform, monkeypatch, max_offsets=2000)
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=3000, partitions=2, malformed_every=50,
                                                  duplicate_every=40, id_prefix="r"))
    spec = load_registry(registry).get("sup")
    subprocess.run([str(Path(sys.executable).parent / "rewind"), "stream", "run", "sup", "--registry", str(registry),
                    "--bootstrap", platform.kafka_bootstrap, "--available-now"], check=True, timeout=600,
                   capture_output=True)
    assert verify_stream(spec, platform.kafka_bootstrap).ok
    sink = open_sink(spec)
    with sink.engine.begin() as conn:
        lost = conn.execute(sa.text(f'DELETE FROM {sink.table_name("events")} WHERE "partition" = 0 '
                                    'AND "offset" >= 100 AND "offset" < 600')).rowcount
    assert lost > 400 and not verify_stream(spec, platform.kafka_bootstrap).ok

    dag = _load(registry)["rewind_replay"]
    form = {"stream": "sup", "from": "100", "to": "600", "partitions": "0"}
    states = _states(dag.test(run_conf=form))  # dry run (the form's default)
    assert states["plan"] == "success" and states["replay"] == "skipped", states
    assert not verify_stream(spec, platform.kafka_bootstrap).ok

    states = _states(dag.test(run_conf={**form, "dry_run": False, "replay_id": "dag-fix"}))
    assert states["replay"] == "success", states
    report = json.loads((tmp_path / "replays" / "sup" / "dag-fix" / "report.json").read_text())
    assert report["status"] == "ok" and report["proof"]["ok"], report
    assert report["counts"]["written"]["events"] == lost, report["counts"]
    result = verify_stream(spec, platform.kafka_bootstrap)
    assert result.ok, str(result)


@pytest.mark.slow
def test_lag_over_the_threshold_alerts_and_never_starts_a_second_driver(
        airflow_env: dict[str, str], platform: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """supervision.max_lag set and a backlog far above it: the watch fires an alert, the run fails
    visibly (no retry), the alert is recorded (not a failure), and the one driver keeps running: no
    relaunch, no second spark-submit on its checkpoint (before the fix, the lag was recorded as a
    failure and `relaunch` started a second driver). A second run within alert_every stays quiet."""
    from rewind.control.status import read_status
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.paths import status_file
    from rewind.registry import load_registry
    from rewind.supervision.failures import read_failures
    from rewind.supervision.process_control import stop_stream

    topic = "sup-lag"
    registry = _supervised_registry(tmp_path, topic, platform, monkeypatch, max_offsets=50,
                                    supervision="{max_lag: 100, alert_every: 10 min, startup_grace: 5 min}")
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=6000, partitions=2, id_prefix="lag"))
    spec = load_registry(registry).get("sup")
    dag = _load(registry)["rewind_sup_supervisor"]
    try:
        run = dag.test(run_conf={"chain": False, "watch_s": 240})
        states = _states(run)
        assert states["watch"] == "success" and states["diagnose"] == "failed", states
        assert states["relaunch"] in ("upstream_failed", "skipped"), states
        st = read_status(status_file(spec))
        assert st is not None and st.state == "running" and st.total_lag > 100
        doc = read_failures(spec)
        assert doc["failures"] == [] and [a["cause"] for a in doc["alerts"]] == ["lag_over_threshold"], doc
        pid = st.pid
        run2 = dag.test(run_conf={"chain": False, "watch_s": 8})  # within alert_every: quiet
        assert _states(run2)["diagnose"] == "skipped", _states(run2)
        st2 = read_status(status_file(spec))
        assert st2 is not None and st2.pid == pid, "a second driver was started"
        assert len(read_failures(spec)["alerts"]) == 1
    finally:
        stop_stream(spec, timeout=90)
