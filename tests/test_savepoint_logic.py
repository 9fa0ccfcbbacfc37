"""Savepoint logic without services: retention, ids, manifests, verification, pointer, liveness, S3 config."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rewind.checkpoints.manifest import (
    FileEntry,
    Incomplete,
    Listing,
    Manifest,
    new_savepoint_id,
    restore_warnings,
    safe_relpath,
    validate_savepoint_id,
)
from rewind.checkpoints.pointer import PointerError, active_checkpoint, point_to, read_pointer
from rewind.checkpoints.retention import plan_prune, select_for_pruning, select_leftovers
from rewind.checkpoints.savepoint_errors import InvalidSavepointId, SavepointCorrupt, SavepointRefused
from rewind.checkpoints.savepoints import restore_destination, verify_tree
from rewind.control.status import StreamStatus
from rewind.registry import StreamSpec
from rewind.storage import S3Config, format_s3_url, parse_s3_url, resolve_s3_config
from rewind.supervision.process_control import liveness

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def spec_at(tmp_path: Path, **kw: object) -> StreamSpec:
    return StreamSpec(name="demo", topics=["t"], transform="rewind.demo.transform:DemoTransform",
                      sink={"url": f"sqlite:///{tmp_path}/s.db"}, checkpoint=str(tmp_path / "cp" / "demo"),
                      status_dir=str(tmp_path / "status"), **kw)  # type: ignore[arg-type]


def manifest(sid: str = "20261122T120000Z-b7-abcd", created: datetime = NOW,
             files: tuple[FileEntry, ...] = ()) -> Manifest:
    return Manifest(savepoint_id=sid, stream="demo", batch_id=7, offsets={"t": {"0": 42, "1": 40}},
                    state_versions={"0": {"0": 8, "1": 8}}, files=files, spark_version="4.3.0",
                    config_hash="0123456789abcdef", created_at=created, mode="stop", query_id="q-1",
                    source_checkpoint="/cp/demo")


# --------------------------------------------------------------------------- retention
def aged(*hours: float) -> list[Manifest]:
    return [manifest(f"sp{i}", NOW - timedelta(hours=h)) for i, h in enumerate(hours)]


def ids(items: list[Manifest]) -> list[str]:
    return [m.savepoint_id for m in items]


def test_retention_by_count_keeps_newest_n_and_returns_oldest_first() -> None:
    sps = aged(5, 1, 3, 2, 4)  # sp1 newest .. sp0 oldest
    assert ids(select_for_pruning(sps, keep_last=2, max_age=timedelta(days=7), now=NOW)) == ["sp0", "sp4", "sp2"]


def test_retention_by_age() -> None:
    sps = aged(1, 30, 50)
    assert ids(select_for_pruning(sps, keep_last=10, max_age=timedelta(days=1), now=NOW)) == ["sp2", "sp1"]


def test_retention_never_deletes_the_newest_even_when_too_old() -> None:
    sps = aged(100, 200)
    assert ids(select_for_pruning(sps, keep_last=1, max_age=timedelta(hours=1), now=NOW)) == ["sp1"]
    assert select_for_pruning(aged(100), keep_last=1, max_age=timedelta(0), now=NOW) == []
    assert select_for_pruning([], keep_last=1, max_age=timedelta(0), now=NOW) == []


def test_leftovers_only_when_old_enough_and_plan_splits_them() -> None:
    young = Incomplete("a", 3, 100, NOW - timedelta(minutes=10), "no manifest")
    old = Incomplete("b", 3, 100, NOW - timedelta(hours=2), "no manifest")
    assert select_leftovers([young, old], timedelta(hours=1), NOW) == [old]
    plan = plan_prune(Listing(aged(1, 2, 3), [young, old]), keep_last=2, max_age=timedelta(days=7), now=NOW,
                      incomplete_after=timedelta(hours=1))
    assert plan.to_json() == {"delete": ["sp2"], "keep": ["sp0", "sp1"], "leftovers": ["b"], "young_leftovers": ["a"]}


# --------------------------------------------------------------------------- ids and paths
@pytest.mark.parametrize("good", ["20261122T120000Z-b7-abcd", "a", "A.b_c-1", "9x"])
def test_valid_ids(good: str) -> None:
    assert validate_savepoint_id(good) == good


@pytest.mark.parametrize("bad", ["", "..", "a..b", "../x", "a/b", "/abs", ".hidden", "-x", "a b", "é", "x" * 201,
                                 "a\\b", "a\nb"])
def test_invalid_ids(bad: str) -> None:
    with pytest.raises(InvalidSavepointId, match="invalid savepoint id"):
        validate_savepoint_id(bad)


def test_new_ids_are_valid_sortable_and_unique() -> None:
    a, b = new_savepoint_id(3, NOW), new_savepoint_id(3, NOW + timedelta(seconds=1))
    assert validate_savepoint_id(a) and a.startswith("20261122T120000Z-b3-") and a < b
    assert len({new_savepoint_id(3, NOW) for _ in range(50)}) > 40


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "", "a//b", "./a", "a\\..\\b"])
def test_unsafe_manifest_paths(bad: str) -> None:
    with pytest.raises(SavepointCorrupt, match="unsafe"):
        safe_relpath(bad)


def test_s3_urls() -> None:
    assert parse_s3_url("s3://b/savepoints/x/") == ("b", "savepoints/x/")
    assert format_s3_url("b", "/k/v") == "s3://b/k/v"
    with pytest.raises(ValueError):
        parse_s3_url("http://b/k")


# --------------------------------------------------------------------------- manifest
def test_manifest_round_trip() -> None:
    m = manifest(files=(FileEntry("offsets/7", 10, "a" * 64), FileEntry("state/0/0/8.zip", 5, "b" * 64)))
    text = m.to_json()
    assert json.loads(text)["created_at"] == "2026-11-22T12:00:00+00:00"
    back = Manifest.from_json(text)
    assert back == m and back.total_bytes == 15
    assert back.summary()["file_count"] == 2 and "files" not in back.summary()


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format=99), "unknown manifest format"),
    (lambda d: d.pop("batch_id"), "batch_id"),
    (lambda d: d["files"].append({"path": "../../etc/passwd", "size": 1, "sha256": "a" * 64}), "unsafe"),
    (lambda d: d["files"].append({"path": "x", "size": 1, "sha256": "nothex"}), "sha256"),
    (lambda d: d.update(savepoint_id="../x"), "invalid savepoint id"),
])
def test_manifest_refuses_bad_documents(mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(manifest().to_json())
    mutate(doc)
    with pytest.raises(SavepointCorrupt, match=match):
        Manifest.from_json(json.dumps(doc))
    with pytest.raises(SavepointCorrupt, match="manifest unreadable"):
        Manifest.from_json("{not json")


# --------------------------------------------------------------------------- verification
@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Manifest]:
    root = tmp_path / "restored"
    files = {"metadata": b'{"id":"q"}', "offsets/7": b"v1\n{}\n{}", "state/0/0/8.zip": os.urandom(3000)}
    entries = []
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        entries.append(FileEntry(rel, len(data), hashlib.sha256(data).hexdigest()))
    return root, manifest(files=tuple(entries))


def test_verify_accepts_an_intact_copy(tree: tuple[Path, Manifest]) -> None:
    verify_tree(*tree)


def test_verify_names_a_tampered_file(tree: tuple[Path, Manifest]) -> None:
    root, m = tree
    data = bytearray((root / "state/0/0/8.zip").read_bytes())
    data[10] ^= 0xFF  # same size, other bytes
    (root / "state/0/0/8.zip").write_bytes(bytes(data))
    with pytest.raises(SavepointCorrupt, match=r"state/0/0/8\.zip: SHA-256"):
        verify_tree(root, m)


def test_verify_names_a_truncated_missing_or_extra_file(tree: tuple[Path, Manifest]) -> None:
    root, m = tree
    (root / "offsets/7").write_bytes(b"v1\n")
    with pytest.raises(SavepointCorrupt, match="offsets/7: 3 bytes"):
        verify_tree(root, m)
    (root / "offsets/7").unlink()
    with pytest.raises(SavepointCorrupt, match="offsets/7: missing"):
        verify_tree(root, m)
    root2, m2 = root, replace(m, files=tuple(f for f in m.files if f.path != "offsets/7"))
    (root2 / "sneaky").write_text("x")
    with pytest.raises(SavepointCorrupt, match="sneaky: not in the manifest"):
        verify_tree(root2, m2)


# --------------------------------------------------------------------------- restore decisions
def test_restore_destination_is_fresh_and_never_overwrites(tmp_path: Path) -> None:
    spec = spec_at(tmp_path)
    first = restore_destination(spec, "sp1", None)
    assert first.name == "demo.restored-sp1" and not first.exists()
    first.mkdir(parents=True)
    assert restore_destination(spec, "sp1", None).name == "demo.restored-sp1-2"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert restore_destination(spec, "sp1", empty) == empty.resolve()
    (empty / "f").write_text("x")
    with pytest.raises(SavepointRefused, match="not an empty directory"):
        restore_destination(spec, "sp1", empty)
    with pytest.raises(SavepointRefused, match="not an empty directory"):
        restore_destination(spec, "sp1", empty / "f")


def test_savepoint_errors_say_refused_or_failed() -> None:
    """Refusals (nothing changed, no retry) and failures (retry may help) under one SavepointError."""
    from rewind.checkpoints.savepoint_errors import FileVanished, NothingToSave, SavepointError, SavepointNotFound
    from rewind.errors import EXIT_FAILED, EXIT_REFUSED, Failed, Refused

    for cls in (SavepointRefused, InvalidSavepointId, SavepointNotFound, NothingToSave):
        assert issubclass(cls, SavepointError) and issubclass(cls, Refused) and cls.exit_code == EXIT_REFUSED
    for cls in (SavepointCorrupt, FileVanished):
        assert issubclass(cls, SavepointError) and issubclass(cls, Failed) and cls.exit_code == EXIT_FAILED
    assert issubclass(InvalidSavepointId, ValueError)


def test_restore_warnings(tmp_path: Path) -> None:
    spec = spec_at(tmp_path)
    same = replace(manifest(), config_hash=spec.config_hash())
    assert restore_warnings(same, spec, "4.3.1") == []
    assert any("registry entry changed" in w for w in restore_warnings(manifest(), spec, "4.3.0"))
    assert any("Spark 4.3.0" in w for w in restore_warnings(same, spec, "5.0.0"))


# --------------------------------------------------------------------------- checkpoint pointer
def test_pointer_defaults_moves_atomically_and_keeps_history(tmp_path: Path) -> None:
    spec = spec_at(tmp_path)
    assert active_checkpoint(spec) == spec.checkpoint and read_pointer(spec) == []
    point_to(spec, tmp_path / "r1", "restored from savepoint a", restored_from="a")
    point_to(spec, tmp_path / "r2", "restored from savepoint b", restored_from="b")
    assert active_checkpoint(spec) == str((tmp_path / "r2").resolve())
    history = read_pointer(spec)
    assert [e.path for e in history] == [spec.checkpoint, str((tmp_path / "r1").resolve()),
                                         str((tmp_path / "r2").resolve())]
    assert history[-1].restored_from == "b" and history[0].reason == "registry default"
    assert [p.name for p in Path(spec.checkpoint).parent.iterdir()] == ["demo.active.json"]  # no temp files left


def test_unreadable_pointer_is_an_error_not_a_silent_fallback(tmp_path: Path) -> None:
    spec = spec_at(tmp_path)
    Path(spec.checkpoint).parent.mkdir(parents=True)
    Path(spec.checkpoint + ".active.json").write_text("{garbage")
    with pytest.raises(PointerError, match="active.json is unreadable"):
        active_checkpoint(spec)


# --------------------------------------------------------------------------- liveness
def test_liveness() -> None:
    now = 1000.0
    st = StreamStatus(stream="demo", state="running", pid=42, heartbeat=now - 5)
    assert liveness(st, now, lambda pid: True).running
    assert not liveness(st, now, lambda pid: False).running
    assert not liveness(None, now, lambda pid: True).running
    assert not liveness(replace(st, state="stopped"), now, lambda pid: True).running
    stale = liveness(replace(st, heartbeat=now - 10_000), now, lambda pid: True)
    assert not stale.running and "heartbeat" in stale.why


# --------------------------------------------------------------------------- S3 config
def test_s3_config_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment only: a running embedded platform's services.json is not read here (production code
    never reads it); the command line puts it in the environment when it starts, the environment winning per
    setting (``rewind.embedded.services.export_platform_env``)."""
    from rewind.embedded.services import PlatformInfo, export_platform_env

    env = {"REWIND_S3_BUCKET": "b1", "AWS_ENDPOINT_URL": "http://s3:9000", "AWS_ACCESS_KEY_ID": "k",
           "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1"}
    assert resolve_s3_config(env=env) == S3Config("b1", "http://s3:9000", "k", "s", "eu-west-1")
    assert resolve_s3_config("b2", env=env).bucket == "b2"
    services = tmp_path / "services"
    services.mkdir()
    info = PlatformInfo(str(services), "http://127.0.0.1:1234", "ak", "sk", "us-east-1", "rewind", "k:1", {}, {})
    (services / "services.json").write_text(json.dumps(info.__dict__))
    monkeypatch.setenv("REWIND_HOME", str(tmp_path))  # the platform is there, and still not read
    with pytest.raises(Exception, match="no S3 bucket"):
        resolve_s3_config(env={})
    environ: dict[str, str] = {}
    assert export_platform_env(services, environ)
    assert resolve_s3_config(env=environ) == S3Config.from_platform(info)
    # an explicit endpoint in the environment wins per setting; the platform fills the rest
    mixed = {"AWS_ENDPOINT_URL": "http://dead:1"}
    export_platform_env(services, mixed)
    got = resolve_s3_config(env=mixed)
    assert (got.endpoint, got.access_key, got.bucket) == ("http://dead:1", "ak", "rewind")
    nothing: dict[str, str] = {}
    assert not export_platform_env(tmp_path / "nothing-here", nothing) and nothing == {}


