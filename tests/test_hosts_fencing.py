"""One driver per stream across hosts, a warm standby on another host, and a zombie that commits nothing.

Two "hosts" (``tests.harness.hosts``: own PID, mount and UTS namespaces, a private tmpfs over the status
directory) share only Kafka, S3, the checkpoint directory and the SQLite sink, with default settings: no
``control``, each host its own ``status_dir``, so the lease is the one the store beside the checkpoint
holds (``<checkpoint>.control``; with a store per status_dir, as before, host-b took its own lease on
host-a's checkpoint). (The S3 control store across hosts: ``test_celery_hosts``.) The driver on host-a
runs; a second ``rewind stream run`` on host-b is refused naming host-a, its epoch and its lease's
expiry; a standby (``--standby``) on host-b warms up and waits. Host-a's driver is then SIGSTOPped mid-
batch (its JVM with it): no kernel tells the standby, which takes the lease over with epoch 2 once
host-a's lapses and commits batches. Host-a's driver is SIGCONTed: it commits nothing, logs the fenced
line and exits non-zero, and the status stays host-b's. The checkpoint shows no batch planned twice with
different offsets (each batch's offsets file is what the sink's ledger recorded for it), a resume from
it after the run is clean, and the data proves every record landed once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
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
from tests.harness.registry_templates import demo_stream, write_registry

ROOT = Path(__file__).resolve().parents[1]
TTL_S = 8.0
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hosts.available(), reason="needs root and unshare")]


def wait_for(check: Callable[[], Any], timeout: float, what: str, *watch: hosts.HostProcess) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        for proc in watch:
            if not proc.alive():
                raise AssertionError(f"{proc.host} exited ({proc.popen.returncode}) waiting for {what}:\n"
                                     f"{proc.text()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: " +
                         " | ".join(f"{p.host}: {p.text()[-1500:]}" for p in watch))


@pytest.fixture
def world(platform: PlatformInfo, new_topic: Callable[..., str], tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    from rewind.registry import load_registry
    from rewind.runtime.jvm import rewind_jar

    for k, v in platform.env().items():  # the test reads the shared store as every host does
        monkeypatch.setenv(k, v)
    shared, private = tmp_path / "shared", tmp_path / "host"
    shared.mkdir()
    private.mkdir()
    monkeypatch.setenv("REWIND_JVM_CACHE", str(shared / "jvm"))
    rewind_jar()  # compiled once here; the hosts find it in the shared cache
    topic = new_topic(3, "zombie")
    name = "zombie"
    registry = write_registry(shared / "streams.yaml", demo_stream(
        name, topic, shared, max_offsets=400, sink_url=f"sqlite:///{shared}/sink.db", trigger='"1 second"',
        status_dir=str(private / "status")))  # the control store: the default, beside the checkpoint
    env = {**os.environ, **platform.env(), "PYTHONPATH": str(ROOT), "REWIND_HOME": str(private / "home"),
           "REWIND_LEASE_TTL_S": str(TTL_S), "REWIND_JVM_CACHE": str(shared / "jvm"), "REWIND_LAG_PROBE_S": "2"}
    host_a, host_b = hosts.Host("host-a", [private]).start(), hosts.Host("host-b", [private]).start()
    try:
        yield {"spec": load_registry(registry).get(name), "registry": registry, "topic": topic, "env": env,
               "a": host_a, "b": host_b, "shared": shared, "logs": tmp_path / "logs"}
    finally:
        host_a.stop()
        host_b.stop()


def run(world: dict[str, Any], host: hosts.Host, log: str, *extra: str, **env: str) -> hosts.HostProcess:
    argv = [sys.executable, "-m", "rewind.cli", "stream", "run", world["spec"].name, "--registry",
            str(world["registry"]), "--bootstrap", world["env"]["REWIND_KAFKA_BOOTSTRAP"], *extra]
    return host.spawn(argv, {**world["env"], **env}, world["logs"] / log)


def committed(cp: Path) -> set[int]:
    return {int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit()} if (cp / "commits").is_dir() else set()


def planned(cp: Path) -> set[int]:
    return {int(p.name) for p in (cp / "offsets").iterdir() if p.name.isdigit()} if (cp / "offsets").is_dir() else set()


def pause_mid_batch(driver: hosts.HostProcess, cp: Path, timeout: float = 120) -> int:
    """SIGSTOP the driver (with its JVM) while a batch is planned and not committed; that batch's id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = max(planned(cp), default=-1)
        if n >= 0 and n not in committed(cp):
            driver.signal(signal.SIGSTOP)
            if max(planned(cp)) == n and n not in committed(cp):
                return n
            driver.signal(signal.SIGCONT)
        time.sleep(0.03)
    raise AssertionError("no batch caught in flight")


