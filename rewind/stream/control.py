"""Is a stream running, stop it gracefully, launch it detached.

Why here and not in the runner: a savepoint with ``--stop`` and a restore act on a
stream from another process; all they have is the status file (pid, heartbeat) the
runner keeps, and the runner's promise that SIGTERM means "stop after the current
batch commits".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rewind.paths import status_path
from rewind.platform.processes import log_tail, pid_alive
from rewind.registry import StreamSpec
from rewind.stream.control_errors import DriverRunning, StreamControlError, StreamFailed
from rewind.stream.status import StreamStatus, read_status

ACTIVE_STATES = ("starting", "running", "stopping")
#: A heartbeat older than this (with a live pid) is a hung driver or a reused pid, not a running stream.
STALE_AFTER_S = 600.0


@dataclass(frozen=True)
class Liveness:
    running: bool
    pid: int | None
    why: str


def liveness(status: StreamStatus | None, now: float, alive: Callable[[int], bool],
             stale_after: float = STALE_AFTER_S) -> Liveness:
    """Pure: is the stream described by ``status`` running (pid alive and heartbeat fresh)?"""
    if status is None:
        return Liveness(False, None, "no status file")
    if status.state not in ACTIVE_STATES:
        return Liveness(False, status.pid, f"state {status.state}")
    if not alive(status.pid):
        return Liveness(False, status.pid, f"pid {status.pid} is gone (state {status.state} is stale)")
    age = now - status.heartbeat
    if age > stale_after:
        return Liveness(False, status.pid, f"heartbeat {age:.0f}s old (pid {status.pid} is not a live stream)")
    return Liveness(True, status.pid, f"{status.state}, pid {status.pid}, heartbeat {age:.0f}s ago")


def stream_liveness(spec: StreamSpec) -> Liveness:
    return liveness(read_status(status_path(spec.status_dir, spec.name)), time.time(), pid_alive)


def stop_stream(spec: StreamSpec, timeout: float = 120.0) -> bool:
    """SIGTERM the stream's driver and wait until it has exited.

    Returns False when no stream was running. The signal goes to the driver process only
    (not its group): the runner then stops after the current batch commits and stops
    Spark itself. Raises StreamControlError if it is still alive after ``timeout``.
    A standby (``rewind stream run --standby``) is stopped first: else it would take over the
    moment the driver ends, and a stop would be a restart.
    """
    from rewind.stream.driver_lock import read_standby

    standby = read_standby(spec.status_dir, spec.name)
    if standby and not _sigterm_and_wait(int(standby["pid"]), timeout):
        raise StreamControlError(f"stream {spec.name}: its standby (pid {standby['pid']}) did not stop within "
                                 f"{timeout:.0f}s of SIGTERM; the driver was left running")
    live = stream_liveness(spec)
    if not live.running or live.pid is None:
        return False
    if not _sigterm_and_wait(live.pid, timeout):
        raise StreamControlError(f"stream {spec.name} (pid {live.pid}) did not stop within {timeout:.0f}s of "
                                 "SIGTERM; it is still running")
    status = read_status(status_path(spec.status_dir, spec.name))
    if status is not None and status.cluster:  # its YARN application must end too, killed if it lingers
        from rewind.stream.cluster_control import finish_on_yarn

        finish_on_yarn(status, spec.name, driver_stopped=True)
    return True


def _sigterm_and_wait(pid: int, timeout: float) -> bool:
    """SIGTERM ``pid`` and wait up to ``timeout`` s for it to exit; True when it is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def stop_driver(spec: StreamSpec, timeout: float = 60.0) -> bool:
    """Stop the driver named in the status whatever its heartbeat says (a hung driver answers no
    status): SIGTERM, then SIGKILL of its process group after ``timeout``. False when none runs."""
    from rewind.platform.processes import terminate_group

    status = read_status(status_path(spec.status_dir, spec.name))
    if status is not None and status.cluster:  # YARN runs it: the ResourceManager kills it, from any host
        from rewind.stream.cluster_control import kill_on_yarn

        if kill_on_yarn(status, spec.name) is not None:
            return True
    if status is None or not pid_alive(status.pid):
        return False
    if not _sigterm_and_wait(status.pid, timeout):
        terminate_group(status.pid, grace=0.0)
    return True


