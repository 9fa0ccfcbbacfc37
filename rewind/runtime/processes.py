"""Child processes that never outlive their owner: free ports, readiness, logs, teardown.

Every embedded service (Kafka, SeaweedFS, Airflow, the stream drivers) runs in its own session
with its output in a log file, is checked for readiness with a timeout that names the log, and
is stopped with SIGTERM then SIGKILL (SeaweedFS takes >8 s to honour SIGTERM, a Kafka broker's
controlled shutdown a few seconds). Linux's parent-death signal ends a service whose owner was
SIGKILLed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from rewind.errors import Failed

log = logging.getLogger(__name__)


class ServiceError(Failed, RuntimeError):
    """A service failed to start; the message names it, the cause when known, and its log."""


#: Ports this process has handed out: the kernel may return a port again right after it was closed,
#: and a platform picks several before anything listens (SeaweedFS's S3 and its gRPC port were once
#: the same port, and a Kafka port once one of SeaweedFS's: "address already in use").
_HANDED_OUT: set[int] = set()


#: ``REWIND_PORT_CLASS=i/n``: this process and its children hand out only ports ``p`` with
#: ``p % n == i``, from below the kernel's ephemeral range (32768-60999 by default), so ``n``
#: processes running side by side (the test suite's pytest-xdist workers, tests/conftest.py) never
#: pick the same port, and no outgoing connection takes a port between its pick and its bind.
PORT_CLASS_ENV = "REWIND_PORT_CLASS"
_CLASS_PORTS = range(20000, 32768)


def _port_class() -> tuple[int, int] | None:
    raw = os.environ.get(PORT_CLASS_ENV, "")
    if not raw:
        return None
    try:
        index, count = (int(x) for x in raw.split("/"))
    except ValueError:
        raise ValueError(f"{PORT_CLASS_ENV}={raw!r}: expected INDEX/COUNT, e.g. 0/2") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"{PORT_CLASS_ENV}={raw!r}: INDEX must be in 0..COUNT-1")
    return index, count


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before (within this
    process's port class, if ``REWIND_PORT_CLASS`` sets one)."""
    cls = _port_class()
    if cls is not None:
        index, count = cls
        first = _CLASS_PORTS.start + (index - _CLASS_PORTS.start) % count  # the first p with p % n == i
        for _ in range(10_000):
            port = random.randrange(first, _CLASS_PORTS.stop, count)
            if port not in _HANDED_OUT and _bindable(port):
                _HANDED_OUT.add(port)
                return port
        raise ServiceError(f"no free port of class {index}/{count} in {_CLASS_PORTS.start}-{_CLASS_PORTS.stop - 1}")
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(check: Callable[[], bool], timeout: float, what: str, log_path: Path | None = None,
               alive: Callable[[], bool] | None = None,
               explain: Callable[[str], str | None] | None = None) -> None:
    """Poll ``check`` until it is true; fail naming ``what``, the cause (``explain`` reads the log
    tail and may name it) and the log to read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise ServiceError(_failure(f"{what} exited during start-up", log_path, explain))
        try:
            if check():
                return
        except Exception:  # readiness probes fail until the service is up
            pass
        time.sleep(0.2)
    raise ServiceError(_failure(f"{what} not ready after {timeout:.0f}s", log_path, explain))


def _failure(head: str, log_path: Path | None, explain: Callable[[str], str | None] | None) -> str:
    tail = log_tail(log_path, 40)
    cause = explain(tail) if explain else None
    short = "\n".join(tail.splitlines()[-15:])
    return f"{head}{': ' + cause if cause else ''}; see {log_path}:\n{short}"


def log_tail(path: Path | None, lines: int = 15) -> str:
    """The last lines of a log, for error messages that show why a process died."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class ManagedProcess:
    """A child process in its own session, with its output in a log file."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    death_signal: int | None = signal.SIGTERM  # sent by Linux if our process dies; None: detached
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "ab")
        full_env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT, env=full_env,
                                     cwd=self.cwd, start_new_session=True,
                                     preexec_fn=parent_death_signal(self.death_signal) if self.death_signal else None)
        logf.close()
        log.info("started %s pid=%s log=%s", self.name, self.proc.pid, self.log_path)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace``; then end what the process started in
        other groups of its session (Airflow runs each task in a group of its own: a scheduler SIGKILLed
        mid-task left it running). What it started in a session of its own (a stream driver) stays."""
        if self.proc is None:
            return
        strays = session_descendants(self.proc.pid)
        terminate_group(self.proc.pid, grace)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - already SIGKILLed
            pass
        end_processes(strays, grace=5.0)

    def kill(self) -> None:
        """SIGKILL the process group at once (a crash, for fault tests)."""
        if self.proc is None:
            return
        terminate_group(self.proc.pid, grace=0.0)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


def parent_death_signal(sig: int) -> Callable[[], None] | None:
    """A preexec_fn asking Linux to signal the child when its parent dies (no orphaned services).

    Linux ties this to the thread that started the child: start services from a long-lived thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None

    def preexec() -> None:
        libc.prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def session_descendants(pid: int) -> list[psutil.Process]:
    """The descendants of ``pid`` in its session (not the ones that started a session of their own)."""
    try:
        sid = os.getsid(pid)
        children = psutil.Process(pid).children(recursive=True)
    except (psutil.Error, ProcessLookupError):
        return []
    found = []
    for child in children:
        try:
            if os.getsid(child.pid) == sid:
                found.append(child)
        except (ProcessLookupError, PermissionError):
            continue
    return found


def end_processes(procs: list[psutil.Process], grace: float = 5.0) -> None:
    """SIGTERM those of ``procs`` still running (psutil checks a pid was not reused), SIGKILL them after ``grace``."""
    alive = [p for p in procs if p.is_running()]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, left = psutil.wait_procs(alive, timeout=grace)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    if alive:
        log.info("ended %d leftover process(es) %s (%d SIGKILLed)", len(alive), [p.pid for p in alive], len(left))


def terminate_group(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group of ``pid``, then SIGKILL whatever is left after ``grace``
    (``grace=0``: SIGKILL at once)."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    if grace > 0:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                break
            time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def wait_exit(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` s for process ``pid`` to exit; True when it has (or was gone already).

    Linux's pidfd (``os.pidfd_open``) becomes readable when the process exits, so an event loop
    learns of the exit from the kernel at once instead of at its next poll. Where pidfd is missing
    (another OS, or a pid of another namespace), it sleeps out the timeout and says False; the
    caller's own check then decides.
    """
    import asyncio

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (OSError, AttributeError):
        await asyncio.sleep(timeout)
        return False
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[bool] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(True)

    loop.add_reader(fd, readable)
    try:
        done, _ = await asyncio.wait([exited], timeout=timeout)
        return bool(done)
    finally:
        loop.remove_reader(fd)
        os.close(fd)
        if not exited.done():
            exited.cancel()
