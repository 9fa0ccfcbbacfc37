"""The OpenLineage client's edge: one background thread sends the events, a bounded queue feeds it.

Why a thread: a transport can be slow or down (an HTTP endpoint that times out after seconds), and a
stream's batch must never wait for lineage nor fail because of it. The batch path only puts a callable on
a bounded queue (``put_nowait``: a full queue drops the event, logged once); the thread builds the event,
hands it to ``OpenLineageClient.emit`` (the client's own configuration: transport, filters, facets) and logs
a failure once per kind of error, never raising it. The same thread ticks: every ``tick_s`` it asks
``on_tick`` for an event (a stream's periodic RUNNING), so nothing else runs on a timer.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Emitter"]

log = logging.getLogger(__name__)

_STOP = object()


class Emitter:
    """Send events built by callables, in order, from one daemon thread; ``close`` waits a bounded time."""

    def __init__(self, client: Any, *, tick_s: float | None = None, on_tick: Callable[[], Any] | None = None,
                 max_queued: int = 64, name: str = "rewind-lineage") -> None:
        self.client, self.tick_s, self.on_tick = client, tick_s, on_tick
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=max_queued)
        self.sent = 0
        self._logged: set[str] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, make: Callable[[], Any]) -> None:
        """Queue an event (``make`` builds it on the thread); never blocks, never raises."""
        try:
            self.queue.put_nowait(make)
        except queue.Full:
            self._once("queue-full", "OpenLineage events are dropped: %d are waiting for a slow transport",
                       self.queue.qsize())

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued, then stop; past ``timeout_s`` the rest is dropped (the thread is a daemon)."""
        deadline = time.monotonic() + timeout_s
        try:
            self.queue.put(_STOP, timeout=max(0.0, timeout_s))
        except queue.Full:
            self._once("close", "OpenLineage: %d events not sent before the end", self.queue.qsize())
            return
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._once("close", "OpenLineage: events still unsent after %.0fs at the end", timeout_s)
            return
        try:
            self.client.close(max(0.1, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - the transport's own shutdown: logged, never raised
            self._once(f"close-{type(exc).__name__}", "OpenLineage transport close failed: %s", exc)

    def _run(self) -> None:
        next_tick = time.monotonic() + self.tick_s if self.tick_s else None
        while True:
            wait = None if next_tick is None else max(0.0, next_tick - time.monotonic())
            try:
                item = self.queue.get(timeout=wait)
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            if item is not None:
                self._send(item)
            if next_tick is not None and time.monotonic() >= next_tick and self.on_tick is not None:
                next_tick = time.monotonic() + float(self.tick_s or 0)
                self._send(self.on_tick)

    def _send(self, make: Callable[[], Any]) -> None:
        try:
            event = make()
            if event is not None:
                self.client.emit(event)
                self.sent += 1
        except Exception as exc:  # noqa: BLE001 - lineage never fails a batch: logged once per kind
            self._once(type(exc).__name__, "OpenLineage event not sent: %s: %s (logged once per kind of error)",
                       type(exc).__name__, exc)

    def _once(self, kind: str, message: str, *args: Any) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            log.warning(message, *args)
