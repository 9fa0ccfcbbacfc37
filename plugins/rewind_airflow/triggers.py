"""Deferrable watch over a running stream: no worker slot is held while it is healthy."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class StreamHealthTrigger(BaseTrigger):
    """Polls the stream's status file and process; fires once when the stream is unhealthy.

    Fires ``{"healthy": True}`` after `watch_s` without trouble, so one supervision run (and
    its log) stays bounded; the next run picks up the watch.
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
        """One look (blocking I/O; run in a thread)."""
        from rewind.supervision.health import Thresholds, diagnose
        from rewind.registry import load_registry
        from rewind.platform.processes import pid_alive
        from rewind.stream.status import read_status, status_path

        spec = load_registry(self.registry).get(self.stream)
        status = read_status(status_path(spec.status_dir, spec.name))
        health = diagnose(status, time.time(), bool(status and pid_alive(status.pid)), Thresholds(**self.thresholds))
        return {"healthy": health.healthy, "cause": health.cause, "detail": health.detail,
                "needs_restart": health.needs_restart, "detected_at": time.time(),
                "status": asdict(status) if status else None}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            verdict = await asyncio.to_thread(self.check)
            if not verdict["healthy"]:
                self.log.warning("%s unhealthy: %s: %s", self.stream, verdict["cause"], verdict["detail"])
                yield TriggerEvent(verdict)
                return
            if time.time() - self.since > self.watch_s:
                yield TriggerEvent({**verdict, "watch_ended": True})
                return
            await asyncio.sleep(self.poll_s)
