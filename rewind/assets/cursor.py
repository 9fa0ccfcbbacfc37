"""The edge of a table's Asset events: the sink's ledger read, the cursor read and written in the stream's
control store (conditional writes), and the replays a watcher has to announce."""

from __future__ import annotations

import logging
import time
from typing import Any

from rewind.assets.ranges import DOC_PREFIX, Cursor, LedgerBatch, ledger_batch
from rewind.control.location import control_store
from rewind.control.store import ControlStore, update
from rewind.registry import StreamSpec

log = logging.getLogger(__name__)

#: The control-store document listing replays that rewrote part of a stream's output.
REPLAYS_DOC = "assets-replays"
KEEP_REPLAYS = 200


def read_ledger(spec: StreamSpec, after_batch: int = -1) -> list[LedgerBatch]:
    """The stream's committed batches after ``after_batch``, from its sink's ledger (the sink is the truth:
    a batch is committed when its ledger row is in)."""
    from rewind.driver.sink_factory import open_sink  # lazy: opening a sink imports its driver (SQLAlchemy, Kafka)

    with open_sink(spec) as sink:
        frame = sink.ledger_after(after_batch)
    return [ledger_batch(r) for r in frame.to_dict("records")]


def read_cursor(store: ControlStore, table: str) -> tuple[Cursor, str | None]:
    """The table's cursor and its version (None: no cursor yet)."""
    found = store.read(DOC_PREFIX + table)
    return (Cursor.of(found.doc), found.version) if found else (Cursor(), None)


def write_cursor(store: ControlStore, table: str, cursor: Cursor, version: str | None) -> str | None:
    """Write ``cursor`` only if the stored one is still at ``version``; the new version, or None (another
    watcher wrote first: nothing was written)."""
    return store.put(DOC_PREFIX + table, cursor.doc(), version)


def read_replays(store: ControlStore) -> list[dict[str, Any]]:
    found = store.read(REPLAYS_DOC)
    return list((found.doc if found else {}).get("replays", []))


def record_replay(spec: StreamSpec, replay_id: str, run_id: str | None, start_offsets: Any, end_offsets: Any,
                  rows: dict[str, int], tables: list[str]) -> None:
    """Note a replay that rewrote ``tables`` of the stream over ``[start, end)``, for the Asset watchers to
    announce (each once). Never fails the replay: a note that cannot be written is logged."""
    entry = {"replay_id": replay_id, "run_id": run_id, "start_offsets": start_offsets, "end_offsets": end_offsets,
             "rows": rows, "tables": tables, "at": time.time()}

    def add(doc: dict[str, Any]) -> dict[str, Any]:
        kept = [r for r in doc.get("replays", []) if r.get("replay_id") != replay_id]
        return {"replays": [*kept, entry][-KEEP_REPLAYS:]}

    try:
        update(control_store(spec), REPLAYS_DOC, add)
    except Exception as exc:  # noqa: BLE001 - the replay's own outcome must not depend on its announcement
        log.warning("replay %s of %s: its Asset event could not be noted (%s); downstream DAGs will not hear of "
                    "it", replay_id, spec.name, exc)
