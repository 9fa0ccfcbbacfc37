"""The exactly-once crash scenario: the demo stream as a real process, killed while events flow, then proven.

A producer writes the demo's events (with malformed, late and duplicate records) while the stream
runs; each run is killed once it has committed a new batch: the first at a named commit point of its
sink if asked (``rewind.faults``: the driver SIGKILLs its own process group there), the others at a
random moment. A last run catches up to the true end of the topic and stops gracefully, and
``verify_stream`` checks every Kafka record against the sink and its dead letters (and every window
total against a recomputation).
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast
from unittest import mock

from harness.processes import StreamProcess, no_batch_in_flight, wait_for
from rewind.checkpoints.pointer import active_checkpoint
from rewind.control.status import StreamStatus
from rewind.control.status_store import read_stream_status
from rewind.demo.producer import ProduceSpec, produce
from rewind.driver.scratch import own_name
from rewind.embedded.services import PlatformInfo
from rewind.faults import Fault, arm
from rewind.kafka.lookups import true_end_offsets
from rewind.proof.verify import verify_stream
from rewind.registry import load_registry
from rewind.storage import S3Config
from tests.harness.registry_templates import demo_stream, write_registry

EVENTS = int(os.environ.get("REWIND_CRASH_EVENTS", "24000"))


def crash_registry(path: Path, name: str, topic: str, sink_url: str, home: Path, source: str = "kafka",
                   write_from: str = "driver", checkpoint: str | None = None, max_offsets: int = 8000) -> Path:
    """The crash scenario's stream: the demo transform on 3 partitions, 5 s windows, 30 s watermark."""
    extra = {"checkpoint": checkpoint} if checkpoint else {}
    return write_registry(path, demo_stream(
        name, topic, home, partitions="3", trigger="1 second", window="5 seconds", watermark_delay="30 seconds",
        allowed_lateness="20 seconds",
        source=f"{{format: {source}, options: {{startingOffsets: earliest, maxOffsetsPerTrigger: {max_offsets}}}}}",
        sink=f'{{url: "{sink_url}", table_prefix: {name}_, write_from: {write_from}}}', **extra))


Reader = Callable[[], StreamStatus | None]
Scenario = Callable[..., dict[str, Any]]


def _new_batch(read: Reader, before: int | None) -> Callable[[], bool]:
    return lambda: (st := read()) is not None and st.last_batch_id is not None \
        and st.last_batch_id != before and st.state == "running"


def _new_batch_or_at_the_end(read: Reader, before: int | None, producer: threading.Thread, bootstrap: str,
                             topic: str) -> Callable[[], bool]:
    """A new batch; or, once every event was sent, the stream running at the topic's end (a slow machine may
    have let an earlier run read everything: a run with nothing left to read plans no batch)."""
    new = _new_batch(read, before)
    return lambda: new() or _at_the_end(read, producer, bootstrap, topic)


def _at_the_end(read: Reader, producer: threading.Thread, bootstrap: str, topic: str) -> bool:
    """Every event was sent and the running stream has committed up to the topic's end."""
    if producer.is_alive() or (st := read()) is None or st.state != "running":
        return False
    ends = {str(tp.partition): off for tp, off in true_end_offsets(bootstrap, topic).items()}
    return {p: int(o) for p, o in st.end_offsets.get(topic, {}).items()} == ends


def _batch_after(read: Reader, before: int | None, producer: threading.Thread, bootstrap: str, topic: str,
                 tag: str) -> Callable[[], bool]:
    """A batch committed after ``before``. When every event was sent and the stream is at the topic's end (a
    slow machine let the kills run past the producer), ten more events are sent once, so that a batch must
    come: the claim "a batch commits after it" needs records to commit."""
    new = _new_batch(read, before)
    sent: list[bool] = []

    def check() -> bool:
        if new():
            return True
        if not sent and _at_the_end(read, producer, bootstrap, topic):
            produce(bootstrap, ProduceSpec(topic=topic, count=10, partitions=3, id_prefix=tag))
            sent.append(True)
        return False

    return check


def _last_batch(read: Reader) -> int | None:
    st = read()
    return st.last_batch_id if st else None


