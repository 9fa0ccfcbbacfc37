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
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = ROOT / "dags" / "rewind_streams.py"


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A throwaway AIRFLOW_HOME with a migrated SQLite DB; set before Airflow is first imported."""
    home = tmp_path_factory.mktemp("airflow")
    env = {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
           "AIRFLOW__CORE__UNIT_TEST_MODE": "False"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    for p in (str(ROOT / "plugins"), str(ROOT / "dags")):
        if p not in sys.path:
            sys.path.insert(0, p)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                   env={**os.environ, **env}, timeout=300)
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _load(registry: Path | None = None) -> dict[str, Any]:
    from rewind_airflow.dag_factory import build_dags

    return build_dags(str(registry) if registry else None)


def test_dags_import_without_network(airflow_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a DAG file opened a network connection at parse time")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    dags = _load()
    assert set(dags) == {"rewind_demo_supervisor", "rewind_demo_savepoint", "rewind_demo_dq"}


def test_dagbag_has_no_import_errors(airflow_env: dict[str, str]) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    assert {"rewind_demo_supervisor", "rewind_demo_savepoint", "rewind_demo_dq"} <= set(bag.dag_ids)


def test_supervisor_task_graph(airflow_env: dict[str, str]) -> None:
    dag = _load()["rewind_demo_supervisor"]
    edges = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert edges == {
        "reset_if_asked": ["launch"], "launch": ["watch"], "watch": ["diagnose"],
        "diagnose": ["recover_checkpoint", "relaunch"], "recover_checkpoint": ["relaunch"], "relaunch": ["prove"],
        "prove": ["chain_enabled"], "chain_enabled": ["next_run"], "next_run": [],
    }
    assert dag.get_task("watch").__class__.__name__ == "WatchStreamOperator"
    assert dag.max_active_runs == 1 and dag.schedule is None or dag.timetable.summary in ("None", "")
    sp = _load()["rewind_demo_savepoint"]
    assert [sorted(t.downstream_task_ids) for t in sp.tasks if t.task_id == "take_savepoint"] == [["apply_retention"]]


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


@pytest.mark.slow
def test_supervisor_detects_sigkill_and_recovers_exactly_once(airflow_env: dict[str, str], platform: Any,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dag.test() of the supervisor against real Tansu/SeaweedFS/Spark: the stream is launched through
    spark-submit, SIGKILLed after its first batches, detected by the deferred trigger, relaunched,
    and the proof passes; then every Kafka record is checked against the sink."""
    from rewind.producer import ProduceSpec, produce
    from rewind.registry import load_registry
    from rewind.status import read_status, status_path
    from rewind.stream_control import stop_stream, wait_caught_up
    from rewind.verify import verify_stream

    topic = "sup-demo"
    registry = tmp_path / "streams.yaml"
    registry.write_text(f"""
streams:
  sup:
    topics: [{topic}]
    transform: rewind.demo.transform:build
    source: {{options: {{startingOffsets: earliest, maxOffsetsPerTrigger: 500}}}}
    sink: {{url: "sqlite:///{tmp_path}/sink.db", table_prefix: sup_}}
    checkpoint: {tmp_path}/checkpoints/sup
    status_dir: {tmp_path}/status
    trigger: 1 second
    restart: {{strategy: fixed-delay, max_attempts: 3, delay: 1 seconds}}
""")
    for k, v in {**platform.env(), "REWIND_REGISTRY": str(registry),
                 "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                 "AIRFLOW_CONN_REWIND_KAFKA": json.dumps({"conn_type": "generic",
                                                          "extra": {"bootstrap": platform.kafka_bootstrap}})}.items():
        monkeypatch.setenv(k, v)
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=3000, partitions=2, malformed_every=50,
                                                  duplicate_every=40, id_prefix="s1"))
    spec = load_registry(registry).get("sup")
    killed: dict[str, Any] = {}

    def killer() -> None:  # SIGKILL the driver once it has committed a few batches
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            st = read_status(status_path(spec.status_dir, "sup"))
            if st and st.state == "running" and (st.last_batch_id or 0) >= 2:
                produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=1500, partitions=2,
                                                              id_prefix="s2"))
                os.kill(st.pid, signal.SIGKILL)
                killed.update(pid=st.pid, batch=st.last_batch_id, at=time.time())
                return
            time.sleep(0.3)

    threading.Thread(target=killer, daemon=True).start()
    dag = _load(registry)["rewind_sup_supervisor"]
    run = dag.test(run_conf={"chain": False, "watch_s": 600})
    try:
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        assert killed, f"the stream never reached batch 2; tasks: {states}"
        assert str(run.state) in ("success", "DagRunState.SUCCESS"), states
        assert states["relaunch"].endswith("success") and states["prove"].endswith("success"), states
        st = read_status(status_path(spec.status_dir, "sup"))
        assert st and st.pid != killed["pid"] and st.state == "running"
        print(f"[recovery] killed pid {killed['pid']} at batch {killed['batch']}; now pid {st.pid}, "
              f"batch {st.last_batch_id}, detected+recovered in {st.started_at - killed['at']:.1f}s to relaunch")
        wait_caught_up(spec, platform.kafka_bootstrap, timeout=300)
    finally:
        stop_stream(spec, timeout=90)
    report = verify_stream(spec, platform.kafka_bootstrap)
    assert report.ok, str(report)
    assert report.kafka_records >= 4500
