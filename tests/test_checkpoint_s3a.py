"""Every checkpoint tool on a checkpoint in S3 (``s3a://``, the embedded SeaweedFS): repair (quarantine under a
prefix, never delete), savepoint create (server-side copies, checksums, manifest last) and restore (a fresh
prefix, proven, then the pointer switched), with the refusals and messages of a local checkpoint.

The checkpoint is a real one: the demo stream's, written by Spark locally once and uploaded; every test
damages its own copy. A stream resuming from a checkpoint in
S3 on a cluster is tests/test_yarn.py's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.pointer import active_checkpoint, read_pointer
from rewind.checkpoints.repair import RepairRefused, repair_checkpoint
from rewind.checkpoints.savepoint_errors import SavepointCorrupt
from rewind.checkpoints.savepoints import create_savepoint, restore_savepoint
from rewind.demo.producer import ProduceSpec, produce
from rewind.embedded.services import PlatformInfo
from rewind.registry import StreamSpec, load_registry
from rewind.storage import S3Config, S3Storage, open_storage, parse_s3_url
from rewind.supervision.observe import running_reason
from tests.harness.registry_templates import demo_stream, write_registry


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory, platform: PlatformInfo, spark: Any,
             new_topic_module: str) -> dict[str, Any]:
    """The demo stream's checkpoint after 5 batches (its deduplications and window on RocksDB), written locally
    by Spark once and uploaded under a prefix."""
    from rewind.driver.runner import build_query

    home = tmp_path_factory.mktemp("s3a-original")
    produce(platform.kafka_bootstrap, ProduceSpec(topic=new_topic_module, count=1500, partitions=2,
                                                  malformed_every=40, duplicate_every=30, id_prefix="s3a"))
    spec = load_registry(write_registry(home / "streams.yaml", demo_stream(
        "s3orig", new_topic_module, home, max_offsets=300))).get("s3orig")
    build_query(spark, spec, platform.kafka_bootstrap, available_now=True).awaitTermination(300)
    local = Path(spec.checkpoint)
    client = S3Config.from_platform(platform).client()
    prefix = f"s3a-tools/{uuid.uuid4().hex[:8]}/original/"
    files = [p for p in local.rglob("*") if p.is_file() and not p.name.endswith(".crc")]
    for p in files:
        client.put_object(Bucket=platform.bucket, Key=prefix + p.relative_to(local).as_posix(), Body=p.read_bytes())
    last = inspect_checkpoint(local).last_complete
    assert last is not None and last >= 3, last
    return {"prefix": prefix, "last": last, "files": len(files), "local": local}


@pytest.fixture(scope="module")
def new_topic_module(kafka_bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"s3a-tools-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept alive until its futures resolve
    for fut in admin.create_topics([NewTopic(name, 2, 1)]).values():
        fut.result(timeout=15)
    return name


@pytest.fixture
def copy(original: dict[str, Any], platform: PlatformInfo, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A copy of the checkpoint under a prefix of its own, and a stream of the registry whose checkpoint it is."""
    config = S3Config.from_platform(platform)
    client = config.client()
    for k, v in platform.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("REWIND_S3_BUCKET", platform.bucket)
    base = f"s3a-tools/{uuid.uuid4().hex[:8]}/cp"
    for key in [f.path for f in S3Storage(config).list_files(original["prefix"])]:
        client.copy_object(Bucket=platform.bucket, Key=f"{base}/{key[len(original['prefix']):]}",
                           CopySource={"Bucket": platform.bucket, "Key": key})
    location = f"s3a://{platform.bucket}/{base}"
    registry = write_registry(tmp_path / "streams.yaml", demo_stream(
        "s3cp", "s3cp-topic", tmp_path, checkpoint=location))
    yield {"client": client, "config": config, "bucket": platform.bucket, "base": base, "location": location,
           "spec": load_registry(registry).get("s3cp"), "last": original["last"], "local": original["local"]}


def _bucket(c: dict[str, Any]) -> S3Storage:
    return S3Storage(c["config"])


def _objects(c: dict[str, Any], prefix: str) -> dict[str, str]:
    """key (relative to ``prefix``) -> SHA-256 of every object under it."""
    bucket = _bucket(c)
    return {f.path[len(prefix):]: bucket.digest(f.path).sha256 for f in bucket.list_files(prefix)}


def _put(c: dict[str, Any], rel: str, data: bytes) -> None:
    c["client"].put_object(Bucket=c["bucket"], Key=f"{c['base']}/{rel}", Body=data)


def _get(c: dict[str, Any], rel: str) -> bytes:
    return bytes(c["client"].get_object(Bucket=c["bucket"], Key=f"{c['base']}/{rel}")["Body"].read())


def _report(c: dict[str, Any]) -> Any:
    return inspect_checkpoint(open_storage(c["location"], c["config"]))