def test_a_zombie_driver_commits_nothing_and_the_checkpoint_stays_whole(world: dict[str, Any],
                                                                         platform: PlatformInfo) -> None:
    from rewind.api.tables import LEDGER_TABLE
    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.checkpoints.logs import parse_offsets_file
    from rewind.control.driver_lease import read_standby, request_stop
    from rewind.control.status_store import read_stream_status
    from rewind.driver.runner import open_sink
    from rewind.proof.verify import verify_stream
    from rewind.storage.location import read_text

    spec, cp = world["spec"], Path(world["spec"].checkpoint)
    events = 9_000
    seed = ProduceSpec(topic=world["topic"], count=600, partitions=3, id_prefix="seed", keyless=True)
    produce(platform.kafka_bootstrap, seed)
    flow = ProduceSpec(topic=world["topic"], count=events, rate=events / 60, partitions=3, id_prefix="z",
                       keyless=True, malformed_every=97, late_every=211, duplicate_every=53, late_by=timedelta(hours=1))
    # The records flow across the pause and the takeover (up to 60 s), and stop once the zombie's exit is
    # judged: what comes after (the catch-up, the ledger, the proof) needs no new records, and waiting out
    # the rest of the 60 s was ~25 s of nothing on a quiet machine. Every record sent is proven.
    stop_flow = threading.Event()
    flowed: dict[str, Any] = {}
    producer = threading.Thread(target=lambda: flowed.update(sent=produce(
        platform.kafka_bootstrap, flow, should_stop=stop_flow.is_set).sent), daemon=True)

    a = run(world, world["a"], "a.log")
    wait_for(lambda: (st := read_stream_status(spec)) and st.epoch == 1 and (st.last_batch_id or -1) >= 1, 240,
             "host-a's first batches", a)
    intruder = run(world, world["b"], "b-refused.log", REWIND_DRIVER_WAIT_S="2")
    assert intruder.wait(timeout=120) == 3, intruder.text()[-3000:]
    refusal = intruder.text()
    assert re.search(r"is already run by pid \d+ on host-a \(epoch 1, a driver; lease expires at 20", refusal), \
        refusal[-2000:]
    assert str(cp) + ".control" in refusal and "Running Spark version" not in refusal, refusal[-2000:]
    assert len([ln for ln in refusal.splitlines() if "refused" in ln]) == 1, refusal[-2000:]  # one line

    b = run(world, world["b"], "b.log", "--standby")  # warm, waiting for host-a's lease
    wait_for(lambda: read_standby(spec).get("state") == "ready", 240, "host-b's standby ready", a, b)
    producer.start()
    wait_for(lambda: len(committed(cp)) >= 4, 120, "host-a's batches with the producer's records", a)
    n = pause_mid_batch(a, cp)
    paused_at = time.monotonic()
    took = wait_for(lambda: (st := read_stream_status(spec)) and st.epoch == 2 and st.host == "host-b"
                    and st.last_batch_id is not None and st.last_batch_id >= n + 3 and st.last_batch_at
                    and st.last_batch_at >= st.started_at and st, 300, f"host-b's batches {n}..{n + 3}", b)
    assert time.monotonic() - paused_at >= TTL_S, "host-b took over before host-a's lease lapsed"
    assert "takes over with epoch 2" in b.text(), b.text()[-3000:]
    a.signal(signal.SIGCONT)
    code = a.wait(timeout=120)
    text = a.text()
    assert code != 0, text[-3000:]
    line = "fenced: epoch 1 was taken over by epoch 2 on host-b"
    assert hosts.fenced_exit_problem(text, line) is None, hosts.fenced_exit_problem(text, line)
    reached = [ln for ln in text.splitlines() if any(f"batch {k} " in ln for k in range(n, n + 50))
               and any(w in ln for w in ("committed", "skipped", "re-planned"))]
    assert not reached, f"the zombie reached its sink commit: {reached}"
    after = read_stream_status(spec)
    assert after is not None and after.epoch == 2 and after.state == "running", "the zombie wrote the status"

    stop_flow.set()
    producer.join(timeout=180)
    assert not producer.is_alive()
    from rewind.kafka.lookups import true_end_offsets

    ends = {str(tp.partition): o for tp, o in true_end_offsets(platform.kafka_bootstrap, world["topic"]).items()}
    wait_for(lambda: (st := read_stream_status(spec)) and {p: int(o) for p, o in
                                                           st.end_offsets.get(world["topic"], {}).items()} == ends,
             300, f"host-b caught up to {ends}", b)
    assert request_stop(spec, "the test is done") is not None  # from outside both hosts: a stop request
    assert b.wait(timeout=120) == 0, b.text()[-3000:]

    sink = open_sink(spec)
    try:
        ledger = sink.read_table(LEDGER_TABLE)
    finally:
        sink.dispose()
    epochs = dict(zip(ledger["batch_id"].astype(int), ledger["epoch"]))
    assert all(e == 1 for b_id, e in epochs.items() if b_id < n), epochs
    assert all(e == 2 for b_id, e in epochs.items() if b_id >= n), f"a batch from {n} on was not host-b's: {epochs}"
    for row in ledger.itertuples():  # no batch planned twice with different offsets
        _, sources = parse_offsets_file(read_text(str(cp), f"offsets/{row.batch_id}"))
        assert json.loads(row.source_offsets)["end"] == sources[0], f"batch {row.batch_id} was re-planned"
    assert inspect_checkpoint(cp).errors == []

    resumed = run(world, world["a"], "a-resume.log", "--available-now")  # a resume from it is clean
    assert resumed.wait(timeout=300) == 0, resumed.text()[-3000:]
    report = verify_stream(spec, platform.kafka_bootstrap)
    print(json.dumps({"paused_batch": n, "host_b_status": {"epoch": took.epoch, "batch": took.last_batch_id},
                      **{k: report.summary()[k] for k in ("kafka_records", "sink_events", "sink_dead_letters",
                                                           "duplicate_event_rows", "ok")}}))
    assert flowed["sent"] > 0 and report.kafka_records >= seed.count + flowed["sent"]
    assert report.duplicate_event_rows == 0 and not report.missing_events and report.ok, str(report)
