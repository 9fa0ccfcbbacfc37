"""Savepoints against real services: SeaweedFS, Apache Kafka, Spark and the demo stream.

- online: a savepoint taken while the query runs and Kafka keeps receiving events, restored
  into a fresh checkpoint after the sink already holds later batches, resumed, proven exactly
  once by the verifier; a tampered or manifest-less copy is refused / invisible; prune.
- S3 dying in the middle of a --stop savepoint: no manifest, and the stream is restarted.
- --stop on a real `rewind stream run` process through the CLI: stopped gracefully, copied,
  restarted; a dead endpoint fails in seconds naming the command to retry; the restored
  savepoint is what the next `rewind stream run` resumes from.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rewind.checkpoints.inspection import NotACheckpoint, inspect_checkpoint
from rewind.checkpoints.manifest import FILES_DIR, MANIFEST, Manifest, savepoint_prefix
from rewind.checkpoints.pointer import active_checkpoint, pointer_path, read_pointer
from rewind.checkpoints.savepoint_errors import SavepointCorrupt, SavepointNotFound
from rewind.checkpoints.savepoints import (
    create_savepoint,
    list_savepoints,
    load_manifest,
    restore_savepoint,
    savepoint_with_stop,
)
from rewind.control.status import read_status
from rewind.demo.producer import ProduceSpec, produce
from rewind.embedded.services import PlatformInfo
from rewind.kafka.lookups import true_end_offsets
from rewind.paths import status_file
from rewind.proof.verify import verify_stream
from rewind.registry import StreamSpec, load_registry
from rewind.runtime.processes import free_port, pid_alive, terminate_group
from rewind.storage import S3Config, S3Storage, S3Unreachable, open_storage
from rewind.supervision.observe import running_reason
from rewind.supervision.process_control import launch_stream, stop_stream, stream_liveness, wait_running
from tests.harness.registry_templates import demo_stream

ROOT = Path(__file__).resolve().parents[1]


def stream_yaml(name: str, topic: str, home: Path, **extra: str) -> str:
    return demo_stream(name, topic, home, max_offsets=1500, partitions="2", trigger="1 second",
                       window="5 seconds", watermark_delay="30 seconds", allowed_lateness="20 seconds", **extra)


def make_topic(bootstrap: str, prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{os.urandom(4).hex()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the futures resolve
    for fut in admin.create_topics([NewTopic(name, 2, 1)]).values():
        fut.result(timeout=15)
    return name


def events(topic: str, count: int, start: int = 0, rate: float = 0.0) -> ProduceSpec:
    return ProduceSpec(topic=topic, count=count, start_seq=start, rate=rate, partitions=2, id_prefix=topic,
                       malformed_every=41, late_every=97, duplicate_every=23)


def feed(bootstrap: str, topic: str, start: int, bursts: int, every: float = 1.0) -> threading.Thread:
    """Events while the stream runs, in bursts of 250 a second (batches with data during the
    savepoint, without a backlog that would slow the re-reads after a restart)."""
    def run() -> None:
        for i in range(bursts):
            produce(bootstrap, events(topic, 250, start=start + 250 * i))
            time.sleep(every)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def committed(spec: StreamSpec) -> list[int]:
    from rewind.driver.runner import open_sink

    sink = open_sink(spec)
    try:
        return sink.committed_batch_ids()
    finally:
        sink.dispose()


def copy_savepoint(store: S3Storage, src: Manifest, stream: str, sid: str, *, manifest: bool = True,
                   **changes: Any) -> Manifest:
    """A copy of a savepoint under another stream/id (server-side), optionally without its manifest."""
    src_prefix = savepoint_prefix(src.stream, src.savepoint_id) + FILES_DIR
    dst_prefix = savepoint_prefix(stream, sid)
    for f in store.list_files(src_prefix):
        store.client.copy_object(Bucket=store.bucket, Key=dst_prefix + FILES_DIR + f.path[len(src_prefix):],
                                 CopySource={"Bucket": store.bucket, "Key": f.path})
    copy = replace(src, stream=stream, savepoint_id=sid, **changes)
    if manifest:
        store.write_bytes(dst_prefix + MANIFEST, copy.to_json().encode())
    return copy


class TcpProxy:
    """127.0.0.1 forwarder to S3 that can die: after ``die_after`` bytes sent upstream, or on kill()."""

    def __init__(self, target_port: int, die_after: int | None = None) -> None:
        self.target_port, self.die_after, self.sent = target_port, die_after, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.dead = threading.Event()
        self.armed = threading.Event()  # die_after counts only once armed
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.dead.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.socks += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if upstream and self.armed.is_set():
                    self.sent += len(data)
                    if self.die_after is not None and self.sent >= self.die_after:
                        self.kill()
        except OSError:
            pass

    def kill(self) -> None:
        self.dead.set()
        for s in [self.listener, *self.socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


# --------------------------------------------------------------------------- online round trip
@pytest.fixture(scope="module")
def online(tmp_path_factory: pytest.TempPathFactory, platform: PlatformInfo, spark) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Run the demo query in this process while events arrive; savepoint it online; stop it later."""
    from rewind.driver.runner import build_query

    home = tmp_path_factory.mktemp("sp-online")
    bootstrap = platform.kafka_bootstrap
    topic = make_topic(bootstrap, "sp-online")
    registry = home / "streams.yaml"
    registry.write_text("streams:\n" + stream_yaml("sp_online", topic, home)
                        + stream_yaml("sp_prune", topic, home, savepoints="{keep_last: 2, max_age: 1d}")
                        + stream_yaml("sp_ctl", topic, home))
    reg = load_registry(registry)
    spec = reg.get("sp_online")
    store = S3Storage(S3Config.from_platform(platform))
    produce(bootstrap, events(topic, 3000))
    feeder = feed(bootstrap, topic, 3000, bursts=12, every=0.5)
    query = build_query(spark, spec, bootstrap, checkpoint=active_checkpoint(spec))
    try:
        wait(lambda: (inspect_checkpoint(spec.checkpoint).last_complete or 0) >= 1, 120, "two complete batches")
        assert query.isActive
        started = time.monotonic()
        manifest = create_savepoint(spec, store)
        seconds = time.monotonic() - started
        assert query.isActive, "the stream kept running during the savepoint"
        feeder.join(60)
        # the sink must hold batches after the savepoint's before it is restored (the hard case)
        wait(lambda: max(committed(spec), default=-1) > manifest.batch_id + 1, 120, "later batches")
    finally:
        query.stop()
        feeder.join(60)
        # stop() returns once the query's thread ended; its cancelled tasks end after it, and their cleanup
        # deletes their temp files in the checkpoint (CI 2026-12-01: a .changelog.*.tmp gone after the snapshot
        # the test takes of the old checkpoint). The tests below look at a checkpoint no task writes anymore.
        wait(lambda: _running_tasks(spark) == 0, 60, "the stopped query's tasks to end")
    print(json.dumps({"online_savepoint_s": round(seconds, 3), "batch": manifest.batch_id,
                      "files": len(manifest.files), "bytes": manifest.total_bytes}))
    yield {"spec": spec, "store": store, "manifest": manifest, "reg": reg, "registry": registry, "topic": topic,
           "home": home, "bootstrap": bootstrap}