def ensure_no_driver(spec: StreamSpec) -> None:
    """Refuse a launch while the stream's driver is alive (whatever its heartbeat says)."""
    status = read_status(status_path(spec.status_dir, spec.name))
    if status is not None and status.state in ACTIVE_STATES and pid_alive(status.pid):
        raise DriverRunning(f"stream {spec.name}: a driver (pid {status.pid}, state {status.state}) is alive and holds "
                            f"its checkpoint; not launching a second one. Stop it first (`kill {status.pid}` stops it "
                            "after its current batch), or let the supervisor stop a hung one")


def launch_stream(spec: StreamSpec, registry_path: str | Path | None, bootstrap: str, log_path: Path,
                  env: dict[str, str] | None = None) -> int:
    """Start ``rewind stream run`` detached (own session, survives this process); returns its pid.
    Refused (``DriverRunning``) while a driver of the stream is alive."""
    ensure_no_driver(spec)
    argv = [sys.executable, "-m", "rewind.cli", "stream", "run", spec.name, "--bootstrap", bootstrap]
    if registry_path:
        argv += ["--registry", str(Path(registry_path).resolve())]
    return spawn_detached(argv, log_path, {**os.environ, **(env or {})})


def spawn_detached(argv: list[str], log_path: Path, env: dict[str, str], cwd: Path | None = None) -> int:
    """Start `argv` in its own session with output appended to `log_path` and the repo importable;
    the process outlives its caller (a stream is not the child of whoever launched it)."""
    from rewind.settings import SOURCE_ROOT

    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(SOURCE_ROOT or ""), env.get("PYTHONPATH", "")) if p)}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)
    return proc.pid


def wait_running(spec: StreamSpec, pid: int, timeout: float = 120.0, log_path: Path | None = None,
                 started_after: float | None = None) -> StreamStatus:
    """Wait until the stream launched as `pid` reports running; its status then.

    `pid` is the driver itself, or (with `started_after`, the launch time) spark-submit, whose
    child the driver is: then the status written after the launch is the new driver's.
    Raises `StreamFailed` (naming the log) when the query fails or the process exits first.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = read_status(status_path(spec.status_dir, spec.name))
        mine = st is not None and (st.pid == pid or (started_after is not None and st.started_at >= started_after - 1))
        if mine and st is not None and st.state == "running" and pid_alive(st.pid):
            return st
        if mine and st is not None and st.state == "failed":
            raise StreamFailed("query_failed", f"stream {spec.name} failed while starting (last batch "
                                               f"{st.last_batch_id}): {st.exception}; see {log_path}")
        if not pid_alive(pid):
            raise StreamFailed("process_gone", f"stream {spec.name} (pid {pid}) exited during start-up; "
                                               f"see {log_path}:\n{log_tail(log_path, 30)}")
        time.sleep(0.3)
    raise StreamControlError(f"stream {spec.name} (pid {pid}) not running after {timeout:.0f}s; see {log_path}")


def default_log_path(spec: StreamSpec) -> Path:
    """The stream driver's log (``<home>/logs/stream-NAME.log``, as ``rewind up`` shows it)."""
    from rewind.paths import paths_of

    return paths_of(spec).log


def wait_caught_up(spec: StreamSpec, bootstrap: str, timeout: float) -> dict[str, int]:
    """Wait until the stream's committed end offsets reach the end of its topics; returns them."""
    from rewind.kafka.lookups import true_end_offsets

    end = {f"{tp.topic}/{tp.partition}": o for tp, o in true_end_offsets(bootstrap, spec.topics).items()}
    deadline = time.monotonic() + timeout
    done: dict[str, int] = {}
    while time.monotonic() < deadline:
        st = read_status(status_path(spec.status_dir, spec.name))
        done = {f"{t}/{p}": int(o) for t, parts in (st.end_offsets if st else {}).items() for p, o in parts.items()}
        if all(done.get(k, -1) >= v for k, v in end.items()):
            return done
        time.sleep(1)
    raise StreamControlError(f"{spec.name} did not catch up within {timeout:.0f}s: committed {done}, "
                             f"topic end {end}")
