"""Repair of real demo checkpoints damaged in each way; the resumed stream stays exactly once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.repair import RepairRefused, plan_repair, repair_checkpoint
from rewind.demo.producer import ProduceSpec, produce
from rewind.proof.verify import verify_stream
from rewind.registry import StreamSpec, load_registry
from tests.harness.registry_templates import demo_stream, write_registry

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "cp-repair"


def _registry(work: Path) -> StreamSpec:
    write_registry(work / "s.yaml", demo_stream("rp", TOPIC, work, max_offsets=700, sink_url=f"sqlite:///{work}/sink.db",
                                                 checkpoint=f"{work}/checkpoint"))
    return load_registry(work / "s.yaml").get("rp")


@pytest.fixture(scope="module")
def original(tmp_path_factory, platform, spark) -> Path:  # type: ignore[no-untyped-def]
    """A demo checkpoint and its sink after several batches (malformed, late and duplicate records too)."""
    from rewind.driver.runner import build_query

    work = tmp_path_factory.mktemp("repair-orig")
    produce(platform.kafka_bootstrap, ProduceSpec(topic=TOPIC, count=2500, partitions=2, malformed_every=40,
                                                  duplicate_every=30, id_prefix="a"))
    spec = _registry(work)
    build_query(spark, spec, platform.kafka_bootstrap, available_now=True).awaitTermination(300)
    return work


@pytest.fixture
def copy(original: Path, tmp_path: Path) -> tuple[StreamSpec, Path]:
    """The checkpoint and the sink, copied: each test damages its own."""
    shutil.copytree(original / "checkpoint", tmp_path / "checkpoint")
    for f in original.glob("sink.db*"):  # WAL mode: the -wal file holds recent commits
        shutil.copy(f, tmp_path / f.name)
    spec = _registry(tmp_path)
    return spec, Path(spec.checkpoint)


def _last_state_file(cp: Path, n: int) -> None:
    for f in (cp / "state/1/1").glob(f"{n + 1}.*"):
        f.unlink()


DAMAGE: dict[str, Callable[[Path, int], None]] = {
    "truncated": lambda cp, n: (cp / f"offsets/{n}").write_text((cp / f"offsets/{n}").read_text()[:40]),
    "empty": lambda cp, n: (cp / f"commits/{n}").write_text(""),
    "unparseable": lambda cp, n: (cp / f"commits/{n}").write_text("v1\n{garbage"),
    "missing_state": _last_state_file,
    "commit_without_offsets": lambda cp, n: (cp / f"offsets/{n}").unlink(),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_repair_rolls_back_and_resumed_stream_is_exactly_once(kind: str, copy, platform, spark) -> None:  # type: ignore[no-untyped-def]
    from rewind.driver.runner import build_query

    spec, cp = copy
    last = inspect_checkpoint(cp).last_complete
    assert last is not None and last >= 2
    DAMAGE[kind](cp, last)
    damaged = inspect_checkpoint(cp)
    assert kind in {p.kind for p in damaged.errors}, damaged.problems
    target = damaged.last_complete
    assert target is not None and target < last

    record = repair_checkpoint(cp)
    assert record["result"] == "repaired", record
    assert record["rolled_back_to_batch"] == target
    quarantine = Path(record["quarantine"])
    assert quarantine.parent.name == "checkpoint.quarantine" and (quarantine / "record.json").exists()
    saved = json.loads((quarantine / "record.json").read_text())
    assert saved["moved"] and all((quarantine / m["file"]).exists() for m in saved["moved"]), \
        "every moved file is kept in the quarantine"
    repaired = inspect_checkpoint(cp)
    assert repaired.errors == [] and repaired.last_complete == target
    assert repair_checkpoint(cp)["result"] == "healthy: nothing to repair"

    # More data arrives; the stream resumes from the repaired checkpoint and catches up.
    produce(platform.kafka_bootstrap, ProduceSpec(topic=TOPIC, count=400, partitions=2, malformed_every=40,
                                                  id_prefix=f"b-{kind}"))
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
    query.awaitTermination(300)
    assert query.exception() is None
    report = verify_stream(spec, platform.kafka_bootstrap)
    assert report.ok, str(report)
    assert report.kafka_records > 2500


def test_repair_refuses_without_complete_batch_and_when_running(copy) -> None:  # type: ignore[no-untyped-def]
    _, cp = copy
    with pytest.raises(RepairRefused, match="stop it first"):
        repair_checkpoint(cp, running="stream 'rp' is running (pid 1)")
    for f in (cp / "commits").iterdir():
        f.write_text("")
    before = sorted(p.relative_to(cp) for p in cp.rglob("*"))
    with pytest.raises(RepairRefused, match="no complete batch.*savepoint restore"):
        repair_checkpoint(cp)
    assert sorted(p.relative_to(cp) for p in cp.rglob("*")) == before, "a refused repair changes nothing"
    assert not (cp.parent / "checkpoint.quarantine").exists()


def test_plan_keeps_a_readable_planned_batch(copy) -> None:  # type: ignore[no-untyped-def]
    from rewind.checkpoints.state_files import list_state
    from rewind.storage import LocalStorage

    _, cp = copy
    last = inspect_checkpoint(cp).last_complete
    (cp / f"commits/{last}").write_text("")
    store = LocalStorage(cp)
    plan = plan_repair(inspect_checkpoint(store), list_state(store))
    moved = {m.file for m in plan.moves}
    assert plan.rolled_back_to == last - 1 and plan.keeps_planned_batch == last
    assert f"commits/{last}" in moved and f"offsets/{last}" not in moved, "batch re-runs with the same range"
    assert any(f.endswith((f"/{last + 1}.zip", f"/{last + 1}.changelog")) for f in moved), \
        "state written by the uncommitted batch moves"


def test_cli_repair_dry_run_then_repair(copy) -> None:  # type: ignore[no-untyped-def]
    spec, cp = copy
    last = inspect_checkpoint(cp).last_complete
    (cp / f"commits/{last}").write_text("v1\n{")
    run = lambda *a: subprocess.run([sys.executable, "-m", "rewind.cli", "checkpoint", "repair", *a],  # noqa: E731
                                    capture_output=True, text=True, cwd=ROOT, timeout=60)
    dry = run(str(cp), "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["moved"] and (cp / f"commits/{last}").exists()
    done = run("rp", "--registry", str(cp.parent / "s.yaml"))
    assert done.returncode == 0 and "repaired" in done.stdout, done.stdout + done.stderr
    assert not (cp / f"commits/{last}").exists()
    assert run(str(cp.parent / "nope")).returncode == 3  # refused: not a checkpoint