def _running_tasks(spark: Any) -> int:
    """Tasks still running in the session's executors (the driver's own in local mode)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return sum(int(info.numRunningTasks()) for info in infos)


SNAPSHOT = re.compile(r"^state/\d+/\d+/(\.?\d+\.zip(\.crc)?|SSTs(/.*)?)$")


def _files(root: Path) -> dict[str, tuple[int, int] | None]:
    """Every path under ``root``: files with their size and modification time, directories with None."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None
            for p in root.rglob("*")}


def test_online_savepoint_restore_resume_exactly_once(online: dict[str, Any], spark) -> None:  # type: ignore[no-untyped-def]
    from rewind.driver.runner import build_query

    spec, store, manifest = online["spec"], online["store"], online["manifest"]
    assert manifest.mode == "online" and manifest.config_hash == spec.config_hash()
    assert manifest.spark_version.startswith("4.") and manifest.query_id
    assert set(manifest.offsets) == {online["topic"]} and set(manifest.offsets[online["topic"]]) == {"0", "1"}
    assert manifest.state_versions and all(v == manifest.batch_id + 1 for parts in manifest.state_versions.values()
                                           for v in parts.values())
    paths = {f.path for f in manifest.files}
    assert {"metadata", f"offsets/{manifest.batch_id}", f"commits/{manifest.batch_id}"} <= paths
    assert any(p.endswith((".zip", ".changelog")) for p in paths) and not any(p.endswith(".crc") for p in paths)
    assert [m.savepoint_id for m in list_savepoints(store, spec.name).complete] == [manifest.savepoint_id]
    assert load_manifest(store, spec.name, manifest.savepoint_id) == manifest

    old = Path(spec.checkpoint)
    old_files = _files(old)
    later = max(committed(spec))
    produce(online["bootstrap"], events(online["topic"], 1000, start=6000))  # new data after the restore too
    result = restore_savepoint(spec, store, manifest.savepoint_id, running=running_reason(spec))
    assert result.warnings == ()
    assert active_checkpoint(spec) == str(result.path) and result.path != old
    assert read_pointer(spec)[-1].restored_from == manifest.savepoint_id
    assert inspect_checkpoint(result.path).last_complete == manifest.batch_id
    now = _files(old)
    assert {k: now.get(k) for k in old_files} == old_files, "the old checkpoint's files are untouched"
    # Spark's state-store maintenance, in this shared session's JVM, may still upload the stopped query's RocksDB
    # snapshots there (a driver's JVM ends with its query): those, and nothing else, may appear
    added = sorted(set(now) - set(old_files))
    assert all(SNAPSHOT.search(f) for f in added), f"the restore wrote into the old checkpoint: {added}"
    print(json.dumps({"restore_s": round(result.seconds, 3), "bytes": manifest.total_bytes}))

    query = build_query(spark, spec, online["bootstrap"], available_now=True, checkpoint=active_checkpoint(spec))
    query.awaitTermination(300)
    assert query.exception() is None
    resumed = inspect_checkpoint(result.path)
    ends = {str(tp.partition): off for tp, off in true_end_offsets(online["bootstrap"], online["topic"]).items()}
    assert resumed.batch(resumed.last_complete).offsets[0][online["topic"]] == ends, "resumed up to the end of Kafka"
    assert resumed.last_complete > manifest.batch_id and later > manifest.batch_id
    report = verify_stream(spec, online["bootstrap"])
    assert report.ok, str(report)
    assert report.kafka_records >= 7000 and report.duplicate_sends > 0 and report.expected_dead_letters > 0


