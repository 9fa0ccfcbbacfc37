"""Deferrable watch over a running stream: no worker slot is held while it is healthy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

#: Seconds between two looks at a stream's Asset drift (its tables' cursors; the sink's ledger only when the
#: status cannot decide): the alert's limit is two ``assets.interval`` (default 2 min), not the poll's seconds.
DRIFT_EVERY_S = 30.0


class StreamHealthTrigger(BaseTrigger):
    """Observes the stream every ``poll_s`` through its control store (status, heartbeat, the
    driver's lease: the triggerer may run on any host), and, when the driver runs on the
    triggerer's own host, at once when its process exits (the kernel says so through a pidfd:
    ``rewind.runtime.processes.wait_exit``); fires once the supervisor has something to do.

    It runs the supervision loop's observer and evaluator (``rewind.supervision.observe``,
    ``rewind.supervision.health.evaluate``) with the registry's thresholds: it fires when the
    verdict is a restart or an alert; a lag alert already raised within ``alert_every`` does not
    fire again. While it has nothing else to say, it looks every ``DRIFT_EVERY_S`` at the stream's Asset
    events (``rewind.assets.drift``) and fires an ``asset_drift`` alert when a table's watcher is more than
    two intervals behind the committed batches, again at most every ``alert_every``. Fires
    ``{"healthy": True}`` after ``watch_s`` without trouble, so one supervision run
    (and its log) stays bounded; the next run picks up the watch.

    :param stream: the registry stream to watch
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param poll_s: seconds between observations (registry ``supervision.poll``)
    :param watch_s: seconds of a healthy stream after which it fires ``action: none``, ending the run's watch
    :param thresholds: ``rewind.supervision.health.Thresholds`` keywords (registry ``supervision:``)
    :param since: when the watch began (epoch seconds; default: now); kept across the trigger's serialization,
        so a triggerer that restarts it does not extend the watch
    """

    def __init__(self, stream: str, registry: str | None = None, poll_s: float = 2.0, watch_s: float = 3600.0,
                 thresholds: dict[str, Any] | None = None, since: float | None = None) -> None:
        super().__init__()
        self.stream, self.registry, self.poll_s, self.watch_s = stream, registry, poll_s, watch_s
        self.thresholds = thresholds or {}
        self.since = since if since is not None else time.time()
        self._drift_at = 0.0  # when the Asset drift was last looked at (not serialized: a restart looks at once)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"stream": self.stream, "registry": self.registry, "poll_s": self.poll_s, "watch_s": self.watch_s,
                 "thresholds": self.thresholds, "since": self.since})

    def check(self) -> dict[str, Any]:
        """One observation and its verdict (blocking I/O; run in a thread)."""
        from rewind.alerts import ASSET_DRIFT
        from rewind.registry import load_registry
        from rewind.supervision.health import Thresholds, evaluate
        from rewind.supervision.observe import observe

        spec = load_registry(self.registry).get(self.stream)
        obs = observe(spec)
        thresholds = Thresholds(**self.thresholds)
        verdict = evaluate(obs, thresholds)
        h = verdict.health
        found = {"healthy": h.healthy, "cause": h.cause, "detail": h.detail, "action": verdict.action,
                 "stop_first": verdict.stop_first, "reason": verdict.reason, "needs_restart": h.needs_restart,
                 "detected_at": obs.at, "status": asdict(obs.status) if obs.status else None}
        drift = self.drift(spec, obs, thresholds.alert_every_s) if verdict.action == "none" else None
        if drift is not None:  # the stream is fine; its Asset events are not: an alert, never a restart
            return {**found, "action": "alert", "cause": ASSET_DRIFT, "detail": drift,
                    "reason": f"asset_drift: {drift.splitlines()[0]}; the stream keeps running"}
        return found

    def drift(self, spec: Any, obs: Any, alert_every_s: float) -> str | None:
        """The Asset drift alert's text (``rewind.assets.drift``), or None: none, already raised within
        ``alert_every``, looked at less than ``DRIFT_EVERY_S`` ago, or not readable (logged: a sink or store
        away must not stop the watch over the stream itself)."""
        from rewind.alerts import ASSET_DRIFT
        from rewind.assets.drift import drift_alert
        from rewind.assets.drift_read import read_drift

        last = obs.last_alert_at.get(ASSET_DRIFT)
        if (last is not None and obs.at - last < alert_every_s) or obs.at - self._drift_at < DRIFT_EVERY_S:
            return None
        self._drift_at = obs.at
        try:
            return drift_alert(spec.name, read_drift(spec, obs.at))
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.log.warning("%s: the Asset drift check failed (%s: %s)", self.stream, type(exc).__name__, exc)
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            verdict = await asyncio.to_thread(self.check)
            if verdict["action"] != "none":
                self.log.warning("%s: %s (%s): %s", self.stream, verdict["action"], verdict["cause"], verdict["detail"])
                yield TriggerEvent(verdict)
                return
            if time.time() - self.since > self.watch_s:
                yield TriggerEvent({**verdict, "watch_ended": True})
                return
            from rewind.control.driver_lease import local_pid

            pid = local_pid(verdict.get("status"))
            if pid is not None:
                from rewind.runtime.processes import wait_exit

                await wait_exit(pid, self.poll_s)
            else:
                await asyncio.sleep(self.poll_s)
