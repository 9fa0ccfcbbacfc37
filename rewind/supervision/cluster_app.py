"""What the cluster manager says about a stream's driver, judged together with the stream's own heartbeat. Pure.

Why both: on YARN the driver runs in a container of a node the supervisor does not share, so there is no
pid to look at. The heartbeat (and the driver's lease) says whether the driver *works*; the
ResourceManager says whether the *application* exists. Each alone misleads:

- a driver SIGKILLed, or lost with its node, leaves a heartbeat that looks fresh for a while, but YARN
  ends its application at once (``FAILED``: one attempt, ``spark.yarn.maxAppAttempts=1``): the
  application's end is the faster and the surer word;
- an application YARN still reports ``RUNNING`` whose heartbeat went stale is a hung driver: it must be
  killed through YARN before another is launched, or two drivers would share the checkpoint;
- an application ``ACCEPTED`` that has not reported yet is a driver starting (waiting for a container),
  not a missing one: launching another would queue a second driver behind it.

``judge`` decides; ``stop_step`` decides each step of a graceful stop (ask, wait for the batch in flight,
then kill through YARN if the application lingers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rewind.runtime.yarn_rm import YarnApp


@dataclass(frozen=True)
class AppVerdict:
    """``alive``: a driver holds the stream (running, starting in YARN, or hung): launch no other. ``ended``:
    YARN ended the application. ``hung``: YARN runs it, its heartbeat is stale: kill it through YARN first."""

    alive: bool
    ended: bool
    hung: bool
    detail: str
    starting: bool = False  # YARN has the application, its driver has not reported yet: leave it be


def judge(app: YarnApp | None, heartbeat_age_s: float | None, stale_after_s: float) -> AppVerdict:
    """``heartbeat_age_s``: seconds since the driver's last heartbeat, None when it never wrote one."""
    if app is None:
        return AppVerdict(False, False, False, "no YARN application of the stream")
    where = f"YARN application {app.app_id} {app.state}"
    if not app.active:
        first = app.diagnostics.strip().splitlines()[0] if app.diagnostics.strip() else ""
        return AppVerdict(False, True, False, f"{where} ({app.final_status}{': ' + first if first else ''})")
    if heartbeat_age_s is None:
        return AppVerdict(True, False, False, f"{where}, its driver has not reported yet (starting)", starting=True)
    if heartbeat_age_s > stale_after_s:
        if app.state == "RUNNING":
            return AppVerdict(True, False, True, f"{where} but its heartbeat is {heartbeat_age_s:.0f}s old: the "
                                                 "driver is hung; kill it through YARN before relaunching")
        return AppVerdict(True, False, False, f"{where}, waiting for a container (last heartbeat "
                                              f"{heartbeat_age_s:.0f}s ago is an earlier driver's)", starting=True)
    return AppVerdict(True, False, False, f"{where}, heartbeat {heartbeat_age_s:.0f}s ago")


StopStep = Literal["done", "wait", "kill"]


def stop_step(app: YarnApp | None, driver_stopped: bool, waited_s: float, grace_s: float) -> StopStep:
    """One step of a graceful stop on YARN, after the stop request went out: ``done`` when the application has
    ended; ``wait`` while the driver finishes its batch (or, stopped, its application unregisters); ``kill``
    through YARN once ``grace_s`` has passed with the application still there (a driver that does not answer,
    or an application that lingers after its driver stopped)."""
    if app is None or not app.active:
        return "done"
    if waited_s < grace_s:
        return "wait"
    return "kill" if app.state in ("RUNNING", "ACCEPTED", "SUBMITTED", "NEW", "NEW_SAVING") or driver_stopped \
        else "wait"

