"""Fault points: named moments where a test can make a Rewind process die, fail or wait; inert unless armed.

Why: the crash proofs need a writer to die at an exact moment (between a sink's pre-commit and its
commit, say), which a kill from outside hits only by luck, and a poison batch must fail the same way
every time. Production code calls ``fault_point(NAME, batch=N)`` at those moments. Unless the
environment variable ``REWIND_FAULTS`` arms that point, the call returns at once and does nothing:
no file is read, nothing waits, nothing is logged. A test arms a point in the environment of the
process it starts, so no fault can reach a deployment that does not set the variable.

``REWIND_FAULTS`` is a JSON list; each entry arms one point:

- ``point``: a name of ``POINTS``. An unknown name is refused: a typo must not leave a test
  proving nothing.
- ``action``: ``kill`` = SIGKILL (the whole process group when this process leads it, as
  ``kill -9 -PGID`` would: a driver with its JVM); ``exit`` = ``os._exit(code)``; ``raise`` = raise
  ``FaultInjected``; ``pause`` = wait ``seconds``, then raise ``FaultInjected``.
- ``batch``: fire only for this batch id (default: any batch).
- ``marker``: a file written when the fault fires (JSON: point, batch, pid, host, time). If it
  exists already the fault is spent and does not fire again, so a restarted process with the same
  environment runs on.
- ``code``: ``exit`` only, the exit code (default 137).
- ``seconds``: ``pause`` only, how long to wait for the test to act (default 120, at most 600); then
  it fails the batch instead of hanging.

The value may also be ``base64:`` and the list base64-encoded (``encoded``): the YARN hook ships it
so, since YARN writes a container's environment into a shell script without escaping double quotes.

A ``pause`` never blocks forever: the test that armed it kills the process in the meantime, or the
pause ends in ``FaultInjected`` and the batch fails like any write error.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewind.errors import Refused

log = logging.getLogger(__name__)

__all__ = ["ENV", "POINTS", "Fault", "FaultInjected", "arm", "armed", "fault_point"]

ENV = "REWIND_FAULTS"
#: Prefix of a base64-encoded value (``encoded``).
B64 = "base64:"

#: Every fault point, and the moment it marks. A sink's batch passes them in this order.
POINTS: dict[str, str] = {
    "batch.write": "a micro-batch's rows are in the driver and about to be written (a poison batch fails here)",
    "sink.before_write": "a sink is about to write a batch: nothing of it is written yet",
    "sink.pre_committed": "a batch is written but not committed: SQL rows inside the open transaction, a Kafka "
                          "transaction flushed and open, Delta tables merged before the ledger row",
    "sink.committed": "a batch is committed in the sink (its ledger row is there); Spark's commits/N is not written",
}
ACTIONS = ("kill", "exit", "raise", "pause")
MAX_PAUSE_S = 600.0


class FaultInjected(RuntimeError):
    """Raised by an armed fault point (``raise``, or a ``pause`` that ran out)."""


@dataclass(frozen=True)
class Fault:
    """One armed point (see the module docstring for the keys)."""

    point: str
    action: str
    batch: int | None = None
    marker: str | None = None
    code: int = 137
    seconds: float = 120.0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def encoded(value: str) -> str:
    """``REWIND_FAULTS`` as ``base64:...``, for a hop that does not keep double quotes: YARN writes a container's
    environment into a shell script without escaping them."""
    import base64

    return value if value.startswith(B64) else B64 + base64.b64encode(value.encode()).decode()


def _parse(value: str) -> list[Fault]:
    if value.startswith(B64):  # through an environment that mangles quotes (YARN's container launch script)
        import base64

        value = base64.b64decode(value[len(B64):]).decode()
    try:
        entries = json.loads(value)
    except ValueError as exc:
        raise Refused(f"{ENV} is not JSON ({exc}): give a list such as "
                      '[{"point": "sink.pre_committed", "batch": 2, "action": "kill"}]')
    if isinstance(entries, dict):
        entries = [entries]
    faults = []
    for entry in entries if isinstance(entries, list) else [None]:
        if not isinstance(entry, dict):
            raise Refused(f"{ENV}: each entry must be an object with point and action, got {entry!r}")
        unknown = set(entry) - set(Fault.__dataclass_fields__)
        if unknown:
            raise Refused(f"{ENV}: unknown key(s) {sorted(unknown)} in {entry}; known: "
                          f"{sorted(Fault.__dataclass_fields__)}")
        fault = Fault(**entry)
        if fault.point not in POINTS:
            raise Refused(f"{ENV}: no fault point {fault.point!r}; the points are {sorted(POINTS)}")
        if fault.action not in ACTIONS:
            raise Refused(f"{ENV}: action {fault.action!r} of {fault.point} is not one of {list(ACTIONS)}")
        if not 0 < float(fault.seconds) <= MAX_PAUSE_S:
            raise Refused(f"{ENV}: a pause lasts more than 0 and at most {MAX_PAUSE_S:.0f} s, not {fault.seconds}")
        faults.append(fault)
    return faults


def armed() -> list[Fault]:
    """The faults ``REWIND_FAULTS`` arms in this process ([] when unset)."""
    value = os.environ.get(ENV)
    return _parse(value) if value else []


def arm(*faults: Fault) -> dict[str, str]:
    """The environment entry that arms ``faults`` in a process a test starts."""
    return {ENV: json.dumps([f.to_json() for f in faults])}


def fault_point(point: str, batch: int | None = None) -> None:
    """Mark the moment ``point`` (a key of ``POINTS``); act only if ``REWIND_FAULTS`` arms it for this batch."""
    if ENV not in os.environ:
        return
    for fault in armed():
        if fault.point == point and (fault.batch is None or fault.batch == batch):
            _fire(fault, batch)


def _fire(fault: Fault, batch: int | None) -> None:
    if fault.marker is not None:
        marker = Path(fault.marker)
        if marker.exists():
            return  # spent: fired in an earlier run
        marker.write_text(json.dumps({"point": fault.point, "batch": batch, "action": fault.action,
                                      "pid": os.getpid(), "host": socket.gethostname(), "at": time.time()}))
    log.warning("fault point %s (batch %s): %s, armed by %s", fault.point, batch, fault.action, ENV)
    if fault.action == "kill":
        for handler in logging.getLogger().handlers:
            handler.flush()
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.action == "exit":
        os._exit(fault.code)
    if fault.action == "pause":
        time.sleep(float(fault.seconds))
        raise FaultInjected(f"fault point {fault.point} (batch {batch}): paused {fault.seconds} s and nobody acted")
    raise FaultInjected(f"fault point {fault.point} (batch {batch}) raised, armed by {ENV}")
