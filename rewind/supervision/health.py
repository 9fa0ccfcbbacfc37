"""Is a stream healthy, and if not, what failed, and what should the supervisor do? Pure.

The evaluator of the supervision loop (observe -> evaluate -> reconcile, as the Flink Kubernetes
operator splits observer, evaluator and reconciler): ``diagnose`` turns one observation (the
status file the stream writes, whether its driver is alive, the clock) into a verdict, and
``evaluate`` turns the verdict into an action. The Airflow trigger, the chaos harness,
``rewind supervisor status`` and the Rewind page all call these with the registry's thresholds
(``thresholds_of``), so they cannot disagree. Nothing here does I/O.

Why lag never restarts: a stream behind is still making progress; a restart would pay Spark's
start-up and fall further behind (and, before this rule, started a second driver on the same
checkpoint while the first still ran). Lag over ``supervision.max_lag`` raises an alert, at most
once per ``supervision.alert_every`` while it lasts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from rewind.control.status import StreamStatus
from rewind.supervision.causes import bounded, headline
from rewind.supervision.process_control import ACTIVE_STATES

if TYPE_CHECKING:
    from rewind.supervision.observe import Observation

Cause = Literal["not_started", "process_gone", "query_failed", "stopped", "heartbeat_stale", "stalled",
                "lag_over_threshold"]
#: Causes the supervisor answers with a restart; lag alone is reported, restarting would not help.
RESTART_CAUSES: frozenset[str] = frozenset({"not_started", "process_gone", "query_failed", "stopped",
                                            "heartbeat_stale", "stalled"})


@dataclass(frozen=True)
class Thresholds:
    heartbeat_stale_s: float = 60.0  # no listener event at all for this long: the driver is hung
    stall_s: float = 120.0  # Kafka has data but no new batch for this long
    startup_grace_s: float = 180.0  # a starting stream (Spark start-up, first batch) is left alone
    max_lag: int | None = None  # records behind; None = no lag alarm
    alert_every_s: float = 600.0  # an alert that lasts is raised again after this long


@dataclass(frozen=True)
class Health:
    healthy: bool
    cause: Cause | None = None
    detail: str = ""

    @property
    def needs_restart(self) -> bool:
        return self.cause in RESTART_CAUSES


def diagnose(status: StreamStatus | None, now: float, process_alive: bool, t: Thresholds = Thresholds()) -> Health:
    """The verdict for one status snapshot (`process_alive`: the pid in the status is running)."""
    if status is None:
        return Health(False, "not_started", "no status file: the stream has not been launched")
    where = f"last batch {status.last_batch_id}, offsets {status.end_offsets}"
    if status.state == "failed":
        error = (status.exception or "").strip() or "no exception recorded"
        return Health(False, "query_failed", f"{headline(error)}\nthe query terminated at {where}; the whole "
                                             f"error (also in the driver's log):\n{error}")
    if status.state == "stopped":
        return Health(False, "stopped", f"the stream stopped ({where})")
    if not process_alive:
        return Health(False, "process_gone", f"process {status.pid} is gone while the stream was "
                                             f"{status.state} ({where})")
    age = now - status.heartbeat
    if status.state == "starting":
        if now - status.started_at > t.startup_grace_s:
            return Health(False, "heartbeat_stale", f"still starting after {now - status.started_at:.0f}s")
        return Health(True, None, "starting")
    if status.last_batch_at is None or status.last_batch_at < status.started_at:
        # The listener reports nothing until this driver's first batch ends, and that batch (planning,
        # state load, a backlog) can outlast the heartbeat limit on a busy machine: a driver was
        # relaunched mid-batch for it. The start-up grace covers the first batch too.
        running_s = now - status.started_at
        if running_s <= t.startup_grace_s:
            return Health(True, None, f"first batch in progress ({running_s:.0f}s since start)")
    if age > t.heartbeat_stale_s:
        return Health(False, "heartbeat_stale", f"no heartbeat for {age:.0f}s (pid {status.pid} is alive: hung?)")
    since_batch = now - (status.last_batch_at or status.started_at)
    if status.total_lag > 0 and since_batch > t.stall_s:
        return Health(False, "stalled", f"{status.total_lag} records waiting but no batch for {since_batch:.0f}s "
                                        f"({where})")
    if t.max_lag is not None and status.total_lag > t.max_lag:
        return Health(False, "lag_over_threshold", f"lag {status.total_lag} > {t.max_lag} records ({status.lag})")
    return Health(True, None, f"running: {where}, lag {status.total_lag}")


Action = Literal["none", "alert", "restart"]


@dataclass(frozen=True)
class Verdict:
    """What the supervisor does about one observation: nothing, raise an alert, or restart (after
    stopping a hung driver when ``stop_first``)."""

    health: Health
    action: Action
    stop_first: bool = False
    reason: str = ""


def thresholds_of(spec: Any) -> Thresholds:
    """The registry's thresholds of a stream (``supervision:``)."""
    return Thresholds(**spec.supervision.thresholds())


def evaluate(obs: "Observation", t: Thresholds) -> Verdict:
    """The action for one observation of the stream (pure)."""
    status = obs.status
    health = diagnose(status, obs.at, obs.driver_alive, t)
    if obs.cluster is not None and not health.healthy:
        if obs.cluster.starting:  # YARN has the stream's newest application; its driver has not reported yet
            return Verdict(Health(True, None, obs.cluster.detail), "none", reason=obs.cluster.detail)
        health = Health(False, health.cause, f"{health.detail}; {obs.cluster.detail}")
    if health.healthy:
        return Verdict(health, "none", reason=health.detail)
    if obs.gave_up:
        gave_up = bounded(obs.gave_up.get("reason", ""), 1200)
        return Verdict(health, "none", reason=f"the supervisor gave up ({gave_up}); "
                                              "nothing is relaunched until `rewind supervisor reset`")
    if not health.needs_restart:
        last = obs.last_alert_at.get(str(health.cause))
        if last is not None and obs.at - last < t.alert_every_s:
            return Verdict(health, "none", reason=f"{health.cause}: alerted {obs.at - last:.0f}s ago "
                                                  f"(again after {t.alert_every_s:.0f}s); no restart")
        return Verdict(health, "alert", reason=f"{health.cause}: {health.detail}; the stream keeps running")
    stop_first = health.cause in ("heartbeat_stale", "stalled") and obs.driver_alive
    return Verdict(health, "restart", stop_first, reason=f"{health.cause}: {health.detail}")


def unrecorded_death(obs: "Observation") -> Health | None:
    """A driver that died while no watch looked (between supervisor runs, or while a run was still
    launching), as the launch finds it; None when there is none.

    Its status says it runs, no process (nor standby, nor lock holder) is there, and no failure or
    reset is recorded since its last heartbeat. Why it matters: a launch that simply started a new
    driver left such deaths out of the failure history, so a stream dying that way forever never
    reached the restart strategy's limit. A death a watch saw is already recorded after the heartbeat
    and is not counted twice.
    """
    st = obs.status
    if st is None or st.state not in ACTIVE_STATES or obs.driver_alive:
        return None
    if any(float(f["at"]) >= st.heartbeat for f in obs.failures) or (obs.reset_at or 0.0) >= st.heartbeat:
        return None
    return Health(False, "process_gone", f"process {st.pid} was found gone at launch while its status said "
                                         f"{st.state} (last heartbeat {obs.at - st.heartbeat:.0f}s before; last "
                                         f"batch {st.last_batch_id}, offsets {st.end_offsets}); no watch saw it")