def test_tampered_savepoint_is_refused_naming_the_file(online: dict[str, Any]) -> None:
    store, manifest = online["store"], online["manifest"]
    ctl: StreamSpec = online["reg"].get("sp_ctl")
    bad = copy_savepoint(store, manifest, ctl.name, "tampered-1")
    victim = next(f.path for f in bad.files if f.path.endswith((".zip", ".changelog")))
    key = savepoint_prefix(ctl.name, bad.savepoint_id) + FILES_DIR + victim
    data = bytearray(store.read_bytes(key))
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    store.write_bytes(key, bytes(data))
    before = pointer_path(ctl).read_bytes() if pointer_path(ctl).exists() else None
    with pytest.raises(SavepointCorrupt, match=f"{victim}: SHA-256") as exc:
        restore_savepoint(ctl, store, bad.savepoint_id, running=running_reason(ctl))
    assert "nothing was restored" in str(exc.value)
    assert (pointer_path(ctl).read_bytes() if pointer_path(ctl).exists() else None) == before
    assert active_checkpoint(ctl) == ctl.checkpoint
    assert not any(p.name.startswith(("sp_ctl.restored", ".sp_ctl.restored"))
                   for p in Path(ctl.checkpoint).parent.glob("*")), "nothing written next to the checkpoint"

    store.delete([savepoint_prefix(ctl.name, bad.savepoint_id) + FILES_DIR + bad.files[0].path])
    with pytest.raises(SavepointCorrupt, match=f"{bad.files[0].path}: missing"):
        restore_savepoint(ctl, store, bad.savepoint_id, running=running_reason(ctl))


