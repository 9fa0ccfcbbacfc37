"""The I/O of the drift check: each table's cursor, and the stream's last committed batch, read for
``rewind.assets.drift`` to judge (``rewind supervisor status``, the Rewind page, the supervisor's watch).

Why two ways to read what was committed: the sink's ledger is the truth, but reading it is a query over
every batch the stream ever committed; the stream's status (one control-store document) has the last
batch and its time. The command line reads the ledger; the page and the watch, which look every few
seconds, read the status and go to the ledger only when it alone cannot decide (``drift.needs_ledger``).
A stream with no cursor document costs one read per table and nothing else.
"""

from __future__ import annotations

import time
from typing import Any

from rewind.api.contract import load_transform
from rewind.assets.cursor import read_cursor, read_ledger
from rewind.assets.drift import TableDrift, last_committed, needs_ledger, oldest_unannounced_at, table_drift
from rewind.assets.ranges import Cursor, LedgerBatch
from rewind.control.location import control_store
from rewind.control.status_store import read_stream_status
from rewind.registry import StreamSpec, parse_duration


def cursors(spec: StreamSpec) -> dict[str, Cursor | None]:
    """Each table of the stream's transform and its cursor (None: no cursor document, no watcher)."""
    store = control_store(spec)
    out: dict[str, Cursor | None] = {}
    for table in load_transform(spec).tables:
        cursor, version = read_cursor(store, table.name)
        out[table.name] = cursor if version is not None else None
    return out


def read_drift(spec: StreamSpec, now: float | None = None, ledger: bool = False) -> list[TableDrift]:
    """The drift of every table of the stream; ``ledger``: read what was committed from the sink's ledger
    (the truth) rather than from the stream's status."""
    now = time.time() if now is None else now
    interval = parse_duration(spec.assets.interval).total_seconds()
    found = cursors(spec)
    if not any(c is not None for c in found.values()):
        return [table_drift(t, None, None, None, interval, now) for t in found]
    batches: list[LedgerBatch] | None = None
    if ledger:
        batches = read_ledger(spec)
        last, at = last_committed(batches)
    else:
        status = read_stream_status(spec)
        last, at = (status.last_batch_id, status.last_batch_at) if status is not None else (None, None)
        if any(needs_ledger(c, last, at, interval, now) for c in found.values()):
            batches = read_ledger(spec, min(c.through_batch for c in found.values() if c is not None))
    return [table_drift(t, c, last, at, interval, now,
                        oldest_unannounced_at(batches, c.through_batch) if batches is not None and c else None)
            for t, c in found.items()]


def drift_views(spec: StreamSpec, now: float | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """What the Rewind page shows (``TableDrift.view()`` per table) and the error that kept it from being
    read (the page shows the rest of the stream either way)."""
    try:
        return [d.view() for d in read_drift(spec, now)], None
    except Exception as exc:  # noqa: BLE001 - a sink or store away: the page says so
        return [], f"{type(exc).__name__}: {exc}"[:300]
