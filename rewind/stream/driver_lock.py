"""One driver per stream, and a warm standby that takes over the moment it dies.

- ``<status_dir>/<stream>.driver.lock`` is held with an exclusive ``fcntl.flock`` by the driver
  that runs the stream's query. Two drivers on one checkpoint would interleave batches in its
  offset log; Spark only refuses that inside one JVM, so the lock is what refuses it across
  processes. The kernel drops the lock when the holder's process dies, SIGKILL included, so a
  crash never leaves a stale lock; the file's JSON only describes the holder for messages.
- A standby (``rewind stream run NAME --standby``) pays the start-up first (JVM, Spark session,
  Kafka connector classes, Python workers: ``rewind.stream.warm_up``) and then blocks in
  ``flock`` in a thread. It is woken by the kernel when the running driver's process is gone:
  no polling, no supervisor in the loop. ``<stream>.standby.json`` says a standby is there
  (``warming`` or ``ready``, its pid and warm-up time) until it takes over or stops; a stop of
  the stream (``rewind.stream.control.stop_stream``) stops the standby first.
- A driver started while another holds the lock waits for it (``REWIND_DRIVER_WAIT_S``, 60 s: a
  killed driver's process can take a moment to go), then is refused with ``DriverBusy`` naming
  the holder and the fix.

Written by hand: ``fcntl.flock`` is the whole mechanism; ``rewind.replay.guard`` uses the same
for replays.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rewind.errors import Refused
from rewind.platform.lockfile import describe_holder, held_by_another, read_description, release

log = logging.getLogger(__name__)

__all__ = ["DriverBusy", "DriverLock", "acquire_driver_lock", "checkpoint_in_use", "clear_standby", "driver_lock_held",
           "driver_lock_path", "mark_standby", "read_holder", "read_standby", "standby_path", "wait_for_driver_lock"]

class DriverBusy(Refused):
    """Another live driver runs this stream (exit code 3: a refusal, nothing was started)."""


def driver_lock_path(status_dir: str | Path, stream: str) -> Path:
    return Path(status_dir) / f"{stream}.driver.lock"


def standby_path(status_dir: str | Path, stream: str) -> Path:
    return Path(status_dir) / f"{stream}.standby.json"


@dataclass
class DriverLock:
    """The held lock; released by ``release`` or by the process's death."""

    path: Path
    holder: dict[str, Any]
    waited_s: float = 0.0
    _file: IO[str] | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            release(file)


def _held(f: IO[str], path: Path, stream: str, role: str, waited: float) -> DriverLock:
    holder = {"stream": stream, "role": role, "pid": os.getpid(), "host": socket.gethostname(),
              "since": datetime.now(UTC).isoformat()}
    describe_holder(f, holder)
    return DriverLock(path, holder, round(waited, 3), f)


def busy_message(stream: str, holder: dict[str, Any], path: Path, waited_s: float) -> str:
    who = (f"pid {holder.get('pid')} on {holder.get('host')} (a {holder.get('role', 'driver')} since "
           f"{holder.get('since')})" if holder else "another process (it has not described itself yet)")
    return (f"stream {stream!r} is already run by {who}; waited {waited_s:.0f}s for it. One driver per stream: "
            f"stop that one first (SIGTERM to its pid stops it after its batch in flight), or start this one with "
            f"--standby to take over when it ends (the lock {path} is freed the moment its process dies)")


def acquire_driver_lock(status_dir: str | Path, stream: str, wait_s: float | None = None) -> DriverLock:
    """Take the stream's driver lock, waiting up to ``wait_s`` (default REWIND_DRIVER_WAIT_S, 60) for
    a holder to go; else DriverBusy."""
    if wait_s is None:
        from rewind.settings import driver_lock_wait_s

        wait_s = driver_lock_wait_s()
    path = driver_lock_path(status_dir, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    started = time.monotonic()
    logged = False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return _held(f, path, stream, "driver", time.monotonic() - started)
        except BlockingIOError:
            waited = time.monotonic() - started
            if waited >= wait_s:
                f.close()
                raise DriverBusy(busy_message(stream, read_description(path), path, waited)) from None
            if not logged:
                log.warning("stream %s: waiting up to %.0fs for the driver holding %s to end: %s", stream, wait_s,
                            path, read_description(path) or "holder unknown")
                logged = True
            time.sleep(0.2)


def driver_lock_held(status_dir: str | Path, stream: str) -> bool:
    """Whether a live process holds the stream's driver lock."""
    return held_by_another(driver_lock_path(status_dir, stream))


def wait_for_driver_lock(status_dir: str | Path, stream: str, stop: threading.Event) -> DriverLock | None:
    """Block until the lock is ours (a standby's wait: the kernel wakes the blocked ``flock`` when
    the holder dies) or ``stop`` is set (then None). The blocking call runs in a daemon thread so
    that a SIGTERM to the standby still stops it promptly."""
    path = driver_lock_path(status_dir, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    got = threading.Event()
    failed: list[BaseException] = []

    def block() -> None:
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
            got.set()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            failed.append(exc)
            got.set()

    started = time.monotonic()
    threading.Thread(target=block, name=f"standby-{stream}", daemon=True).start()
    while not got.wait(0.5):
        if stop.is_set():
            f.close()  # the thread's flock, if it ever returns, holds a closed file: nothing is held
            return None
    if failed:
        f.close()
        raise failed[0]
    return _held(f, path, stream, "driver", time.monotonic() - started)


def read_holder(status_dir: str | Path, stream: str) -> dict[str, Any]:
    """What the driver holding the lock wrote about itself ({}: nobody, or not yet)."""
    return read_description(driver_lock_path(status_dir, stream))


def mark_standby(status_dir: str | Path, stream: str, state: str, warm_up_s: float | None = None,
                 holder: dict[str, Any] | None = None) -> Path:
    """``<stream>.standby.json``: this process is a standby, ``warming`` (from its first moment, so
    that a stop finds it) or ``ready`` (waiting on the lock)."""
    path = standby_path(status_dir, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"stream": stream, "state": state, "pid": os.getpid(), "host": socket.gethostname(), "at": time.time(),
           "warm_up_s": None if warm_up_s is None else round(warm_up_s, 3), "waiting_for": holder or {}}
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
    return path


def read_standby(status_dir: str | Path, stream: str) -> dict[str, Any]:
    """The standby's description ({} when none); a dead standby's file is ignored."""
    doc = read_description(standby_path(status_dir, stream))
    pid = doc.get("pid")
    if not isinstance(pid, int):
        return {}
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return {}
    except PermissionError:
        pass
    return doc


def clear_standby(status_dir: str | Path, stream: str) -> None:
    """Remove the standby file if it is this process's."""
    path = standby_path(status_dir, stream)
    if read_description(path).get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def checkpoint_in_use(status_dir: str | Path, stream: str) -> str | None:
    """Why the stream's checkpoint must not be changed now (a driver holds the lock, or a standby
    would take over mid-change), or None. Repair and restore refuse on it."""
    if driver_lock_held(status_dir, stream):
        holder = read_holder(status_dir, stream)
        return f"a driver of stream {stream!r} holds its lock (pid {holder.get('pid', '?')})"
    standby = read_standby(status_dir, stream)
    if standby:
        return (f"a standby of stream {stream!r} (pid {standby['pid']}, {standby.get('state')}) would start on the "
                "checkpoint mid-change; stop it first (SIGTERM to its pid)")
    return None
