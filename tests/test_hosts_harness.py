"""The two-host harness (``tests.harness.hosts``) itself: a program paused and resumed on a host is reaped.

Why: ``nsenter`` mirrors job control (it stops itself when its child stops and continues the child only
when it is continued). Resumed in the wrong order, a fenced zombie exited but stayed unreaped, and
``test_hosts_fencing`` timed out waiting for it in CI.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from tests.harness import hosts

pytestmark = pytest.mark.skipif(not hosts.available(), reason="needs root and unshare")
PROGRAM = "import sys, time; print('up', flush=True); time.sleep(float(sys.argv[1])); print('done', flush=True)"


def test_a_paused_and_resumed_program_is_reaped_when_it_exits(tmp_path: Path) -> None:
    host = hosts.Host("host-p").start()
    try:
        for i in range(5):
            proc = host.spawn([sys.executable, "-c", PROGRAM, "0.5"], {}, tmp_path / f"p{i}.log")
            deadline = time.monotonic() + 20
            while "up" not in proc.text() and time.monotonic() < deadline:
                time.sleep(0.02)
            proc.signal(signal.SIGSTOP)
            time.sleep(0.3)  # nsenter has seen its child stop
            proc.signal(signal.SIGCONT)
            assert proc.wait(timeout=20) == 0, f"run {i}: {proc.text()}"
            assert proc.text().split() == ["up", "done"]
    finally:
        host.stop()


def test_stopping_a_host_ends_a_program_left_paused(tmp_path: Path) -> None:
    host = hosts.Host("host-q").start()
    proc = host.spawn([sys.executable, "-c", PROGRAM, "600"], {}, tmp_path / "q.log")
    deadline = time.monotonic() + 20
    while "up" not in proc.text() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.signal(signal.SIGSTOP)
    time.sleep(0.3)
    started = time.monotonic()
    host.stop()
    assert not proc.alive() and time.monotonic() - started < 10
