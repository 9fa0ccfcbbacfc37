"""The supervisor's memory: every failure and alert of a stream, and a give-up verdict.

Why a document of the stream's control store (``failures``; on one host the file
``<stream>.failures.json`` in the store's directory): the restart strategy must see every failure across
supervisor runs (an Airflow run ends, the next one starts, maybe on another worker), a crash-loop
verdict must stay until a person clears it, and a lag alert must not fire again on every poll while
the lag lasts. Every change is a read-modify-write with a conditional write
(``rewind.control.store.update``): two workers recording at once lose nothing.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rewind import paths
from rewind.control.location import control_store
from rewind.control.store import update
from rewind.errors import Refused
from rewind.registry import StreamSpec
from rewind.supervision.restart_policy import Decision, Failure, decide

KEEP_FAILURES = 200
KEEP_ALERTS = 50


class CrashLoop(Refused):
    """The restart strategy gave up: the message has the batch, its offsets and the exception. A
    person fixes the cause and runs ``rewind supervisor reset STREAM``; nothing is relaunched until then."""

    retry = False


def failures_path(spec: StreamSpec) -> Path:
    return paths.failures_path(paths.control_dir(spec), spec.name)


FAILURES = "failures"


def _shaped(doc: dict[str, Any]) -> dict[str, Any]:
    return {"failures": list(doc.get("failures", [])), "alerts": list(doc.get("alerts", [])),
            "gave_up": doc.get("gave_up"), "reset_at": doc.get("reset_at")}


def read_failures(spec: StreamSpec) -> dict[str, Any]:
    """``{"failures": [...], "alerts": [...], "gave_up": {...} | None, "reset_at": float | None}``."""
    got = control_store(spec).read(FAILURES)
    return _shaped(got.doc if got else {})


def record_failure(spec: StreamSpec, cause: str, detail: str, batch_id: int | None,
                   offsets: dict[str, dict[str, int]], now: float | None = None) -> Decision:
    """Append the failure (at the last committed batch and its offsets) and ask the restart strategy.

    A decision not to restart is kept (``gave_up``), so no later run restarts a crash-looping
    stream behind a person's back; ``reset`` clears it.
    """
    now = time.time() if now is None else now
    decided: list[Decision] = []

    def add(stored: dict[str, Any]) -> dict[str, Any]:
        doc = _shaped(stored)
        doc["failures"] = [*doc["failures"], asdict(Failure(now, cause, batch_id, offsets, detail[:4000]))]
        doc["failures"] = doc["failures"][-KEEP_FAILURES:]
        decision = decide(spec.restart, [Failure(**f) for f in doc["failures"]], now)
        if not decision.restart:
            doc["gave_up"] = {"at": now, "reason": decision.reason}
        decided[:] = [decision]
        return doc

    update(control_store(spec), FAILURES, add)
    return decided[0]


def record_alert(spec: StreamSpec, cause: str, detail: str, now: float | None = None) -> None:
    """An alert (e.g. lag over the threshold): recorded and shown, never counted as a failure."""
    alert = {"at": time.time() if now is None else now, "cause": cause, "detail": detail[:2000]}

    def add(stored: dict[str, Any]) -> dict[str, Any]:
        doc = _shaped(stored)
        doc["alerts"] = [*doc["alerts"], alert][-KEEP_ALERTS:]
        return doc

    update(control_store(spec), FAILURES, add)


def last_alert_at(doc: dict[str, Any], cause: str) -> float | None:
    times = [a["at"] for a in doc.get("alerts", []) if a.get("cause") == cause]
    return max(times) if times else None


def check_not_given_up(spec: StreamSpec) -> None:
    gave_up = read_failures(spec).get("gave_up")
    if gave_up:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(gave_up["at"]))
        raise CrashLoop(f"{spec.name}: the supervisor gave up at {when} UTC: {gave_up['reason']} -- after fixing "
                        f"the cause, run `rewind supervisor reset {spec.name}` (or trigger the supervisor with "
                        "reset=true)")


def reset(spec: StreamSpec, now: float | None = None) -> dict[str, Any]:
    """Forget failures, alerts and the give-up verdict; returns what was there.

    The time of the reset is kept: a driver that died before it was seen by a person, and is not
    counted again by the next launch (``rewind.supervision.health.unrecorded_death``).
    """
    before: list[dict[str, Any]] = []

    def clear(stored: dict[str, Any]) -> dict[str, Any]:
        before[:] = [_shaped(stored)]
        return {"failures": [], "alerts": [], "gave_up": None, "reset_at": time.time() if now is None else now}

    update(control_store(spec), FAILURES, clear)
    return before[0]
