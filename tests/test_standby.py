"""One driver per stream, and a warm standby that takes over when it is SIGKILLed.

The lock tests use real processes and no Spark. The end-to-end test runs the demo stream (keyless
records, the producer's default sticky partitioning, 4 partitions, malformed, late and duplicate
records), a standby beside it, SIGKILLs the driver's whole process group mid-stream, and proves
with the data that the standby's run lost nothing and wrote nothing twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from harness.crash import crash_registry as write_registry
from harness.processes import StreamProcess, wait_for

from rewind.control.directory import DirectoryStore
from rewind.control.driver_lease import read_standby
from rewind.control.leases import DriverBusy, acquire, me
from rewind.control.status import read_status
from rewind.demo.producer import ProduceSpec, produce
from rewind.embedded.services import PlatformInfo
from rewind.kafka.lookups import true_end_offsets
from rewind.paths import status_file
from rewind.proof.verify import verify_stream
from rewind.registry import load_registry
from rewind.supervision.process_control import stop_stream

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import sys, time
from rewind.control.directory import DirectoryStore
from rewind.control.leases import LeaseKeeper, acquire, me
store = DirectoryStore(sys.argv[1], sys.argv[2])
keeper = LeaseKeeper(store, *acquire(store, me(), 2.0, 0)).start()  # renewed every 0.5 s
print("held", flush=True)
time.sleep(600)
"""


def hold_lease(status_dir: Path, stream: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(status_dir), stream], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_driver_is_refused_naming_the_first(tmp_path: Path) -> None:
    holder = hold_lease(tmp_path, "orders")
    orders = DirectoryStore(tmp_path, "orders")
    try:
        with pytest.raises(DriverBusy) as err:  # 2.5 s: the holder renews, so its lease never lapses
            acquire(orders, me(), 2.0, 2.5)
        assert f"pid {holder.pid} on {socket.gethostname()} (epoch 1" in str(err.value)
        assert "--standby" in str(err.value) and "lease expires at" in str(err.value)
        assert err.value.exit_code == 3
        other = acquire(DirectoryStore(tmp_path, "payments"), me(), 2.0, 0)  # another stream is not affected
        assert other is not None and other[0].epoch == 1
    finally:
        holder.kill()
        holder.wait()
    got = acquire(orders, me(), 2.0, 0)  # its process gone on this host: taken at once, with the next epoch
    assert got is not None and got[0].epoch == 2


def test_a_waiting_standby_takes_over_when_the_holder_dies_and_can_be_stopped(tmp_path: Path) -> None:
    holder = hold_lease(tmp_path, "orders")
    orders = DirectoryStore(tmp_path, "orders")
    stop = threading.Event()
    idle: list[object] = []
    waiter = threading.Thread(target=lambda: idle.append(acquire(orders, me("standby"), 2.0, None, stop=stop)))
    waiter.start()
    time.sleep(1.0)
    stop.set()
    waiter.join(timeout=5)
    assert idle == [None], "a stopped standby must give up its wait without the lease"

    got: list[tuple[object, float]] = []
    woke = threading.Thread(target=lambda: got.append((acquire(orders, me("standby"), 2.0, None),
                                                       time.monotonic())))
    woke.start()
    time.sleep(3.0)  # longer than the TTL: the holder renews
    assert not got, "the standby took the lease while its holder was alive"
    killed = time.monotonic()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    woke.join(timeout=10)
    assert got and got[0][0] is not None, "the standby never got the lease after its holder died"
    print(json.dumps({"sigkill_to_lease_s": round(got[0][1] - killed, 4)}))
    assert got[0][1] - killed < 2.0, "a dead holder on the same host must not be waited out"


