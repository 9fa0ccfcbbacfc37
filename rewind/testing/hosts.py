"""Another "host" on this machine: a process tree in its own PID, mount and UTS namespaces.

Why: Rewind's control plane must work when the processes of one stream (its driver, the
supervisor's tasks, a standby, a replay) run on different hosts that share only Kafka, S3, the
checkpoint and the sink. A ``Host`` gives its processes a hostname of their own (``--uts``), a
process table of their own (``--pid --mount-proc``: no process of another host is visible, and no
pid means anything across hosts) and private directories (a tmpfs mounted over each of ``private``
in its own mount namespace: what one host writes there, no other sees). The network namespace is
shared, so services on loopback stay reachable. Needs root (``unshare``), which the test machines
have; ``available()`` says whether this one can.

Inside, the program runs as PID 1 of its namespace (``exec``): when it exits, the kernel ends every
other process of that host (its JVM included), so nothing outlives a test. From outside, its pid
is the child of the ``unshare`` process (``HostProcess.pid``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["Host", "HostProcess", "available"]


def available() -> bool:
    """Whether namespaces can be made here (root and ``unshare``)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


@dataclass
class HostProcess:
    """One program started on a ``Host``."""

    host: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int | None:
        """The program's pid as seen from outside (PID 1 of its host), once it runs."""
        try:
            children = psutil.Process(self.popen.pid).children()
        except psutil.NoSuchProcess:
            return None
        return children[0].pid if children else None

    def tree(self) -> list[psutil.Process]:
        pid = self.pid
        if pid is None:
            return []
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every process of the program (SIGSTOP/SIGCONT pause and resume a driver with its JVM)."""
        for proc in self.tree():
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def terminate(self) -> None:
        """SIGTERM to the program only (it stops after its batch in flight)."""
        pid = self.pid
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the program: the kernel ends the rest of its host's processes."""
        pid = self.pid
        if pid is not None:
            self.signal(signal.SIGCONT)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.popen.poll() is None:
            self.popen.kill()
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Host:
    """A hostname and the directories only this host sees (see the module docstring)."""

    name: str
    private: list[Path] = field(default_factory=list)
    started: list[HostProcess] = field(default_factory=list)
    _etc: list[str] = field(default_factory=list, repr=False)

    def spawn(self, argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> HostProcess:
        """Start ``argv`` on this host with ``env`` (plus Spark's local hostname, which nobody resolves)."""
        dirs = [shlex.quote(str(d)) for d in self.private]
        mounts = "".join(f"mkdir -p {d} && mount -t tmpfs -o size=512m tmpfs {d} && " for d in dirs)
        etc_dir = tempfile.mkdtemp(prefix=f"rewind-{self.name}-etc-")  # empty outside; removed by stop_all
        self._etc.append(etc_dir)
        etc = shlex.quote(etc_dir)
        name = shlex.quote(self.name)
        # The hostname resolves on its own host (Java's getLocalHost insists), through a private /etc/hosts.
        resolve = (f"mount -t tmpfs tmpfs {etc} && {{ cat /etc/hosts; echo \"127.0.0.1 {name}\"; }} > {etc}/hosts && "
                   f"mount --bind {etc}/hosts /etc/hosts && ")
        script = f"hostname {name} && {resolve}{mounts}exec \"$@\""
        cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--uts", "--kill-child", "--",
               "sh", "-c", script, "sh", *argv]
        log.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**env, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost"}
        with open(log, "ab") as out:
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                                     cwd=cwd, start_new_session=True)
        proc = HostProcess(self.name, popen, log)
        self.started.append(proc)
        deadline = time.monotonic() + 10
        while proc.pid is None and proc.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            proc.kill()
        for etc in self._etc:
            shutil.rmtree(etc, ignore_errors=True)