@pytest.mark.parametrize("damage", ["truncated_commit", "zeroed_state_file"])
def test_repair_moves_into_a_quarantine_prefix_and_deletes_nothing(copy: dict[str, Any], damage: str) -> None:
    c, last = copy, copy["last"]
    if damage == "truncated_commit":
        _put(c, f"commits/{last}", _get(c, f"commits/{last}")[:5])
    else:  # the state a resume after the last batch loads (version last+1) of partition 1, zeroed
        state = sorted(k for k in _objects(c, f"{c['base']}/") if k.startswith("state/0/1/") and
                       k.split("/")[-1].split(".")[0] == str(last + 1))
        assert state, "no state file of the last batch"
        _put(c, state[0], b"")
    before = _report(c)
    assert before.errors and before.last_complete == last - 1, [p.detail for p in before.problems]  # damage took
    everything = _objects(c, f"{c['base']}/")

    dry = repair_checkpoint(c["location"], dry_run=True)
    assert dry["result"].startswith("would move") and _objects(c, f"{c['base']}/") == everything
    record = repair_checkpoint(c["location"])
    assert record["result"] == "repaired" and record["rolled_back_to_batch"] == last - 1, record
    quarantine = record["quarantine"]
    assert quarantine.startswith(f"{c['location']}.quarantine/") and quarantine.endswith(f"-batch{last - 1}/")
    q_prefix = parse_s3_url(quarantine)[1]
    moved = _objects(c, q_prefix)
    remaining = _objects(c, f"{c['base']}/")
    # never deletes: every object is either still there or in the quarantine, byte for byte
    assert {**remaining, **{k: v for k, v in moved.items() if k != "record.json"}} == everything
    assert {m["file"] for m in record["moved"]} == set(moved) - {"record.json"}
    assert json.loads(c["client"].get_object(Bucket=c["bucket"], Key=q_prefix + "record.json")["Body"].read())[
        "result"] == "repaired"
    after = _report(c)
    assert not after.errors and after.last_complete == last - 1


def test_repair_refuses_as_on_a_local_path(copy: dict[str, Any], tmp_path: Path) -> None:
    """The same refusals and words: a running stream, and no complete batch (restore a savepoint)."""
    c = copy
    running = "stream 's3cp' is running (running, pid 7, heartbeat 1s ago)"
    with pytest.raises(RepairRefused, match=r"is running .*: stop it first \(it writes into s3a://"):
        repair_checkpoint(c["location"], running=running)
    for rel in [k for k in _objects(c, f"{c['base']}/") if k.startswith("offsets/")]:
        _put(c, rel, b"")
    with pytest.raises(RepairRefused) as in_s3:
        repair_checkpoint(c["location"])
    local = tmp_path / "local-cp"
    import shutil

    shutil.copytree(c["local"], local)
    for f in (local / "offsets").iterdir():
        f.write_bytes(b"")
    with pytest.raises(RepairRefused) as on_disk:
        repair_checkpoint(local)
    assert "Restore a savepoint instead" in str(in_s3.value)
    assert str(in_s3.value).split(" has no complete batch")[1].split("(")[0] == \
        str(on_disk.value).split(" has no complete batch")[1].split("(")[0]


def test_savepoint_is_copied_inside_s3_and_restored_into_a_fresh_prefix(copy: dict[str, Any],
                                                                        platform: PlatformInfo) -> None:
    c = copy
    spec: StreamSpec = c["spec"]
    store = S3Storage(S3Config.from_platform(platform))
    uploads: list[str] = []
    store.client.meta.events.register("provide-client-params.s3.PutObject",
                                     lambda params, **_: uploads.append(params["Key"]))
    manifest = create_savepoint(spec, store)
    assert manifest.batch_id == c["last"] and manifest.source_checkpoint == c["location"]
    sp_prefix = f"savepoints/s3cp/{manifest.savepoint_id}/"
    assert uploads == [sp_prefix + "manifest.json"], uploads  # every file went by CopyObject, the manifest last
    source = _objects(c, f"{c['base']}/")
    for entry in manifest.files:  # the manifest's checksums are the checkpoint's bytes, and so are the copies
        assert entry.sha256 == source[entry.path] == store.digest(sp_prefix + "files/" + entry.path).sha256

    result = restore_savepoint(spec, store, manifest.savepoint_id, running=running_reason(spec))
    dest = str(result.path)
    assert dest == f"{c['location']}.restored-{manifest.savepoint_id}"
    assert active_checkpoint(spec) == dest and read_pointer(spec)[0].path == c["location"]
    restored = inspect_checkpoint(open_storage(dest, c["config"]))
    assert restored.last_complete == manifest.batch_id and not restored.errors
    assert _objects(c, f"{c['base']}/") == source  # the old checkpoint is kept as it was


def test_a_tampered_savepoint_is_refused_and_nothing_switches(copy: dict[str, Any], platform: PlatformInfo) -> None:
    c = copy
    spec: StreamSpec = c["spec"]
    store = S3Storage(S3Config.from_platform(platform))
    manifest = create_savepoint(spec, store)
    victim = next(e for e in manifest.files if e.path.startswith("state/") and e.size > 8)
    key = f"savepoints/s3cp/{manifest.savepoint_id}/files/{victim.path}"
    data = bytearray(store.client.get_object(Bucket=c["bucket"], Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    store.client.put_object(Bucket=c["bucket"], Key=key, Body=bytes(data))
    with pytest.raises(SavepointCorrupt, match=rf"{victim.path}: SHA-256 .* differs .*nothing was restored"):
        restore_savepoint(spec, store, manifest.savepoint_id, running=running_reason(spec))
    assert active_checkpoint(spec) == c["location"] and read_pointer(spec) == []
    dest = parse_s3_url(f"{c['location']}.restored-{manifest.savepoint_id}")[1]
    assert store.list_files(dest) == []  # the half-made prefix is gone
