"""Deferrable watch over a running stream: no worker slot is held while it is healthy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class StreamHealthTrigger(BaseTrigger):
    """Observes the stream every ``poll_s`` through its control store (status, heartbeat, the
    driver's lease: the triggerer may run on any host), and, when the driver runs on the
    triggerer's own host, at once when its process exits (the kernel says so through a pidfd:
    ``rewind.runtime.processes.wait_exit``); fires once the supervisor has something to do.

    It runs the supervision loop's observer and evaluator (``rewind.supervision.observe``,
    ``rewind.supervision.health.evaluate``) with the registry's thresholds: it fires when the
    verdict is a restart or an alert; a lag alert already raised within ``alert_every`` does not
    fire again. Fires ``{"healthy": True}`` after ``watch_s`` without trouble, so one supervision run
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

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"stream": self.stream, "registry": self.registry, "poll_s": self.poll_s, "watch_s": self.watch_s,
                 "thresholds": self.thresholds, "since": self.since})

    def check(self) -> dict[str, Any]:
        """One observation and its verdict (blocking I/O; run in a thread)."""
        from rewind.registry import load_registry
        from rewind.supervision.health import Thresholds, evaluate
        from rewind.supervision.observe import observe

        spec = load_registry(self.registry).get(self.stream)
        obs = observe(spec)
        verdict = evaluate(obs, Thresholds(**self.thresholds))
        h = verdict.health
        return {"healthy": h.healthy, "cause": h.cause, "detail": h.detail, "action": verdict.action,
                "stop_first": verdict.stop_first, "reason": verdict.reason, "needs_restart": h.needs_restart,
                "detected_at": obs.at, "status": asdict(obs.status) if obs.status else None}

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