def test_savepoint_without_manifest_is_invisible(online: dict[str, Any]) -> None:
    store, manifest = online["store"], online["manifest"]
    ctl: StreamSpec = online["reg"].get("sp_ctl")
    copy_savepoint(store, manifest, ctl.name, "no-manifest-1", manifest=False)
    listing = list_savepoints(store, ctl.name)
    assert "no-manifest-1" not in [m.savepoint_id for m in listing.complete]
    assert "no-manifest-1" in [i.savepoint_id for i in listing.incomplete]
    with pytest.raises(SavepointNotFound, match="does not exist"):
        restore_savepoint(ctl, store, "no-manifest-1", running=running_reason(ctl))
    assert active_checkpoint(ctl) == ctl.checkpoint


def run_cli(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rewind.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def cli_env(platform: PlatformInfo, home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **platform.env(), "REWIND_HOME": str(home), "PYTHONPATH": str(ROOT),
            "PYSPARK_PYTHON": sys.executable, **extra}


def test_prune_by_count_and_age_never_the_newest(online: dict[str, Any], platform: PlatformInfo) -> None:
    store, manifest = online["store"], online["manifest"]
    now = datetime.now(UTC)
    for sid, age in (("old-10d", timedelta(days=10)), ("h3", timedelta(hours=3)), ("h2", timedelta(hours=2)),
                     ("h1", timedelta(hours=1))):
        copy_savepoint(store, manifest, "sp_prune", sid, created_at=now - age)
    copy_savepoint(store, manifest, "sp_prune", "leftover", manifest=False)
    env = cli_env(platform, online["home"])
    args = ["savepoint", "prune", "sp_prune", "--registry", str(online["registry"])]
    dry = run_cli(*args, "--dry-run", "--incomplete-older-than", "0s", "--json", env=env, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {"delete": ["old-10d", "h3"], "keep": ["h1", "h2"], "leftovers": ["leftover"],
                                      "young_leftovers": [], "dry_run": True}
    assert len(list_savepoints(store, "sp_prune").complete) == 4, "--dry-run deleted nothing"
    young = run_cli(*args, env=env, timeout=60)  # default: leftovers younger than 1h are kept
    assert young.returncode == 0 and "kept incomplete leftover" in young.stdout, young.stdout + young.stderr
    real = run_cli(*args, "--incomplete-older-than", "0s", env=env, timeout=60)
    assert real.returncode == 0 and "deleted incomplete leftover leftover" in real.stdout, real.stdout + real.stderr
    listing = list_savepoints(store, "sp_prune")
    assert [m.savepoint_id for m in listing.complete] == ["h1", "h2"] and listing.incomplete == []
    only = run_cli(*args, "--keep-last", "1", "--max-age", "1s", "--json", env=env, timeout=60)
    assert json.loads(only.stdout)["keep"] == ["h1"], "the newest is kept whatever its age"


def test_s3_dies_during_stop_savepoint_stream_restarted(online: dict[str, Any], platform: PlatformInfo) -> None:
    """The --stop flow with S3 failing mid-copy: no manifest, the stream is running again (finally)."""
    store, ctl = online["store"], online["reg"].get("sp_ctl")
    proxy = TcpProxy(int(platform.s3_endpoint.rsplit(":", 1)[1]), die_after=20_000)
    flaky = S3Storage(replace(S3Config.from_platform(platform), endpoint=f"http://127.0.0.1:{proxy.port}"))
    fake_stream = [sys.executable, "-c", FAKE_STREAM, str(status_file(ctl)), ctl.name]
    procs = [subprocess.Popen(fake_stream, start_new_session=True)]
    events_seen: list[str] = []

    def on_event(msg: str) -> None:
        events_seen.append(msg)
        if msg.endswith("stopped"):
            proxy.armed.set()  # S3 dies once 20 kB of the copy went up

    def restart() -> None:
        procs.append(subprocess.Popen(fake_stream, start_new_session=True))
        wait_running(ctl, procs[-1].pid, timeout=30)

    try:
        import shutil

        shutil.copytree(active_checkpoint(online["spec"]), ctl.checkpoint)  # a real checkpoint to copy
        wait_running(ctl, procs[0].pid, timeout=30)
        started = time.monotonic()
        with pytest.raises(S3Unreachable, match=f"127.0.0.1:{proxy.port} is unreachable"):
            savepoint_with_stop(ctl, flaky, stop=stop_stream, restart=restart, on_event=on_event)
        assert time.monotonic() - started < 30, "an unreachable S3 must fail fast"
        assert procs[0].poll() is not None and len(procs) == 2, events_seen
        assert stream_liveness(ctl).running and stream_liveness(ctl).pid == procs[1].pid
        listing = list_savepoints(store, ctl.name)
        assert not [m for m in listing.complete if m.mode == "stop"], "no manifest was written"
        assert any(i.objects > 0 for i in listing.incomplete), "S3 died mid-copy: some files went up"
    finally:
        proxy.kill()
        for p in procs:
            if p.poll() is None:
                terminate_group(p.pid, grace=5)


FAKE_STREAM = """
import os, signal, sys, time
from pathlib import Path
from rewind.control.directory import DirectoryStore
from rewind.control.leases import LeaseKeeper, acquire, me
from rewind.control.status import StreamStatus, write_status
path, stop = Path(sys.argv[1]), []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
store = DirectoryStore(path.parent, sys.argv[2])
keeper = LeaseKeeper(store, *acquire(store, me(), 20.0, 30)).start()  # a driver holds its stream's lease
st = StreamStatus(stream=sys.argv[2], state="running", epoch=keeper.epoch)
while not stop:
    st.heartbeat = time.time(); write_status(path, st); time.sleep(0.2)
time.sleep(0.5)  # a graceful stop takes a moment
st.state = "stopped"; write_status(path, st); keeper.release()
"""


# --------------------------------------------------------------------------- --stop through the CLI
@pytest.mark.slow
def test_stop_savepoint_cli_restart_restore_resume(tmp_path: Path, platform: PlatformInfo) -> None:
    bootstrap = platform.kafka_bootstrap
    topic = make_topic(bootstrap, "sp-stop")
    registry = tmp_path / "streams.yaml"
    # Three state partitions (the registry's spark_conf, Rewind's default is 2): the drivers the CLI
    # starts apply it, and the savepoint and the restore carry every partition.
    registry.write_text("streams:\n" + stream_yaml("sp_stop", topic, tmp_path,
                                                   spark_conf="{spark.sql.shuffle.partitions: 3}"))
    spec = load_registry(registry).get("sp_stop")
    env = cli_env(platform, tmp_path)
    store = S3Storage(S3Config.from_platform(platform))
    log_path = tmp_path / "logs" / "stream-sp_stop.log"
    produce(bootstrap, events(topic, 2000))
    feeder = feed(bootstrap, topic, 2000, bursts=0)
    pid = launch_stream(spec, registry, bootstrap, log_path, env=env)
    try:
        wait_running(spec, pid, timeout=120, log_path=log_path)
        wait(lambda: (read_status(status_file(spec)).last_batch_id or 0) >= 1, 120,
             "two batches")
        args = ["savepoint", "create", spec.name, "--registry", str(registry), "--bootstrap", bootstrap]

        started = time.monotonic()
        made = run_cli(*args, "--stop", "--json", "--no-progress", env=env)
        stop_s = time.monotonic() - started
        assert made.returncode == 0, made.stderr + log_path.read_text()[-3000:]
        summary = json.loads(made.stdout)
        assert summary["mode"] == "stop" and "stopped" in made.stderr and "running again" in made.stderr
        live = stream_liveness(spec)
        assert live.running and live.pid != pid and not pid_alive(pid), "stopped, then restarted"
        pid = live.pid
        feeder = feed(bootstrap, topic, 2000, bursts=8)  # the restarted stream has new data to process

        started = time.monotonic()
        dead = run_cli(*args, "--stop", env={**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"},
                       timeout=60)
        dead_s = time.monotonic() - started
        assert dead.returncode == 1 and dead_s < 20, (dead_s, dead.stderr)
        assert "unreachable" in dead.stderr and "no manifest was written" in dead.stderr
        assert f"retry: rewind savepoint create {spec.name} --stop --registry {registry}" in dead.stderr
        assert stream_liveness(spec).pid == pid, "S3 was checked before the stream was stopped"
        assert [m.savepoint_id for m in list_savepoints(store, spec.name).complete] == [summary["savepoint_id"]]

        refused = run_cli("savepoint", "restore", spec.name, summary["savepoint_id"], "--registry", str(registry),
                          env=env, timeout=60)
        assert refused.returncode == 3 and "is running" in refused.stderr
        assert not pointer_path(spec).exists()

        feeder.join(60)
        wait(lambda: max(committed(spec), default=-1) > summary["batch_id"] + 1, 120, "batches after the savepoint")
        assert stop_stream(spec, timeout=90)
    finally:
        feeder.join(60)
        if pid_alive(pid):
            terminate_group(pid, grace=30)

    restored = run_cli("savepoint", "restore", spec.name, summary["savepoint_id"], "--registry", str(registry),
                       "--to", str(tmp_path / "restored"), "--json", env=env, timeout=120)
    assert restored.returncode == 0, restored.stderr
    assert active_checkpoint(spec) == str(tmp_path / "restored")
    before = inspect_checkpoint(tmp_path / "restored").planned
    run = run_cli("stream", "run", spec.name, "--registry", str(registry), "--bootstrap", bootstrap,
                  "--available-now", env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert inspect_checkpoint(tmp_path / "restored").planned[-1] > before[-1], \
        "`rewind stream run` resumed from the restored checkpoint (needs the runner to use active_checkpoint)"
    resumed = inspect_checkpoint(tmp_path / "restored")
    assert resumed.operators and all(sorted(parts) == ["0", "1", "2"] for parts in resumed.operators.values()), \
        resumed.operators
    report = verify_stream(spec, bootstrap)
    assert report.ok, str(report)
    print(json.dumps({"stop_savepoint_cli_s": round(stop_s, 1), "dead_s3_s": round(dead_s, 1),
                      "restore_s": json.loads(restored.stdout)["seconds"], "bytes": summary["total_bytes"]}))


def test_inspect_reads_a_savepoint_in_s3(online: dict[str, Any]) -> None:
    """`rewind checkpoint inspect s3://...`: the savepoint's copy is itself a complete checkpoint."""
    store, manifest = online["store"], online["manifest"]
    url = f"s3://{store.bucket}/{savepoint_prefix(manifest.stream, manifest.savepoint_id)}{FILES_DIR}"
    rep = inspect_checkpoint(open_storage(url, store.config))
    assert rep.errors == [] and rep.last_complete == manifest.batch_id
    assert rep.batch(manifest.batch_id).offsets[0] == manifest.offsets
    assert set(rep.operators) == set(manifest.state_versions)
    with pytest.raises(NotACheckpoint):
        inspect_checkpoint(open_storage(f"s3://{store.bucket}/savepoints/no-such-stream/", store.config))
