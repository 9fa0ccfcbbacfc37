"""Another "host" on this machine: its own PID, mount and UTS namespaces, kept by a tiny init.

Why: Rewind's control plane must work when the processes of one stream (its driver, the
supervisor's tasks, a standby, a replay) run on different hosts that share only Kafka, S3, the
checkpoint and the sink. A ``Host`` has a hostname of its own (``--uts``; resolvable on that host
only, through a private ``/etc/hosts``, as Java insists), a process table of its own (``--pid
--mount-proc``: no process of another host is visible, and no pid means anything across hosts) and
private directories (a tmpfs over each of ``private``, in its own mount namespace: what one host
writes there, no other sees). The network namespace is shared, so services on loopback stay
reachable. Needs root (``unshare``, ``nsenter``); ``available()`` says whether this one can.

``start`` makes the host: ``unshare`` runs a small Python init as PID 1 that reaps orphans and
lives until the host is stopped. ``spawn`` starts programs in it (``nsenter``); a program killed
there leaves the rest of the host alone (a Celery worker killed leaves the stream it launched
running), and ``stop`` ends every process of the host at once (the kernel does, when PID 1 dies),
so nothing outlives a test.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["Host", "HostProcess", "available", "fenced_exit_problem"]

#: PID 1 of a host: reap every orphan (detached drivers end as orphans), live until killed.
INIT = ("import os, signal, time\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(0))\nprint('ready', flush=True)\n"
        "while True:\n    try:\n        os.wait()\n    except ChildProcessError:\n        time.sleep(0.5)\n")


def available() -> bool:
    """Whether namespaces can be made here (root, ``unshare`` and ``nsenter``)."""
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in ("unshare", "nsenter"))


def fenced_exit_problem(log: str, line: str) -> str | None:
    """What is wrong with a fenced driver's log (None: nothing): it must say ``refused: <line>``
    exactly once, and Rewind must log nothing after it (its JVM, outliving it a moment, may print)."""
    lines = log.splitlines()
    said = [i for i, text in enumerate(lines) if text == f"refused: {line}"]
    if len(said) != 1:
        return f"'refused: {line}' was said {len(said)} times; the log ends:\n{log[-3000:]}"
    later = [text for text in lines[said[0] + 1:] if re.match(r"\d{4}-\d\d-\d\d [\d:,]+ \w+ rewind\.", text)]
    return f"the fenced driver went on: {later}" if later else None


def _tree(pid: int | None) -> list[psutil.Process]:
    if pid is None:
        return []
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _send(procs: list[psutil.Process], *sigs: int) -> None:
    """Each of ``sigs`` in turn to each process; one that is gone is skipped."""
    for proc in procs:
        try:
            for sig in sigs:
                proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def _kill_pid(pid: int | None, sig: int) -> None:
    if pid is not None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class HostProcess:
    """One program started on a ``Host``."""

    host: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int | None:
        """The program's pid as seen from outside its host (``nsenter``'s child), once it runs."""
        try:
            children = psutil.Process(self.popen.pid).children()
        except psutil.NoSuchProcess:
            return None
        return children[0].pid if children else None

    def session(self) -> list[psutil.Process]:
        """Every process of the program's session: its children, and those of them orphaned since."""
        pid = self.pid
        if pid is None:
            return []
        try:
            sid = os.getsid(pid)
        except ProcessLookupError:
            return []
        out = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == sid:
                    out.append(proc)
            except (ProcessLookupError, PermissionError):
                pass
        return out

    def signal(self, sig: int) -> None:
        """``sig`` to every process of the program's session (SIGSTOP/SIGCONT pause and resume a driver,
        its JVM and its Python workers).

        ``nsenter`` (the session's leader, outside the host) mirrors job control: when its child stops it
        stops itself, and continues its child only when it is continued. A SIGCONT therefore goes to the
        program's processes first (their stop can then no longer be reported), then to ``nsenter`` until it
        runs: sent the other way round, ``nsenter`` could see the stop after its SIGCONT, stop itself for
        good and never reap the program (``wait`` then times out on a program that has exited)."""
        procs = self.session()
        if sig == signal.SIGCONT:
            procs = [p for p in procs if p.pid != self.popen.pid]
        _send(procs, sig)
        if sig == signal.SIGCONT:
            self._resume_nsenter()

    def _resume_nsenter(self, settle_s: float = 0.5) -> None:
        deadline = time.monotonic() + settle_s
        try:
            leader = psutil.Process(self.popen.pid)
            leader.send_signal(signal.SIGCONT)
            while time.monotonic() < deadline:  # it may act on a stop it read just before its child went on
                time.sleep(0.05)
                if leader.status() == psutil.STATUS_STOPPED:
                    leader.send_signal(signal.SIGCONT)
        except psutil.NoSuchProcess:
            pass

    def terminate(self) -> None:
        """SIGTERM to the program only (a driver stops after its batch in flight)."""
        _kill_pid(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the program and its children (not the processes it detached into their own session)."""
        _send(self.session(), signal.SIGCONT, signal.SIGKILL)
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Host:
    """A hostname and the directories only this host sees (see the module docstring)."""

    name: str
    private: list[Path] = field(default_factory=list)
    started: list[HostProcess] = field(default_factory=list)
    init: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _etc: str = field(default="", repr=False)

    @property
    def init_pid(self) -> int | None:
        """PID 1 of the host, as seen from outside."""
        if self.init is None:
            return None
        try:
            children = psutil.Process(self.init.pid).children()
        except psutil.NoSuchProcess:
            return None
        return children[0].pid if children else None

    def start(self, timeout: float = 20.0) -> Host:
        dirs = [shlex.quote(str(d)) for d in self.private]
        mounts = "".join(f"mkdir -p {d} && mount -t tmpfs -o size=512m tmpfs {d} && " for d in dirs)
        self._etc = tempfile.mkdtemp(prefix=f"rewind-{self.name}-etc-")  # stays empty outside; removed by stop
        etc, name = shlex.quote(self._etc), shlex.quote(self.name)
        # first line: a reverse look-up of 127.0.0.1 (getfqdn, Airflow's hostname) names this host
        resolve = (f"mount -t tmpfs tmpfs {etc} && {{ echo \"127.0.0.1 {name}\"; cat /etc/hosts; }} > {etc}/hosts && "
                   f"mount --bind {etc}/hosts /etc/hosts && ")
        script = f"hostname {name} && {resolve}{mounts}exec \"$@\""
        cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--uts", "--kill-child", "--",
               "sh", "-c", script, "sh", sys.executable, "-c", INIT]
        self.init = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        assert self.init.stdout is not None
        line = self.init.stdout.readline().decode(errors="replace").strip()
        deadline = time.monotonic() + timeout
        while self.init_pid is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if line != "ready" or self.init_pid is None:
            self.stop()
            raise RuntimeError(f"host {self.name} did not start: {line!r}")
        return self

    def spawn(self, argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> HostProcess:
        """Start ``argv`` on this host with ``env`` (Spark told to bind to loopback, like the services)."""
        if self.init_pid is None:
            self.start()
        cmd = ["nsenter", "--target", str(self.init_pid), "--pid", "--mount", "--uts", "--", *argv]
        log.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**env, "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(log, "ab") as out:
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                                     cwd=cwd or Path.cwd(), start_new_session=True)
        proc = HostProcess(self.name, popen, log)
        self.started.append(proc)
        deadline = time.monotonic() + 10
        while proc.pid is None and proc.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        return proc

    def processes(self, cmdline_part: str = "") -> list[psutil.Process]:
        """The processes of this host (its PID namespace) whose command line contains ``cmdline_part``."""
        pid = self.init_pid
        if pid is None:
            return []
        ns = os.readlink(f"/proc/{pid}/ns/pid")
        out = []
        for proc in psutil.process_iter():
            try:
                if proc.pid != pid and os.readlink(f"/proc/{proc.pid}/ns/pid") == ns \
                        and cmdline_part in " ".join(proc.cmdline()):
                    out.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
                pass
        return out

    def read(self, path: Path) -> str:
        """A file as this host sees it (its private directories included)."""
        if self.init_pid is None:
            return ""
        done = subprocess.run(["nsenter", "--target", str(self.init_pid), "--mount", "--", "cat", str(path)],
                              capture_output=True, timeout=30)
        return done.stdout.decode(errors="replace")

    def stop(self) -> None:
        """End every process of the host (its PID 1 dies, the kernel kills the rest)."""
        _send(_tree(self.init_pid), signal.SIGCONT)
        _kill_pid(self.init_pid, signal.SIGKILL)
        for started in self.started:  # a program left paused dies paused: its nsenter must run to reap it
            if started.alive():
                started._resume_nsenter()
        for popen in [p.popen for p in self.started] + ([self.init] if self.init else []):
            try:
                popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                popen.kill()
        if self._etc:
            shutil.rmtree(self._etc, ignore_errors=True)