def _in_platform_env(run: Scenario) -> Scenario:
    """``run`` with the platform's settings (S3's endpoint and keys, Kafka) in this process's environment: the
    test process reads what the stream's processes write, an ``s3a://`` stream's status and checkpoint included."""
    @functools.wraps(run)
    def in_env(tmp_path: Path, platform: PlatformInfo, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with mock.patch.dict(os.environ, platform.env()):
            return run(tmp_path, platform, *args, **kwargs)

    return cast(Scenario, in_env)


def scratch_of_the_killed_drivers_is_gone(stream: str, driver_pid: int, killed: list[str]) -> None:
    """The running driver works in its own scratch directory (``rewind.driver.scratch``), where Spark keeps its
    files; the killed drivers' directories (``killed``: their names), which a SIGKILL leaves, were removed when
    a later driver of the stream started."""
    from rewind.driver.scratch import scratch_root

    left = sorted(p.name for p in scratch_root(stream).iterdir())
    assert own_name(driver_pid) in left and not set(killed) & set(left), (left, own_name(driver_pid), killed)
    assert any(scratch_root(stream).glob(f"{own_name(driver_pid)}/spark-*")), f"Spark kept nothing in {left}"


@_in_platform_env
def run_crash_scenario(tmp_path: Path, platform: PlatformInfo, topic: str, sink_url: str, name: str, *,
                       source: str = "kafka", precommit_kill_batch: int | None = None, write_from: str = "driver",
                       kill_workers: bool = False, checkpoint: str | None = None, env: dict[str, str] | None = None,
                       mid_run: Callable[[StreamProcess, int], dict[str, Any] | None] | None = None,
                       events: int = EVENTS, driver_kills: int = 1, produce_s: float = 45.0) -> dict[str, Any]:
    """Run the scenario and prove it; the verify summary with the kills is returned (and in report.json).

    ``precommit_kill_batch``: the first run dies at fault point ``sink.pre_committed`` of that batch
    (a Kafka sink's flushed open transaction, SQL rows inside the open transaction, Delta's merged
    tables before the ledger row). ``kill_workers``: in every killed run the Python workers running
    the stream's tasks are SIGKILLed first (the master is ``local[2,4]``: four attempts per task, as
    on a cluster) and a batch must commit after it. ``driver_kills``: runs killed at a random moment
    (mid-batch, mid-commit or idle). ``checkpoint`` (e.g. ``s3a://``) and ``env`` go to every run;
    ``mid_run(stream, run)`` is called in each randomly killed run after its first new batch; when
    it did something it returns what, and a batch must commit after it; with ``driver_kills=0`` it is
    called in the last run instead, after its first new batch, before the catch-up (a scenario whose
    random kills are proven elsewhere saves a whole run). ``produce_s``: how long the
    events take to send (a ``mid_run`` that restarts the stream needs them to flow longer)."""
    home = tmp_path / "home"
    registry = crash_registry(tmp_path / "streams.yaml", name, topic, sink_url, home, source, write_from, checkpoint)
    spec = load_registry(registry).get(name)
    def read() -> StreamStatus | None:  # the status in the stream's control store (S3 beside an s3a:// checkpoint)
        return read_stream_status(spec)

    rng = random.Random(int(os.environ.get("REWIND_CRASH_SEED", "7")))

    produced: dict[str, Any] = {}
    # 45 s of events (``produce_s``): longer than the 30 s watermark delay, so windows close before the end
    pspec = ProduceSpec(topic=topic, count=events, rate=events / produce_s, partitions=3, id_prefix=name,
                        malformed_every=97, late_every=211, duplicate_every=53, late_by=timedelta(hours=1))
    producer = threading.Thread(target=lambda: produced.update(
        produce(platform.kafka_bootstrap, pspec).summary()), daemon=True)
    producer.start()

    stream = StreamProcess(registry, name, platform.kafka_bootstrap, tmp_path, env={**platform.env(), **(env or {})})
    master = {"REWIND_SPARK_MASTER": "local[2,4]"} if kill_workers and not (env or {}).get("REWIND_SPARK_MASTER") \
        else {}
    kills: list[dict[str, Any]] = []
    killed: list[str] = []  # the killed drivers' scratch directories (rewind.driver.scratch)
    try:
        if precommit_kill_batch is not None:
            marker = tmp_path / "precommit-kill.json"
            stream.start(**arm(Fault("sink.pre_committed", "kill", batch=precommit_kill_batch, marker=str(marker))),
                         **master)
            killed.append(own_name(stream.pid))  # while it runs: it kills itself at the pre-commit
            wait_for(lambda: not stream.alive(), 480, f"the kill at the pre-commit of batch {precommit_kill_batch}",
                     stream, exit_ok=True)
            assert marker.exists(), f"the driver died before its pre-commit kill:\n{stream.log_tail()}"
            kills.append({"run": stream.runs, "killed_between_pre_commit_and_commit": json.loads(marker.read_text())})
        for _ in range(driver_kills):
            stream.start(**master)
            wait_for(_new_batch_or_at_the_end(read, _last_batch(read), producer, platform.kafka_bootstrap, topic), 240,
                     "a new batch", stream)
            if kill_workers:
                time.sleep(rng.uniform(0.2, 1.5))
                workers = stream.python_workers()
                for pid in workers:
                    os.kill(pid, signal.SIGKILL)
                wait_for(_batch_after(read, _last_batch(read), producer, platform.kafka_bootstrap, topic,
                                      f"{name}-w{stream.runs}"), 240, "a batch after the Python workers were killed",
                         stream)
                kills.append({"run": stream.runs, "python_workers_killed": len(workers)})
            done = mid_run(stream, stream.runs) if mid_run is not None else None
            if done:
                wait_for(_batch_after(read, _last_batch(read), producer, platform.kafka_bootstrap, topic,
                                      f"{name}-m{stream.runs}"), 240, f"a batch after {done}", stream)
                kills.append({"run": stream.runs, **done})
            time.sleep(rng.uniform(0.5, 4.0))  # a random moment: mid-batch, mid-commit or idle
            seen = _last_batch(read)
            killed.append(own_name(stream.pid))
            stream.kill()
            kills.append({"run": stream.runs, "last_batch_seen": seen})
        producer.join(timeout=120)
        assert not producer.is_alive(), "producer did not finish"
        # The last run: catch up to the true end of the topic, let the watermark close windows, stop gracefully.
        ends = {str(tp.partition): off for tp, off in true_end_offsets(platform.kafka_bootstrap, topic).items()}
        stream.start(**master)
        if mid_run is not None and driver_kills == 0:  # the last run is the one mid_run acts in
            wait_for(_new_batch_or_at_the_end(read, _last_batch(read), producer, platform.kafka_bootstrap, topic),
                     240, "a new batch", stream)
            done = mid_run(stream, stream.runs)
            if done:
                wait_for(_batch_after(read, _last_batch(read), producer, platform.kafka_bootstrap, topic,
                                      f"{name}-m{stream.runs}"), 240, f"a batch after {done}", stream)
                kills.append({"run": stream.runs, **done})
            # mid_run may have sent records of its own (a load while it hunts): the true end is after them
            ends = {str(tp.partition): off for tp, off in true_end_offsets(platform.kafka_bootstrap, topic).items()}
        started = time.time()
        s3 = S3Config.from_platform(platform) if spec.checkpoint.startswith("s3") else None
        # Quiet for 4 s at the true end (of the checkpoint the stream runs on: a restore or a rescale
        # in mid_run may have pointed it elsewhere). A killed run may already have committed the last records:
        # then this run starts at the end, runs no batch, and Spark reports no progress at all.
        wait_for(lambda: (st := read()) is not None and st.state == "running"
                 and {p: int(o) for p, o in st.end_offsets.get(topic, {}).items()} == ends
                 and time.time() - (st.last_batch_at or started) > 4
                 and no_batch_in_flight(active_checkpoint(spec), s3), 300, f"catch-up to {ends}", stream)
        scratch_of_the_killed_drivers_is_gone(name, stream.pid, killed)
        assert stream.stop() == 0, f"the stream did not stop gracefully:\n{stream.log_tail()}"
    finally:
        stream.stop()
    report = verify_stream(spec, platform.kafka_bootstrap)
    summary = report.summary()
    summary["kills"] = kills
    summary["produced"] = produced
    (tmp_path / "report.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({k: summary[k] for k in ("kafka_records", "distinct_events", "duplicate_sends",
                                              "expected_dead_letters", "sink_events", "sink_dead_letters",
                                              "windows_checked", "ok")}))
    print(json.dumps(kills, default=str))
    assert len([k for k in kills if "last_batch_seen" in k]) == driver_kills
    if kill_workers:
        assert sum(k.get("python_workers_killed", 0) for k in kills) > 0, "no Python worker was killed"
    assert report.kafka_records >= events
    assert report.expected_dead_letters > 0 and report.duplicate_sends > 0, "faults were not injected"
    assert report.windows_checked > 0, "no window results to reconcile"
    assert report.ok, str(report)
    return summary

