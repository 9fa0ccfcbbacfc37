"""Is a stream running, stop it gracefully, launch it detached.

Why here and not in the runner: a savepoint with ``--stop`` and a restore act on a stream from
another process, maybe on another host; all they have is the stream's control store (its status
and heartbeat, its driver lease) and the runner's promise that a stop request (or SIGTERM, on the
driver's own host) means "stop after the current batch commits".
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

from rewind.control.driver_lease import driver_alive, local_pid, read_standby, request_stop
from rewind.control.lease import Holder
from rewind.control.leases import me, read_lease
from rewind.control.location import control_store
from rewind.control.status import StreamStatus
from rewind.control.status_store import read_stream_status
from rewind.kafka.lookups import true_end_offsets
from rewind.paths import paths_of
from rewind.registry import StreamSpec
from rewind.runtime.processes import log_tail, pid_alive, terminate_group
from rewind.settings import SOURCE_ROOT
from rewind.supervision.cluster_control import finish_on_yarn, kill_on_yarn
from rewind.supervision.cluster_observe import newest_app
from rewind.supervision.control_errors import DriverRunning, StreamControlError, StreamFailed

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


def stream_running(spec: StreamSpec) -> tuple[bool, StreamStatus | None]:
    """(running, status): the status says starting, running or stopping, and a driver holds the lease."""

    status = read_stream_status(spec)
    return bool(status and status.state in ACTIVE_STATES and driver_alive(spec)[0]), status


def stream_liveness(spec: StreamSpec) -> Liveness:
    """Running: the status says so, its heartbeat is fresh, and the driver lease is held
    (``rewind.control.driver_lease.driver_alive``: no pid needed, a pid checked where it can be)."""

    alive, why = driver_alive(spec)
    live = liveness(read_stream_status(spec), time.time(), lambda _pid: alive)
    return Liveness(live.running, live.pid, f"{live.why}; the lease: {why}") if live.running else live


def stop_stream(spec: StreamSpec, timeout: float = 120.0) -> bool:
    """Ask the stream's driver, wherever it runs, to stop after its current batch, and wait until it
    has given up its lease.

    Returns False when no stream was running. A stop request in the control store reaches a driver
    on any host (``rewind.control.driver_lease.request_stop``); on the driver's own host it also gets
    SIGTERM, which it answers the same way. Raises StreamControlError if it still holds the lease
    after ``timeout``. A standby (``rewind stream run --standby``) is stopped first: else it would
    take over the moment the driver ends, and a stop would be a restart.
    """

    standby = read_standby(spec)
    if standby:
        request_stop(spec, "stop of the stream: its standby first", standby=True)
        there = Holder(str(standby.get("host")), int(standby.get("pid") or 0), "", str(standby.get("pidns") or ""),
                       str(standby.get("boot_id") or ""))
        if me().same_machine(there):  # on its own host SIGTERM reaches it before its warm-up ends
            try:
                os.kill(there.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if not _wait(lambda: not read_standby(spec), timeout):
            raise StreamControlError(f"stream {spec.name}: its standby did not stop within {timeout:.0f}s; the "
                                     "driver was left running")
    stopped = _stop_driver(spec, timeout, force=False)
    status = read_stream_status(spec)
    if stopped and status is not None and status.cluster:  # its YARN application must end too, killed if it lingers

        finish_on_yarn(status, spec.name, driver_stopped=True)
    return stopped


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _stop_driver(spec: StreamSpec, timeout: float, force: bool) -> bool:
    """Request the stop, SIGTERM the holder too where its pid can be checked, wait for the lease."""

    lease = request_stop(spec, "a stop of the stream" if not force else "a hung driver is stopped", force=force)
    if lease is None:
        return False
    if me().same_machine(lease.holder):
        try:
            os.kill(lease.holder.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if not _wait(lambda: not driver_alive(spec)[0], timeout):
        raise StreamControlError(f"stream {spec.name} (pid {lease.holder.pid} on {lease.holder.host}, lease epoch "
                                 f"{lease.epoch}) did not stop within {timeout:.0f}s of the stop request; it is "
                                 "still running")
    return True


def stop_driver(spec: StreamSpec, timeout: float = 60.0) -> bool:
    """Stop the stream's driver whatever its heartbeat says (a hung driver answers no status): a
    forced stop request (the driver fences its own checkpoint writes and gives up its lease at once,
    even if its query does not stop), and on its own host SIGTERM, then SIGKILL of its process group
    after ``timeout``; a driver YARN runs is killed through the ResourceManager. False when none runs."""

    status = read_stream_status(spec)
    if status is not None and status.cluster:  # YARN runs it: the ResourceManager kills it, from any host

        if kill_on_yarn(status, spec.name) is not None:
            return True
    lease = read_lease(control_store(spec))[0]
    try:
        return _stop_driver(spec, timeout, force=True)
    except StreamControlError:
        if lease is None or not me().same_machine(lease.holder) or not pid_alive(lease.holder.pid):
            raise
        terminate_group(lease.holder.pid, grace=0.0)
        return True


def ensure_no_driver(spec: StreamSpec) -> None:
    """Refuse a launch while a driver of the stream holds its lease, on any host (whatever its heartbeat says)."""

    alive, why = driver_alive(spec)
    if alive and not ended_on_yarn(spec):
        raise DriverRunning(f"stream {spec.name}: a driver is alive and holds its checkpoint ({why}); not launching a "
                            "second one. Stop it first (a stop request, or SIGTERM on its host, stops it after its "
                            "current batch), or let the supervisor stop a hung one")


def ended_on_yarn(spec: StreamSpec) -> bool:
    """YARN ran the stream's last driver and says its application ended: the lease it held lapses within its
    time to live, and the next driver waits for that before it plans a batch (``rewind.control.leases``)."""
    status = read_stream_status(spec)
    if status is None or not status.cluster:
        return False

    app, _ = newest_app(status, spec.name)
    return app is not None and not app.active


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
        st = read_stream_status(spec)
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

    return paths_of(spec).log


def wait_caught_up(spec: StreamSpec, bootstrap: str, timeout: float, log_path: Path | None = None) -> dict[str, int]:
    """Wait until the stream's committed end offsets reach the end of its topics; returns them. Raises at once,
    naming the log, if its driver fails or its process (on this machine) is gone; else after ``timeout``, with
    its state and the log's last lines (a stalled driver)."""

    log_path = log_path or default_log_path(spec)
    end = {f"{tp.topic}/{tp.partition}": o for tp, o in true_end_offsets(bootstrap, spec.topics).items()}
    deadline = time.monotonic() + timeout
    done: dict[str, int] = {}
    st: StreamStatus | None = None
    while time.monotonic() < deadline:
        st = read_stream_status(spec)
        done = {f"{t}/{p}": int(o) for t, parts in (st.end_offsets if st else {}).items() for p, o in parts.items()}
        if all(done.get(k, -1) >= v for k, v in end.items()):
            return done
        if st is not None and st.state == "failed":
            raise StreamFailed("query_failed", f"{spec.name} failed at batch {st.last_batch_id} before catching up "
                                               f"(committed {done}): {st.exception}; see {log_path}")
        if st is not None and (pid := local_pid({"holder": st.holder})) and not pid_alive(pid):
            raise StreamFailed("process_gone", f"{spec.name}'s driver (pid {pid}) is gone at batch "
                                               f"{st.last_batch_id}, before catching up (committed {done}); see "
                                               f"{log_path}:\n{log_tail(log_path, 30)}")
        time.sleep(1)
    state = f"state {st.state}, pid {st.pid}, last batch {st.last_batch_id}" if st else "no status"
    raise StreamControlError(f"{spec.name} did not catch up within {timeout:.0f}s ({state}): committed {done}, "
                             f"topic end {end}; see {log_path}:\n{log_tail(log_path, 30)}")
