"""A driver's scratch space: the directories of ended drivers are swept, nothing else (``rewind.driver.scratch``).

The end to end half (a SIGKILLed driver's Spark files gone once the next driver runs, the running driver's own
in use) is in every crash scenario (``tests/harness/crash.py``)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from rewind.driver import scratch


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for key in scratch.DEPLOYMENT_KEYS:
        monkeypatch.delenv(key, raising=False)
    return scratch.scratch_root("s")


def _with_a_file(path: Path, size: int = 1000) -> Path:
    (path / "spark-x" / "userFiles").mkdir(parents=True)
    (path / "spark-x" / "userFiles" / "a.jar").write_bytes(b"j" * size)
    return path


def test_only_this_hosts_ended_drivers_lose_their_directory(root: Path) -> None:
    ended = subprocess.Popen(["sleep", "30"])
    ended_name = scratch.own_name(ended.pid)
    ended.kill()
    ended.wait()
    me = scratch.own_name()
    host, pid, start = me.rsplit("-", 2)
    reused = f"{host}-{pid}-{int(start) - 5000}"  # this pid, another start: a driver before the pid was reused
    _, ended_pid, ended_start = ended_name.rsplit("-", 2)
    other_host = f"elsewhere-{ended_pid}-{ended_start}"
    keep = [me, other_host, f"{host}x-1-1", "notes", f"{host}-abc-1"]  # a pid means nothing on another host
    for name in [ended_name, reused, *keep]:
        _with_a_file(root / name)

    removed, freed = scratch.sweep(root)

    assert sorted(p.name for p in removed) == sorted([ended_name, reused]) and freed == 2000
    assert sorted(p.name for p in root.iterdir()) == sorted(keep)


def test_a_driver_gets_its_own_directory_unless_the_deployment_chose_one(root: Path) -> None:
    ended = subprocess.Popen(["sleep", "30"])
    name = scratch.own_name(ended.pid)
    ended.kill()
    ended.wait()
    _with_a_file(root / name)

    mine = scratch.driver_local_dir("s", {})

    assert mine == str(root / scratch.own_name()) and Path(mine).is_dir() and not (root / name).exists()
    assert scratch.driver_local_dir("s", {"spark.local.dir": "/data/spark"}) is None
    assert scratch.driver_local_dir("s", {}, {"SPARK_LOCAL_DIRS": "/data/a,/data/b"}) is None
    assert scratch.driver_local_dir("s", {}, {"LOCAL_DIRS": "/yarn/nm/usercache/app"}) is None  # a YARN container


def test_a_directory_it_cannot_create_leaves_sparks_default(root: Path) -> None:
    root.parent.mkdir(parents=True)
    root.write_text("a file where the directory should be")
    assert scratch.driver_local_dir("s", {}) is None
