"""End to end with a real Airflow (api-server, scheduler, dag-processor, triggerer): the supervisor,
started through the REST API, heals a stream SIGKILLed twice, and its DQ proof passes."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rewind.demo.producer import ProduceSpec, produce
from rewind.paths import status_path
from rewind.proof.verify import verify_stream
from rewind.registry import load_registry
from rewind.stream.control import stop_stream, wait_caught_up
from rewind.stream.status import read_status
from rewind.supervision.failures import read_failures
from rewind.testing.registry_templates import demo_stream, write_registry


def _wait(what: str, check: Callable[[], Any], timeout: float, poll: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.mark.slow
def test_supervisor_heals_two_kills_through_real_airflow(airflow_factory, platform, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = "e2e-events"
    registry = write_registry(tmp_path / "streams.yaml", demo_stream(
        "e2e", topic, tmp_path, max_offsets=500, trigger="1 second",
        restart="{strategy: fixed-delay, max_attempts: 5, delay: 1 seconds}"))
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=2000, partitions=2, malformed_every=50,
                                                  duplicate_every=40, id_prefix="e0"))
    spec = load_registry(registry).get("e2e")
    af = airflow_factory(env={"REWIND_REGISTRY": str(registry)})
    client = af.client()
    dag_id = "rewind_e2e_supervisor"
    client.wait_dag(dag_id, timeout=120)
    client.unpause(dag_id)
    first_run = client.trigger_dag(dag_id, {"chain": True, "watch_s": 900})
    status_file = status_path(spec.status_dir, "e2e")
    timings: list[dict[str, float]] = []
    try:
        def watching() -> bool:  # the newest supervisor run is deferred on the health trigger
            runs = client.dag_runs(dag_id)
            return bool(runs) and any(t["task_id"] == "watch" and t["state"] == "deferred"
                                      for t in client.task_instances(dag_id, runs[-1]["dag_run_id"]))

        for kill in (1, 2):
            _wait(f"the supervisor watching (kill {kill})", watching, 400, poll=1)
            st = _wait(f"the stream running with batches (kill {kill})",
                       lambda: (s := read_status(status_file)) and s.state == "running"
                       and (s.last_batch_id or 0) >= 2 and s or None, 300)
            produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=800, partitions=2,
                                                          id_prefix=f"e{kill}"))
            killed_at = time.time()
            os.kill(st.pid, signal.SIGKILL)
            failure = _wait("the failure recorded by the supervisor",
                            lambda: next((f for f in read_failures(spec)["failures"] if f["at"] > killed_at), None),
                            120)
            new = _wait("a relaunched stream committing a batch",
                        lambda: (s := read_status(status_file)) and s.pid != st.pid and s.state == "running"
                        and s.last_batch_at and s.last_batch_at > killed_at and s or None, 300)
            timings.append({"detect_s": failure["at"] - killed_at, "relaunch_s": new.started_at - killed_at,
                            "first_batch_s": new.last_batch_at - killed_at})
            assert failure["cause"] == "process_gone"
        def proven_runs() -> list[dict[str, Any]] | None:
            out = [r for r in client.dag_runs(dag_id)
                   if {t["task_id"]: t["state"] for t in client.task_instances(dag_id, r["dag_run_id"])}
                   .get("prove") == "success"]
            return out if len(out) >= 2 else None

        runs = _wait("two supervisor runs whose DQ proof passed", proven_runs, 300, poll=2)
        assert len(runs) >= 2 and runs[0]["dag_run_id"] == first_run
        print("[e2e recovery] " + json.dumps(timings))
        wait_caught_up(spec, platform.kafka_bootstrap, timeout=300)
    finally:
        client.pause(dag_id)
        stop_stream(spec, timeout=90)
        af.stop()  # an idle scheduler, dag-processor and triggerer would take CPU for the rest of the run
    report = verify_stream(spec, platform.kafka_bootstrap)
    assert report.ok, str(report)
    assert report.kafka_records >= 3600
