"""Stopping a managed service ends what it started in its own session, and only that.

Airflow runs each task in a process group of its own (the task SDK's supervisor ``setpgid``s it), so a
scheduler SIGKILLed after its grace left a running task behind (CI of 2df2c8f: test_airflow_stack). A
stream driver is started in a session of its own on purpose and must outlive whoever launched it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from rewind.runtime.processes import ManagedProcess

# The leader ignores SIGTERM (as a scheduler waiting for its tasks does), starts one child in a new
# process group of its session and one in a new session, writes their pids and waits.
LEADER = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
grouped = subprocess.Popen(sleeper, process_group=0)
detached = subprocess.Popen(sleeper, start_new_session=True)
open(sys.argv[1] + ".tmp", "w").write(f"{grouped.pid} {detached.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


def test_stop_ends_the_children_in_other_groups_of_its_session_and_spares_a_detached_one(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    proc = ManagedProcess("leader", [sys.executable, "-c", LEADER, str(pids_file)], tmp_path / "leader.log")
    proc.start()
    deadline = time.monotonic() + 30
    while not pids_file.exists():
        assert proc.alive() and time.monotonic() < deadline, (tmp_path / "leader.log").read_text()
        time.sleep(0.05)
    grouped, detached = (int(x) for x in pids_file.read_text().split())
    try:
        assert os.getpgid(grouped) != os.getpgid(proc.pid) and os.getsid(grouped) == os.getsid(proc.pid)
        assert os.getsid(detached) == detached
        proc.stop(grace=0.5)  # the leader ignores SIGTERM: SIGKILLed after the grace
        assert not proc.alive()
        assert _wait_gone(grouped), "a child in another group of the service's session outlived stop()"
        assert psutil.pid_exists(detached) and psutil.Process(detached).status() != psutil.STATUS_ZOMBIE, \
            "a child in a session of its own (a stream driver) was ended by stop()"
    finally:
        for pid in (grouped, detached):
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
