"""A driver's scratch space: the directories of ended drivers are swept, nothing else (``rewind.driver.scratch``).

The end to end half (a SIGKILLed driver's Spark files gone once the next driver runs, the running driver's own
in use) is in every crash scenario (``tests/harness/crash.py``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from harness import hosts

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
    host, where, pid, start = me.rsplit("-", 3)
    reused = f"{host}-{where}-{pid}-{int(start) - 5000}"  # this pid, another start: a driver before the pid was reused
    _, _, ended_pid, ended_start = ended_name.rsplit("-", 3)
    other_host = f"elsewhere-0123456789-{ended_pid}-{ended_start}"
    other_namespace = f"{host}-0123456789-{ended_pid}-{ended_start}"  # same name, other PID namespace or boot
    before = f"{host}-{ended_pid}-{ended_start}"  # the name's earlier form, which said nothing of the namespace
    keep = [me, other_host, other_namespace, before, f"{host}x-{where}-1", "notes", f"{host}-{where}-abc-1"]
    for name in [ended_name, reused, *keep]:
        _with_a_file(root / name)

    removed, freed = scratch.sweep(root)

    assert sorted(p.name for p in removed) == sorted([ended_name, reused]) and freed == 2000
    assert sorted(p.name for p in root.iterdir()) == sorted(keep)


@pytest.mark.skipif(not hosts.available(), reason="needs root, unshare and nsenter (tests/harness/hosts.py)")
def test_a_driver_in_another_pid_namespace_keeps_its_directory(root: Path) -> None:
    """Two hosts of the same name sharing a temp dir (containers, ``unshare --pid --mount``): a driver
    starting in its own PID namespace sees the other's pid as gone, and must leave its directory alone."""
    running = subprocess.Popen(["sleep", "60"])
    try:
        theirs = _with_a_file(root / scratch.own_name(running.pid))
        code = ("import sys, tempfile; tempfile.tempdir = sys.argv[1]\n"
                "from rewind.driver import scratch\n"
                "import psutil; assert not psutil.pid_exists(int(sys.argv[2]))  # their pid means nothing here\n"
                "print(scratch.driver_local_dir('s', {}, {}))\n")
        child = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--", sys.executable, "-c", code,
                                tempfile.gettempdir(), str(running.pid)], capture_output=True, text=True, timeout=60,
                               cwd=Path(__file__).resolve().parents[1])
        assert child.returncode == 0, child.stderr[-2000:]
        assert theirs.is_dir() and (theirs / "spark-x" / "userFiles" / "a.jar").exists(), child.stdout
        assert Path(child.stdout.strip()).parent == root and Path(child.stdout.strip()).name != theirs.name
    finally:
        running.kill()
        running.wait()


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
