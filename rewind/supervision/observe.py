"""The observer of the supervision loop: everything the evaluator needs, read once.

One function, ``observe(spec)``, reads the stream's status, whether a driver holds it (its lease,
on any host; a pid is checked only where it means something), and the supervisor's memory
(failures, alerts, a give-up verdict) from the stream's control store into a frozen
``Observation``; ``rewind.supervision.health.evaluate`` decides from it, and
``rewind.supervision.reconcile`` acts. The Airflow trigger, the chaos harness, ``rewind
supervisor status`` and the Rewind page all observe through here (the status used to be read
in thirteen places). ``running_reason(spec)`` is the one answer to "may the stream's checkpoint be
changed now?", handed to whatever changes it (repair, restore: ``rewind.checkpoints`` asks no one itself).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rewind.control.driver_lease import checkpoint_in_use, driver_alive, read_standby
from rewind.control.leases import read_lease
from rewind.control.location import control_store
from rewind.control.status import StreamStatus
from rewind.control.status_store import read_stream_status
from rewind.registry import StreamSpec
from rewind.supervision.cluster_app import AppVerdict
from rewind.supervision.cluster_observe import yarn_verdict
from rewind.supervision.failures import read_failures
from rewind.supervision.process_control import stream_liveness


@dataclass(frozen=True)
class Observation:
    stream: str
    at: float
    status: StreamStatus | None
    driver_alive: bool  # a driver holds the lease (hung or not), or a standby is there to take over
    gave_up: dict[str, Any] | None = None
    last_alert_at: dict[str, float] = field(default_factory=dict)  # cause -> when it was last alerted
    failures: tuple[dict[str, Any], ...] = ()
    reset_at: float | None = None  # when a person last cleared the failures (``rewind supervisor reset``)
    cluster: AppVerdict | None = None  # YARN's word on the driver, when YARN runs it (supervision.cluster_observe)


def observe(spec: StreamSpec, now: float | None = None) -> Observation:
    store = control_store(spec)
    status = read_stream_status(spec, store)
    doc = read_failures(spec)
    alerts: dict[str, float] = {}
    for a in doc["alerts"]:
        alerts[a["cause"]] = max(alerts.get(a["cause"], 0.0), float(a["at"]))
    # A dead driver with a live standby is a takeover in progress, not a failure: the standby holds
    # the lease before it writes its status, or is still warming up and takes over after that.
    alive = driver_alive(spec, read_lease(store)[0])[0] or bool(read_standby(spec))
    at = time.time() if now is None else now
    # On YARN the application's state is the surer word: it ends the moment the driver's container dies
    # (its lease looks held a while longer), and it runs on while a driver hangs.
    cluster = yarn_verdict(status, spec.name, at, float(spec.supervision.thresholds()["heartbeat_stale_s"]))
    if cluster is not None:
        alive = cluster.alive or bool(read_standby(spec))
    return Observation(spec.name, at, status, alive, doc["gave_up"], alerts, tuple(doc["failures"]), doc["reset_at"],
                       cluster)


def running_reason(spec: StreamSpec) -> str | None:
    """Why the stream counts as running, so that its checkpoint must not be changed (its status running with a
    fresh heartbeat and its lease held, a driver lease held on any host, or a standby waiting to take over);
    None when nothing runs on it. Repair and restore refuse on it."""
    live = stream_liveness(spec)
    return f"stream {spec.name!r} is running ({live.why})" if live.running else checkpoint_in_use(spec)