@pytest.mark.slow
def test_standby_takes_over_after_sigkill_exactly_once(tmp_path: Path, platform: PlatformInfo, new_topic) -> None:
    name = "standby_demo"
    topic = new_topic(4, "standby")
    home = tmp_path / "home"
    registry = write_registry(tmp_path / "streams.yaml", name, topic, f"sqlite:///{tmp_path}/sink.db", home)
    spec = load_registry(registry).get(name)
    spath = status_file(spec)
    events = 12_000
    seed = ProduceSpec(topic=topic, count=400, partitions=4, id_prefix="seed", keyless=True)
    produce(platform.kafka_bootstrap, seed)
    pspec = ProduceSpec(topic=topic, count=events, rate=events / 40, partitions=4, id_prefix="sb", keyless=True,
                        malformed_every=89, late_every=193, duplicate_every=47, late_by=timedelta(hours=1))
    produced: dict = {}
    producer = threading.Thread(target=lambda: produced.update(produce(platform.kafka_bootstrap, pspec).summary()),
                                daemon=True)

    (tmp_path / "driver").mkdir()
    (tmp_path / "standby").mkdir()
    (tmp_path / "second").mkdir()
    driver = StreamProcess(registry, name, platform.kafka_bootstrap, tmp_path / "driver", env=platform.env())
    standby = StreamProcess(registry, name, platform.kafka_bootstrap, tmp_path / "standby", env=platform.env())
    intruder = StreamProcess(registry, name, platform.kafka_bootstrap, tmp_path, env=platform.env())
    second = StreamProcess(registry, name, platform.kafka_bootstrap, tmp_path / "second", env=platform.env())
    try:
        driver.start()
        wait_for(lambda: (st := read_status(spath)) is not None and st.last_batch_id is not None
                 and st.state == "running", 180, "the driver's first batch", driver)
        standby.start("--standby")
        wait_for(lambda: read_standby(spec).get("state") == "ready", 180, "the standby ready", standby)
        ready = read_standby(spec)
        st = read_status(spath)
        assert st is not None and st.pid != ready["pid"], "the standby wrote the status before it took over"

        intruder.start(REWIND_DRIVER_WAIT_S="1")  # a second plain driver: refused, naming the first
        assert intruder.proc is not None and intruder.proc.wait(timeout=120) == 3
        refusal = (tmp_path / "stream-run1.log").read_text(errors="replace")
        assert "is already run by pid" in refusal and "--standby" in refusal, refusal[-2000:]

        producer.start()  # now, so that records keep arriving across the kill and the takeover
        mark = read_status(spath)
        assert mark is not None and mark.last_batch_id is not None
        wait_for(lambda: (st := read_status(spath)) is not None and st.last_batch_id is not None
                 and st.last_batch_id >= mark.last_batch_id + 2, 120, "two batches of the producer's", driver)
        time.sleep(random.uniform(0.0, 1.5))  # mid-batch or between batches
        before = read_status(spath)
        assert before is not None and before.last_batch_id is not None
        killed = time.time()
        driver.kill()
        wait_for(lambda: (st := read_status(spath)) is not None and st.pid == ready["pid"]
                 and st.last_batch_id is not None and st.last_batch_id > before.last_batch_id
                 and st.last_batch_at is not None, 180, "the standby's first batch", standby)
        took = read_status(spath)
        assert took is not None
        print(json.dumps({"sigkill_to_standby_driver_s": round(took.started_at - killed, 3),
                          "sigkill_to_first_new_batch_s": round((took.last_batch_at or 0) - killed, 3),
                          "standby_warm_up_s": ready["warm_up_s"], "batch_at_kill": before.last_batch_id}))
        log = (tmp_path / "standby" / "stream-run1.log").read_text(errors="replace")
        assert "takes over" in log and "warmed up" in log, log[-3000:]

        producer.join(timeout=120)
        assert not producer.is_alive(), "producer did not finish"
        ends = {str(tp.partition): off for tp, off in true_end_offsets(platform.kafka_bootstrap, topic).items()}
        wait_for(lambda: (st := read_status(spath)) is not None
                 and {p: int(o) for p, o in st.end_offsets.get(topic, {}).items()} == ends
                 and time.time() - (st.last_batch_at or 0) > 4, 300, f"catch-up to {ends}", standby)
        assert not read_standby(spec), "the standby's notice outlived the takeover"
        # A stop is a stop: a second standby, still warming up, is stopped first and never takes over.
        second.start("--standby")
        wait_for(lambda: read_standby(spec).get("state") == "warming", 60, "a second standby", second)
        assert stop_stream(spec, timeout=90)
        assert second.proc is not None and second.proc.wait(timeout=60) == 0
        assert standby.proc is not None and standby.proc.wait(timeout=60) == 0, "SIGTERM did not stop it cleanly"
        assert not read_standby(spec)
        assert "stopped before it was needed" in (tmp_path / "second" / "stream-run1.log").read_text(errors="replace")
        assert read_status(spath).state == "stopped"  # type: ignore[union-attr]
    finally:
        for p in (driver, standby, intruder, second):
            p.stop()
    report = verify_stream(spec, platform.kafka_bootstrap)
    print(json.dumps({k: report.summary()[k] for k in ("kafka_records", "sink_events", "sink_dead_letters",
                                                         "expected_dead_letters", "windows_checked", "ok")}))
    assert report.kafka_records >= events + seed.count
    assert report.expected_dead_letters > 0 and report.duplicate_sends > 0
    assert report.windows_checked > 0
    assert report.ok, str(report)


