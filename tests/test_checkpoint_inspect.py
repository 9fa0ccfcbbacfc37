"""Checkpoint inspection on a real checkpoint written by the demo stream, damaged in each way."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rewind.checkpoints.inspection import NotACheckpoint, inspect_checkpoint
from rewind.checkpoints.logs import parse_commit_file, parse_offsets_file
from rewind.demo.producer import ProduceSpec, produce
from rewind.registry import load_registry
from tests.harness.registry_templates import demo_stream, write_registry

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory, platform, spark) -> Path:  # type: ignore[no-untyped-def]
    """A checkpoint of the demo transform (three RocksDB operators) after several batches."""
    from rewind.driver.runner import build_query

    work = tmp_path_factory.mktemp("cp")
    topic = "cp-inspect"
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=3000, partitions=2, malformed_every=50))
    write_registry(work / "s.yaml", demo_stream("cp", topic, work, sink_url=f"sqlite:///{work}/sink.db",
                                                 checkpoint=f"{work}/checkpoint"))
    spec = load_registry(work / "s.yaml").get("cp")
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
    query.awaitTermination(300)
    return Path(spec.checkpoint)


@pytest.fixture
def cp(real_checkpoint: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "checkpoint"
    shutil.copytree(real_checkpoint, copy)
    return copy


def test_healthy_checkpoint(cp: Path) -> None:
    rep = inspect_checkpoint(cp)
    assert rep.query_id and rep.errors == []
    assert rep.last_complete == rep.committed[-1] and len(rep.committed) >= 3
    assert len(rep.operators) >= 2, "the demo plan has several stateful operators"
    assert rep.recent[-1].offsets[0]["cp-inspect"]


@pytest.mark.parametrize("damage,kind", [
    (lambda cp, n: (cp / f"offsets/{n}").write_text((cp / f"offsets/{n}").read_text()[:40]), "truncated"),
    (lambda cp, n: (cp / f"commits/{n}").write_text(""), "empty"),
    (lambda cp, n: (cp / f"commits/{n}").write_text("v1\n{not json"), "unparseable"),
    (lambda cp, n: [f.unlink() for f in (cp / "state/0/0").glob(f"{n + 1}.*")], "missing_state"),
    (lambda cp, n: (cp / f"offsets/{n}").unlink(), "commit_without_offsets"),
])
def test_damage_is_named_and_last_complete_moves_back(cp: Path, damage, kind: str) -> None:  # type: ignore[no-untyped-def]
    last = inspect_checkpoint(cp).last_complete
    assert last is not None
    damage(cp, last)
    rep = inspect_checkpoint(cp)
    assert kind in {p.kind for p in rep.errors}, rep.problems
    assert rep.last_complete is not None and rep.last_complete < last


def test_uncommitted_batch_is_normal(cp: Path) -> None:
    last = inspect_checkpoint(cp).last_complete
    (cp / f"commits/{last}").unlink()
    rep = inspect_checkpoint(cp)
    assert rep.errors == [] and [p.kind for p in rep.problems] == ["uncommitted"]
    assert rep.last_complete == last - 1


def test_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(NotACheckpoint, match="not a Spark checkpoint"):
        inspect_checkpoint(tmp_path)
    with pytest.raises(NotACheckpoint, match="not a directory"):
        inspect_checkpoint(tmp_path / "nope")


def test_cli_inspect_json_and_exit_codes(cp: Path) -> None:
    run = lambda *a: subprocess.run([sys.executable, "-m", "rewind.cli", "checkpoint", "inspect", *a],  # noqa: E731
                                    capture_output=True, text=True, cwd=ROOT, timeout=60)
    ok = run(str(cp), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["last_complete"] is not None
    (cp / "commits" / str(json.loads(ok.stdout)["committed"]["last"])).write_text("")
    assert run(str(cp)).returncode == 4  # problems found
    assert run(str(cp.parent / "missing")).returncode == 3  # refused: not a checkpoint


def test_parsers_refuse_garbage() -> None:
    with pytest.raises(ValueError, match="version"):
        parse_offsets_file("v9\n{}\n{}")
    with pytest.raises(ValueError, match="truncated"):
        parse_offsets_file("v1\n{}")
    assert parse_commit_file('v1\n{"nextBatchWatermarkMs":0}') == {"nextBatchWatermarkMs": 0}


def test_a_launch_that_finds_the_driver_died_unseen_repairs_its_checkpoint(cp: Path, tmp_path: Path) -> None:
    """The driver died between supervisor runs while writing its newest offsets file: the next
    launch records the death and rolls the checkpoint back to its last complete batch before the
    relaunch, as the watch's path does (``recover_checkpoint``)."""
    import time

    from rewind.control.status import StreamStatus, write_status
    from rewind.paths import status_file
    from rewind.registry import RestartSpec, StreamSpec
    from rewind.supervision.failures import read_failures
    from rewind.supervision.reconcile import recover_unseen_death

    last = inspect_checkpoint(cp).committed[-1]
    newest = cp / "offsets" / str(last)
    newest.write_bytes(newest.read_bytes()[: len(newest.read_bytes()) // 2])
    assert inspect_checkpoint(cp).errors
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    spec = StreamSpec.model_construct(name="cp", status_dir=str(tmp_path / "status"), checkpoint=str(cp),
                                      restart=RestartSpec(strategy="fixed-delay", max_attempts=3, delay="0 seconds"))
    write_status(status_file(spec), StreamStatus(stream="cp", state="running", pid=gone.pid,
                                                                  heartbeat=time.time() - 1, last_batch_id=last))
    found = recover_unseen_death(spec)
    assert found and found["checkpoint"]["action"] == "repaired", found
    assert found["checkpoint"]["last_complete"] == last - 1 and not inspect_checkpoint(cp).errors
    assert [f["batch_id"] for f in read_failures(spec)["failures"]] == [last]
