"""Wait in the triggerer for a stream's first committed batch (the DQ DAG's first run)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class FirstBatchTrigger(BaseTrigger):
    """Looks every ``poll_s`` for the stream's last committed batch (``rewind.proof.scope.committed_batch``:
    its status in the control store, else its checkpoint's commit log) and fires ``{"batch": N}`` when there
    is one, or ``{"batch": None, "waited_s": ...}`` once ``timeout_s`` has passed since ``since``.

    The timeout is the trigger's own event, not Airflow's deferral timeout, so that the sensor decides what
    it means (skipped: nothing to prove), and ``since`` survives serialization, so a restarted triggerer
    does not wait longer.

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param poll_s: seconds between looks
    :param timeout_s: seconds after ``since`` to give up
    :param since: when the wait began (epoch seconds; default: now)
    """

    def __init__(self, stream: str, registry: str | None = None, poll_s: float = 30.0, timeout_s: float = 2700.0,
                 since: float | None = None) -> None:
        super().__init__()
        self.stream, self.registry, self.poll_s, self.timeout_s = stream, registry, poll_s, timeout_s
        self.since = since if since is not None else time.time()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"stream": self.stream, "registry": self.registry, "poll_s": self.poll_s,
                 "timeout_s": self.timeout_s, "since": self.since})

    def check(self) -> int | None:
        """The stream's last committed batch, or None (blocking I/O; run in a thread)."""
        from rewind.proof.scope import committed_batch
        from rewind.registry import load_registry

        return committed_batch(load_registry(self.registry).get(self.stream))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            batch = await asyncio.to_thread(self.check)
            waited = time.time() - self.since
            if batch is not None:
                yield TriggerEvent({"batch": batch, "waited_s": round(waited, 1)})
                return
            if waited >= self.timeout_s:
                yield TriggerEvent({"batch": None, "waited_s": round(waited, 1)})
                return
            self.log.info("%s has not committed a batch yet: nothing to prove; looking again in %ss", self.stream,
                          self.poll_s)
            await asyncio.sleep(min(self.poll_s, max(0.0, self.timeout_s - waited)))