def test_the_supervisor_submits_a_standby_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``supervision: {standby: true}``: the launch task spark-submits ``stream.py NAME ... --standby``
    beside the driver; without it, no standby is launched."""
    from rewind_airflow.hooks.stream import RewindStreamHook
    from rewind_airflow.operators.supervision import launch_standby

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    plain = write_registry(tmp_path / "plain.yaml", "plain", "t", "sqlite:///x.db", tmp_path)
    warm = tmp_path / "warm.yaml"
    warm.write_text(plain.read_text().replace("plain", "warm") + "    supervision: {standby: true}\n")
    assert load_registry(warm).get("warm").supervision.standby
    assert not load_registry(plain).get("plain").supervision.standby
    assert launch_standby("plain", str(plain), "spark_default") == {}
    command = RewindStreamHook("warm", str(warm), "127.0.0.1:9092", standby=True).submit_command()
    assert command[-1] == "--standby" and "warm" in command
    assert "--standby" not in RewindStreamHook("warm", str(warm), "127.0.0.1:9092").submit_command()


def test_the_supervisor_learns_of_a_driver_exit_from_the_kernel() -> None:
    """``wait_exit`` (what the health trigger awaits between polls) returns when the process exits,
    not when its timeout runs out; a live process keeps it waiting the whole timeout."""
    import asyncio

    from rewind.runtime.processes import wait_exit

    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert asyncio.run(wait_exit(proc.pid, 0.3)) is False

        async def kill_then_wait() -> tuple[bool, float]:
            asyncio.get_running_loop().call_later(0.5, proc.kill)
            t = time.monotonic()
            exited = await wait_exit(proc.pid, 30.0)
            return exited, time.monotonic() - t

        exited, took = asyncio.run(kill_then_wait())
        assert exited and took < 30.0, "the exit was not noticed before the timeout"
        print(json.dumps({"kill_at_s": 0.5, "exit_noticed_after_s": round(took, 3)}))
    finally:
        proc.kill()
        proc.wait()
    assert asyncio.run(wait_exit(proc.pid, 0.1)) is True  # gone already


def test_a_dead_driver_with_a_live_standby_is_a_takeover_not_a_failure(tmp_path: Path) -> None:
    """The supervisor's observer counts a live standby (warming, ready, or holding the lock before
    its first status) as a live driver: a takeover must not start a restart beside it; and a
    checkpoint repair (or restore) is refused while either is there."""
    from rewind.control.driver_lease import mark_standby, take_driver_lease
    from rewind.control.location import control_store
    from rewind.control.status import StreamStatus, write_status
    from rewind.supervision.observe import observe, running_reason

    registry = write_registry(tmp_path / "s.yaml", "obs", "t", f"sqlite:///{tmp_path}/x.db", tmp_path)
    spec = load_registry(registry).get("obs")
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_status(status_file(spec), StreamStatus(stream="obs", state="running", pid=dead.pid))
    assert not observe(spec).driver_alive and running_reason(spec) is None
    mark_standby(spec, "warming")  # this test process plays the standby
    assert observe(spec).driver_alive
    assert "standby" in (running_reason(spec) or ""), "a repair must not run under a standby about to start"
    control_store(spec).delete("standby")
    lease = take_driver_lease(spec, wait_s=0)  # a standby that took over, no status yet
    try:
        assert observe(spec).driver_alive
        assert f"pid {os.getpid()}" in (running_reason(spec) or "")
    finally:
        lease.release()
    assert not observe(spec).driver_alive and running_reason(spec) is None
