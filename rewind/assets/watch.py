"""One step of a table's Asset watcher: settle or resend its claim, else claim the next range (blocking I/O).

The Airflow trigger (``rewind_airflow.triggers.committed_range``) runs ``step`` in a thread every few
seconds and hands any payload it returns to Airflow as the Asset event; ``rewind.assets.ranges`` decides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewind.assets.cursor import read_cursor, read_ledger, read_replays, write_cursor
from rewind.assets.ranges import Cursor, Target, claim, next_range, next_replay, resolution, settle
from rewind.assets.uris import asset_name, asset_uri
from rewind.control.location import control_store
from rewind.registry import load_registry, parse_duration

log = logging.getLogger(__name__)

#: ``found(asset_name, event_id, since) -> bool | None``: does Airflow hold the event (None: cannot tell).
Lookup = Callable[[str, str, float], "bool | None"]


@dataclass
class Step:
    """What a step did: the payload to hand to Airflow (None: nothing now) and a line for the log."""

    payload: dict[str, Any] | None
    note: str = ""


def target_of(stream: str, table: str, registry: str | None) -> tuple[Any, Target]:
    spec = load_registry(registry).get(stream)
    interval = parse_duration(spec.assets.interval).total_seconds()
    return spec, Target(stream, table, asset_uri(spec, table), interval)


def step(stream: str, table: str, registry: str | None, owner: str, found: Lookup,
         now: Callable[[], float] = time.time) -> Step:
    """Settle or resend the table's claim; else claim the next replay or committed range and return it."""
    spec, target = target_of(stream, table, registry)
    store = control_store(spec)
    cursor, version = read_cursor(store, table)
    if cursor.pending is not None:
        event = cursor.pending["event"]
        act = resolution(cursor, found(asset_name(stream, table), event["event_id"],
                                       float(cursor.pending.get("claimed_at", 0.0))), now())
        if act == "wait":
            return Step(None, f"{event['event_id']} handed to Airflow, not read back yet")
        if act == "resend":
            renewed = claim(cursor, event, owner, now())
            if write_cursor(store, table, renewed, version) is None:
                return Step(None, f"{event['event_id']}: another watcher moved the cursor")
            return Step(event, f"{event['event_id']} not in Airflow {now() - cursor.pending['claimed_at']:.0f}s "
                               "after it was handed over: handing the same event over again")
        settled = settle(cursor)
        version = write_cursor(store, table, settled, version)
        if version is None:
            return Step(None, f"{event['event_id']}: another watcher settled it")
        log.info("%s: Airflow holds %s (batches %s)", asset_name(stream, table), event["event_id"],
                 event.get("batches") or event.get("replay_id"))
        cursor = settled
    payload = next_replay(target, cursor, read_replays(store))
    if payload is None:
        if now() < cursor.emitted_at + target.interval_s:
            return Step(None)
        payload = next_range(target, cursor, read_ledger(spec, cursor.through_batch), now())
    if payload is None:
        return Step(None)
    if write_cursor(store, table, claim(cursor, payload, owner, now()), version) is None:
        return Step(None, f"{payload['event_id']}: another watcher claimed it first")
    return Step(payload, f"{payload['event_id']} claimed")


def cursor_of(stream: str, table: str, registry: str | None) -> Cursor:
    """The table's cursor (for status and drift)."""
    spec = load_registry(registry).get(stream)
    return read_cursor(control_store(spec), table)[0]
