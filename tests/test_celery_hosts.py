"""Rewind under Airflow with the CeleryExecutor, its two workers on two hosts.

The control node (api-server, scheduler, dag-processor, triggerer; PostgreSQL, Redis) runs here;
each Celery worker runs on its own host (``tests.harness.hosts``: own PID, mount and UTS
namespaces, a private tmpfs home with its own ``REWIND_HOME``). The hosts share only Kafka, S3
(the stream's control store), the checkpoint directory and the sink. The tests run in order on one
stream, as an operator's week would:

1. the supervisor launches the stream on one worker; that worker is killed and the stream keeps
   running; its driver is SIGKILLed and the recovery runs on the other worker (the task instances'
   hostnames in Airflow's database say so), with the next epoch of the lease in the S3 control store;
2. a savepoint, a DQ proof and a replay run on the worker that did not launch the stream;
3. the data: every Kafka record exactly once (0 duplicates, 0 missing), and the checkpoint whole.

A zombie driver (SIGSTOPped mid-batch on a host cut off, another host's driver holding the next
epoch, then SIGCONTed) commits nothing, logs the fenced line, exits and leaves the status and the
checkpoint alone: proven end to end by ``tests/test_hosts_fencing.py`` (the taker a standby on the
other host). It was proven here a second time, with supervision as the taker (81 s of CI); the
taker's path (a relaunch on the other host once the lease lapsed) is step 1's, and the S3 store's
conditional writes under racing writers are ``tests/test_control_store.py``'s.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rewind.demo.producer import ProduceSpec, produce
from rewind.embedded.services import PlatformInfo
from tests.harness import hosts
from tests.harness.celery_airflow import CeleryAirflow, redis_available
from tests.harness.registry_templates import demo_stream, write_registry

ROOT = Path(__file__).resolve().parents[1]
NAME = "fleet"
SUPERVISOR = f"rewind_{NAME}_supervisor"
TTL_S = 8.0
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hosts.available(), reason="needs root, unshare and nsenter")]


def wait_for(what: str, check: Callable[[], Any], timeout: float, poll: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="module")
def fleet(platform: PlatformInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from rewind.registry import load_registry
    from rewind.runtime.jvm import rewind_jar
    from tests.harness.pg_install import postgres_available

    if not redis_available() or not postgres_available():
        message = "the Celery stack needs redis-server and PostgreSQL (apt-get install redis-server postgresql)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs them")
        pytest.skip(message)
    root = tmp_path_factory.mktemp("fleet")
    shared, private = root / "shared", root / "host"
    shared.mkdir()
    private.mkdir()
    saved = {k: os.environ.get(k) for k in (*platform.env(), "REWIND_JVM_CACHE")}
    os.environ.update({**platform.env(), "REWIND_JVM_CACHE": str(shared / "jvm")})  # the test reads the store too
    rewind_jar()
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"fleet-{root.name[-8:]}"
    admin = AdminClient({"bootstrap.servers": platform.kafka_bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        fut.result(timeout=15)
    registry = write_registry(shared / "streams.yaml", demo_stream(
        NAME, topic, shared, max_offsets=400, sink_url=f"sqlite:///{shared}/sink.db", trigger='"1 second"',
        status_dir="${REWIND_HOME}/status", control=f"s3://{platform.bucket}/control/{root.name}",
        restart="{strategy: fixed-delay, max_attempts: 20, delay: 1 seconds}",
        supervision="{poll: 1 seconds, heartbeat_timeout: 60 seconds, startup_grace: 3 min}"))
    env = {"PYTHONPATH": str(ROOT), "REWIND_REGISTRY": str(registry), "REWIND_HOME": str(root / "control-home"),
           "REWIND_LEASE_TTL_S": str(TTL_S), "REWIND_JVM_CACHE": str(shared / "jvm"), "REWIND_LAG_PROBE_S": "2",
           "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "")}
    workers = {name: hosts.Host(name, [private]).start() for name in ("worker-a", "worker-b")}
    stack = CeleryAirflow(root / "stack", env, platform, workers, ROOT / "dags", root / "plugins",
                          worker_env={n: {"REWIND_HOME": str(private / "home")} for n in workers})
    try:
        stack.start()
        assert stack.airflow is not None
        client = stack.airflow.client()
        client.wait_dag(SUPERVISOR, timeout=180)
        yield {"stack": stack, "client": client, "hosts": workers, "spec": load_registry(registry).get(NAME),
               "topic": topic, "private": private, "shared": shared, "timings": {}}
    finally:
        stack.stop()
        for host in workers.values():
            host.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def task_logs(fleet: dict[str, Any], dag_id: str) -> str:
    """Every task log of ``dag_id``'s runs, from every worker (for a failure's message)."""
    out = []
    for run in fleet["client"].dag_runs(dag_id):
        for t in fleet["client"].task_instances(dag_id, run["dag_run_id"]):
            for name in fleet["hosts"]:
                text = fleet["stack"].task_log(name, dag_id, run["dag_run_id"], t["task_id"])
                if text and t["state"] not in ("success", "skipped"):
                    out.append(f"--- {name} {run['dag_run_id']} {t['task_id']} {t['state']}\n{text[-3000:]}")
    return "\n".join(out)


def wait_supervised(fleet: dict[str, Any], what: str, check: Callable[[], Any], timeout: float) -> Any:
    """``wait_for`` that says what the supervisor's failed tasks logged when it times out."""
    try:
        return wait_for(what, check, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{task_logs(fleet, SUPERVISOR)}") from None


def watching(fleet: dict[str, Any]) -> bool:
    """The newest supervisor run is deferred on its watch (and no task of the supervisor runs)."""
    runs = fleet["client"].dag_runs(SUPERVISOR)
    if not runs:
        return False
    states = {t["task_id"]: t["state"] for t in fleet["client"].task_instances(SUPERVISOR, runs[-1]["dag_run_id"])}
    return states.get("watch") == "deferred"


def status(fleet: dict[str, Any]) -> Any:
    from rewind.control.status_store import read_stream_status

    return read_stream_status(fleet["spec"])


def task_hosts(fleet: dict[str, Any], dag_id: str, run_id: str) -> dict[str, str]:
    return {t["task_id"]: t.get("hostname") or "" for t in fleet["client"].task_instances(dag_id, run_id)}


def successful(fleet: dict[str, Any], dag_id: str, task_id: str) -> list[tuple[str, str]]:
    """(run id, hostname) of every run of ``dag_id`` whose ``task_id`` succeeded, oldest first."""
    out = []
    for run in fleet["client"].dag_runs(dag_id):
        for t in fleet["client"].task_instances(dag_id, run["dag_run_id"]):
            if t["task_id"] == task_id and t["state"] == "success":
                out.append((run["dag_run_id"], t.get("hostname") or ""))
    return out


def driver_processes(fleet: dict[str, Any], host: str) -> list[Any]:
    return fleet["hosts"][host].processes("spark_jobs/stream.py")


def kill_driver(fleet: dict[str, Any], host: str) -> None:
    """SIGKILL every process of the stream's driver on ``host`` (spark-submit, its JVM, the Python driver)."""
    pgids = {group for p in driver_processes(fleet, host) if (group := _or_none(os.getpgid, p.pid)) is not None}
    assert pgids, f"no driver on {host}"
    for pgid in pgids:
        os.killpg(pgid, signal.SIGKILL)


def feed(fleet: dict[str, Any], platform: PlatformInfo, count: int, rate: float, prefix: str) -> threading.Thread:
    spec = ProduceSpec(topic=fleet["topic"], count=count, rate=rate, partitions=3, id_prefix=prefix, keyless=True,
                       malformed_every=97, late_every=211, duplicate_every=53, late_by=timedelta(hours=1))
    thread = threading.Thread(target=produce, args=(platform.kafka_bootstrap, spec), daemon=True)
    thread.start()
    fleet.setdefault("producers", []).append(thread)
    return thread


def test_launch_and_recovery_run_on_different_workers_and_a_lost_worker_loses_no_stream(
        fleet: dict[str, Any], platform: PlatformInfo) -> None:
    client, stack = fleet["client"], fleet["stack"]
    produce(platform.kafka_bootstrap, ProduceSpec(topic=fleet["topic"], count=600, partitions=3, id_prefix="seed",
                                                  keyless=True))
    client.unpause(SUPERVISOR)
    client.trigger_dag(SUPERVISOR, {"chain": True, "watch_s": 900})
    first = wait_supervised(fleet, "the stream running with batches", lambda: (st := status(fleet))
                            and st.state == "running" and (st.last_batch_id or -1) >= 1 and st, 400)
    launched_on = first.host
    run_id, launch_host = wait_for("the launch task's success", lambda: successful(fleet, SUPERVISOR, "launch"), 60)[0]
    assert launch_host == launched_on and launched_on in fleet["hosts"], (launch_host, launched_on)
    other = next(h for h in fleet["hosts"] if h != launched_on)
    feed(fleet, platform, 1500, 50, "p1")

    wait_supervised(fleet, "the supervisor watching", lambda: watching(fleet), 300)
    stack.kill_worker(launched_on)  # the worker that launched the stream is lost: the stream is not
    before = first.last_batch_id
    wait_for("the stream committing batches without its launching worker",
             lambda: (st := status(fleet)) and st.epoch == first.epoch and (st.last_batch_id or 0) >= before + 3, 120)
    assert driver_processes(fleet, launched_on), "the driver died with its worker"

    killed_at = time.time()
    kill_driver(fleet, launched_on)
    new = wait_supervised(fleet, "the stream relaunched on the other host",
                   lambda: (st := status(fleet)) and st.host == other and st.epoch == first.epoch + 1
                   and st.state == "running" and st.last_batch_at and st.last_batch_at > killed_at and st, 400)
    hosts_of = task_hosts(fleet, SUPERVISOR, run_id)
    print(json.dumps({"launch": hosts_of.get("launch"), "diagnose": hosts_of.get("diagnose"),
                      "relaunch": hosts_of.get("relaunch"),
                      "kill_to_first_batch_s": round(new.last_batch_at - killed_at, 1)}))
    assert hosts_of["launch"] == launched_on and hosts_of["relaunch"] == other and hosts_of["diagnose"] == other
    stack.start_worker(launched_on)
    fleet["driver_host"], fleet["idle_host"] = other, launched_on


def _or_none(call: Callable[[int], int], pid: int) -> int | None:
    """``call(pid)``, or None for a process that has exited since it was listed."""
    try:
        return call(pid)
    except (ProcessLookupError, PermissionError):
        return None


def test_a_savepoint_a_proof_and_a_replay_run_on_the_worker_that_did_not_launch_the_stream(
        fleet: dict[str, Any], platform: PlatformInfo) -> None:
    client, stack = fleet["client"], fleet["stack"]
    launcher, elsewhere = fleet["driver_host"], fleet["idle_host"]
    wait_supervised(fleet, "the supervisor watching again", lambda: watching(fleet), 600)
    stack.kill_worker(launcher)  # every task now runs on the other host
    savepoint, dq = f"rewind_{NAME}_savepoint", f"rewind_{NAME}_dq"
    runs = {savepoint: client.trigger_dag(savepoint, {"action": "savepoint"}), dq: client.trigger_dag(dq),
            "rewind_replay": client.trigger_dag("rewind_replay", {
                "stream": NAME, "from": "0", "to": "200", "mode": "into-sink", "dry_run": False})}
    for dag_id, run_id in runs.items():
        state = client.wait_dag_run(dag_id, run_id, timeout=600)
        assert state == "success", f"{dag_id}: {state}: {task_hosts(fleet, dag_id, run_id)}"
        where = {h for h in task_hosts(fleet, dag_id, run_id).values() if h}
        assert where == {elsewhere}, f"{dag_id} ran on {where}, not only on {elsewhere}"
    stack.start_worker(launcher)


def test_every_record_landed_once(fleet: dict[str, Any], platform: PlatformInfo) -> None:
    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.kafka.lookups import true_end_offsets
    from rewind.proof.verify import committed_bounds, verify_stream

    for thread in fleet.get("producers", []):
        thread.join(timeout=120)
    ends = {str(tp.partition): o for tp, o in true_end_offsets(platform.kafka_bootstrap, fleet["topic"]).items()}
    st = wait_for(f"the stream caught up to {ends}", lambda: (s := status(fleet)) and {
        p: int(o) for p, o in s.end_offsets.get(fleet["topic"], {}).items()} == ends and s, 300)
    report = verify_stream(fleet["spec"], platform.kafka_bootstrap, committed_bounds(st.end_offsets))
    print(json.dumps({k: report.summary()[k] for k in ("kafka_records", "sink_events", "sink_dead_letters",
                                                       "duplicate_event_rows", "ok")}))
    assert report.kafka_records >= 2100 and report.duplicate_event_rows == 0 and not report.missing_events
    assert report.ok, str(report)
    assert inspect_checkpoint(Path(fleet["spec"].checkpoint)).errors == []
