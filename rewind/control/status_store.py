"""The stream's status in its control store: written by the driver under its lease, read by anyone.

Why fenced: a driver paused and resumed after another took its stream over (a zombie) still has a
query listener that reports "failed" when its query dies; written over the new driver's status,
that would make the supervisor restart a healthy stream. Every status carries the writer's lease
epoch, and a write is a conditional replace of the version this writer last wrote: when the stored
status changed under it and holds a newer epoch, this writer is fenced and writes no more.

History (the page's throughput/lag chart): a directory store keeps the JSON-lines file beside the
status (``rewind.control.status.append_history``); another store keeps one ``history`` document of
samples at least ``HISTORY_STEP_S`` apart over the last hour.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict
from typing import Any

from rewind.control.directory import DirectoryStore
from rewind.control.location import control_store
from rewind.control.status import HISTORY_KEEP_S, StreamStatus, append_history, read_history, status_from
from rewind.control.store import ControlStore, ControlStoreError

log = logging.getLogger(__name__)

__all__ = ["HISTORY_STEP_S", "StoreChannel", "read_stream_history", "read_stream_status"]

STATUS = "status"
HISTORY = "history"
HISTORY_STEP_S = 5.0


class StoreChannel:
    """The running driver's status channel into its control store (see the module docstring)."""

    def __init__(self, store: ControlStore, epoch: int) -> None:
        self.store = store
        self.epoch = epoch
        self.fenced = False
        self._version: str | None = None
        self._lock = threading.Lock()
        self._last_sample = 0.0

    def write(self, status: StreamStatus) -> None:
        status.epoch = self.epoch
        doc = asdict(status)
        with self._lock:
            if self.fenced:
                return
            try:
                self._write(doc)
            except ControlStoreError as exc:  # a status that cannot be written must not stop the stream
                log.warning("stream %s: status not written: %s", self.store.stream, exc)

    def _write(self, doc: dict[str, Any]) -> None:
        if self._version is not None:
            written = self.store.replace(STATUS, doc, self._version)
            if written is not None:
                self._version = written
                return
        for _ in range(5):
            current = self.store.read(STATUS)
            theirs = int((current.doc.get("epoch") or 0) if current else 0)
            if theirs > self.epoch:
                self.fenced = True
                log.warning("stream %s: the status is written by epoch %d now; this driver (epoch %d) stops "
                            "writing it", self.store.stream, theirs, self.epoch)
                return
            written = self.store.put(STATUS, doc, current.version if current else None)
            if written is not None:
                self._version = written
                return

    def sample(self, status: StreamStatus) -> None:
        if self.fenced:
            return
        if isinstance(self.store, DirectoryStore):
            append_history(self.store.path(STATUS), status)
            return
        now = time.time()
        if now - self._last_sample < HISTORY_STEP_S:
            return
        self._last_sample = now
        point = {"t": round(now, 3), "batch": status.last_batch_id, "rows": status.input_rows,
                 "lag": status.total_lag, "pid": status.pid}
        try:  # only this driver writes it (fenced with the status): no conditional write needed
            got = self.store.read(HISTORY)
            samples = [s for s in (got.doc.get("samples", []) if got else []) if s.get("t", 0) >= now - HISTORY_KEEP_S]
            self.store.write(HISTORY, {"samples": [*samples, point]})
        except ControlStoreError as exc:
            log.warning("stream %s: history not written: %s", self.store.stream, exc)


def read_stream_status(spec: Any, store: ControlStore | None = None) -> StreamStatus | None:
    """The stream's last status (None: never written, or unreadable)."""
    got = (store or control_store(spec)).read(STATUS)
    return status_from(got.doc) if got else None


def read_stream_history(spec: Any, since: float | None = None, store: ControlStore | None = None
                        ) -> list[dict[str, Any]]:
    """The throughput/lag samples of the stream (oldest first)."""
    store = store or control_store(spec)
    if isinstance(store, DirectoryStore):
        return read_history(store.path(STATUS), since)
    got = store.read(HISTORY)
    samples = got.doc.get("samples", []) if got else []
    return [s for s in samples if isinstance(s, dict) and (since is None or float(s.get("t", 0)) >= since)]
