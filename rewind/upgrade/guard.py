"""One upgrade (or state rescale) of a stream at a time, and a supervisor that stands aside meanwhile.

Why: an upgrade stops the stream on purpose, launches the new version and watches it; the
supervisor would see a stopped stream, record a failure and relaunch it under the upgrade's feet
(two launches race for one checkpoint, or the old entry starts on the new checkpoint). So the
upgrade holds a guard (a document in ``rewind.upgrade.history``, created only if absent) from its
first step to its last, and the supervisor's tasks wait while a live upgrade holds it, then let
the stream be. A guard whose holder died (its pid gone on this host) is stale: the next upgrade
takes it over and the supervisor no longer waits; what the dead upgrade did is in its history
record, step by step.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from rewind.errors import Refused
from rewind.runtime.processes import pid_alive
from rewind.upgrade import history


class UpgradeInProgress(Refused):
    """Another upgrade or rescale of the stream is running; the message names it."""


def stale(guard: dict[str, Any], here: str, alive: Callable[[int], bool], now: float,
          max_age_s: float = 6 * 3600) -> bool:
    """Pure: is the guard left by a dead holder? Its pid is gone on this host, or it has not moved for
    ``max_age_s`` (a holder on another host cannot be asked; no upgrade step lasts that long)."""
    if guard.get("host") == here and not alive(int(guard.get("pid") or 0)):
        return True
    return now - float(guard.get("at") or 0) > max_age_s


def describe(guard: dict[str, Any]) -> str:
    since = time.strftime("%H:%M:%S", time.gmtime(float(guard.get("since") or 0)))
    return (f"{guard.get('mode')} {guard.get('id')} (pid {guard.get('pid')} on {guard.get('host')}, since "
            f"{since} UTC, step {guard.get('step')})")


def live_guard(spec: Any) -> dict[str, Any] | None:
    """The guard of a live upgrade of the stream, or None (none, or left by a dead holder)."""
    guard = history.read_guard(spec)
    if guard is None or stale(guard, socket.gethostname(), pid_alive, time.time()):
        return None
    return guard


def take(spec: Any, record_id: str, mode: str) -> None:
    """Hold the guard, or refuse naming the upgrade that holds it (a stale guard is taken over)."""
    doc = history.guard_doc(record_id, mode, "start")
    if history.create_doc(spec, "upgrade", doc):
        return
    holder = live_guard(spec)
    if holder is not None:
        raise UpgradeInProgress(f"stream {spec.name}: {describe(holder)} is in progress; wait for it (`rewind "
                                f"savepoint history {spec.name}` shows it) -- nothing was changed")
    history.delete_doc(spec, "upgrade")
    if not history.create_doc(spec, "upgrade", doc):
        raise UpgradeInProgress(f"stream {spec.name}: another upgrade took the guard just now; nothing was changed")


def step(spec: Any, name: str) -> None:
    """Say which step the holder is at (and that it is alive)."""
    guard = history.read_guard(spec)
    if guard is not None:
        history.write_doc(spec, "upgrade", {**guard, "step": name, "at": time.time()})


def release(spec: Any, record_id: str) -> None:
    guard = history.read_guard(spec)
    if guard is not None and guard.get("id") == record_id:
        history.delete_doc(spec, "upgrade")


def wait_until_done(spec: Any, timeout_s: float = 3600.0, poll_s: float = 2.0,
                    sleep: Callable[[float], None] = time.sleep) -> dict[str, Any] | None:
    """For the supervisor: wait while a live upgrade holds the stream; the guard waited for (None when
    there was none). Raises ``UpgradeInProgress`` after ``timeout_s``."""
    first = live_guard(spec)
    if first is None:
        return None
    deadline = time.monotonic() + timeout_s
    while (guard := live_guard(spec)) is not None:
        if time.monotonic() > deadline:
            raise UpgradeInProgress(f"stream {spec.name}: {describe(guard)} still runs after {timeout_s:.0f}s")
        sleep(poll_s)
    return first