# --------------------------------------------------------------------------- --stop control flow
class _Store:
    def check(self) -> None:
        pass


@pytest.mark.parametrize("copy_fails,restart_fails", [(False, False), (True, False), (False, True), (True, True)])
def test_stop_savepoint_always_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_fails: bool,
                                        restart_fails: bool) -> None:
    import rewind.checkpoints.savepoints as sp
    import rewind.supervision.process_control as sc
    from rewind.checkpoints.savepoint_errors import RestartFailed
    from rewind.storage import S3Unreachable

    calls: list[str] = []

    def stop(spec: StreamSpec, timeout: float) -> bool:
        calls.append("stop")
        return True

    def copy(*_a: object, **_k: object) -> Manifest:
        calls.append("copy")
        if copy_fails:
            raise S3Unreachable("S3 at http://x is unreachable")
        return manifest()

    def restart() -> None:
        calls.append("restart")
        if restart_fails:
            raise sc.StreamControlError("exited during start-up")

    monkeypatch.setattr(sp, "create_savepoint", copy)
    expected: type[Exception] | None = S3Unreachable if copy_fails else RestartFailed if restart_fails else None
    if expected is None:
        made = sp.savepoint_with_stop(spec_at(tmp_path), _Store(), stop=stop, restart=restart)  # type: ignore[arg-type]
        assert made == manifest()
    else:
        with pytest.raises(expected) as exc:
            sp.savepoint_with_stop(spec_at(tmp_path), _Store(), stop=stop, restart=restart)  # type: ignore[arg-type]
        if restart_fails and not copy_fails:
            assert "is complete, but restarting demo failed" in str(exc.value)
        if restart_fails and copy_fails:
            assert "restarting demo failed too" in " ".join(getattr(exc.value, "__notes__", []))
    assert calls == ["stop", "copy", "restart"]


def test_stop_savepoint_does_not_restart_what_was_not_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rewind.checkpoints.savepoints as sp

    monkeypatch.setattr(sp, "create_savepoint", lambda *a, **k: manifest())
    restarted: list[bool] = []
    sp.savepoint_with_stop(spec_at(tmp_path), _Store(), stop=lambda spec, timeout: False,  # type: ignore[arg-type]
                           restart=lambda: restarted.append(True))
    assert restarted == []
