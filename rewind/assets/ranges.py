"""Which committed range a table's Asset event announces next, and when: pure decisions over the cursor.

Why a cursor with a *pending* claim: the event's home (Airflow's metadata database) and the cursor's
(the stream's control store) cannot be written in one transaction. So an emission is two-phase. The
watcher first claims the range in the cursor (a conditional write: of two watchers, one wins), then
hands the event to Airflow, then settles the claim once the event is read back from Airflow. A claim
found after a restart is settled the same way: already in Airflow -> the cursor moves past it; not
there once Airflow has had ``GRACE_S`` to store it -> the same event (same ``event_id``) is handed over
again. No range is skipped (the cursor moves only past what Airflow holds) and none is announced
twice (a range is re-announced only when Airflow does not hold it).

A range is a run of committed batches ``(through_batch, last]`` of the sink's ledger; its event carries
the batch ids, the start and end offsets per partition, the watermark and the rows per table. Replays
that rewrote a range are announced too (``kind: replay``), each once, by replay id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Seconds Airflow is given to store a handed-over event before a watcher concludes it was lost. The
#: triggerer stores an event within a second or two of the hand-over; a claim younger than this is
#: never re-announced, so a watcher restarted at once cannot race its predecessor's last event.
GRACE_S = 30.0

#: Cursor documents in the stream's control store, one per table: ``assets.<table>``.
DOC_PREFIX = "assets."


@dataclass(frozen=True)
class LedgerBatch:
    """One committed batch as the sink's ledger holds it."""

    batch_id: int
    rows: Mapping[str, int]
    start: Any  # Spark's start offsets of the batch ({topic: {partition: offset}}), or None
    end: Any  # its end offsets
    watermark_ms: int | None
    committed_at: str = ""


@dataclass(frozen=True)
class Cursor:
    """What a table's watcher has announced: through which batch, and the claim in flight."""

    through_batch: int = -1
    end_offsets: Any = None
    emitted_at: float = 0.0  # when the last announced range was claimed (epoch s): the interval counts from it
    seq: int = 0  # announced events so far, so event ids are unique per table
    replays: tuple[str, ...] = ()  # replay ids announced
    pending: dict[str, Any] | None = None  # {"event": payload, "claimed_at": s, "owner": str}

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Cursor:
        return cls(int(doc.get("through_batch", -1)), doc.get("end_offsets"), float(doc.get("emitted_at", 0.0)),
                   int(doc.get("seq", 0)), tuple(doc.get("replays", ())), doc.get("pending"))

    def doc(self) -> dict[str, Any]:
        return {"through_batch": self.through_batch, "end_offsets": self.end_offsets, "emitted_at": self.emitted_at,
                "seq": self.seq, "replays": list(self.replays), "pending": self.pending}


@dataclass(frozen=True)
class Target:
    """The asset a watcher announces: which stream and table, and at most one range per ``interval_s``."""

    stream: str
    table: str
    uri: str
    interval_s: float = 60.0
    extra: dict[str, Any] = field(default_factory=dict)


def ledger_batch(row: Mapping[str, Any]) -> LedgerBatch:
    """A ledger row (``batch_id``, ``rows_json``, ``source_offsets``, ``committed_at``) as a ``LedgerBatch``."""
    ident = _json(row.get("source_offsets")) or {}
    rows = _json(row.get("rows_json")) or {}
    wm = ident.get("watermark_ms") if isinstance(ident, dict) else None
    return LedgerBatch(int(row["batch_id"]), {str(k): int(v) for k, v in rows.items()},
                       ident.get("start") if isinstance(ident, dict) else None,
                       ident.get("end") if isinstance(ident, dict) else None,
                       int(wm) if wm is not None else None, str(row.get("committed_at") or ""))


def next_range(target: Target, cursor: Cursor, ledger: Sequence[LedgerBatch], now: float) -> dict[str, Any] | None:
    """The payload of the next committed-range event, or None (nothing new, or the interval not yet up)."""
    if cursor.pending is not None or now < cursor.emitted_at + target.interval_s:
        return None
    batches = sorted((b for b in ledger if b.batch_id > cursor.through_batch), key=lambda b: b.batch_id)
    if not batches:
        return None
    first, last = batches[0], batches[-1]
    rows: dict[str, int] = {}
    for b in batches:
        for name, n in b.rows.items():
            rows[name] = rows.get(name, 0) + n
    start = cursor.end_offsets if cursor.end_offsets is not None else first.start
    seq = cursor.seq + 1
    wm = last.watermark_ms
    return {"rewind": 1, "kind": "committed", "event_id": f"{target.stream}/{target.table}/{seq}", "seq": seq,
            "stream": target.stream, "table": target.table, "uri": target.uri,
            "batches": [first.batch_id, last.batch_id], "batch_ids": [b.batch_id for b in batches],
            "start_offsets": start, "end_offsets": last.end, "watermark_ms": wm,
            "table_rows": rows.get(target.table, 0), "rows": rows, "committed_at": last.committed_at}


def next_replay(target: Target, cursor: Cursor, replays: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The payload announcing the oldest replay not yet announced (a replay is never held to the interval:
    a consumer that must recompute should know at once), or None."""
    if cursor.pending is not None:
        return None
    for replay in replays:
        rid = str(replay.get("replay_id", ""))
        if rid and rid not in cursor.replays and target.table in (replay.get("tables") or [target.table]):
            seq = cursor.seq + 1
            return {"rewind": 1, "kind": "replay", "event_id": f"{target.stream}/{target.table}/{seq}", "seq": seq,
                    "stream": target.stream, "table": target.table, "uri": target.uri, "replay_id": rid,
                    "run_id": replay.get("run_id"), "start_offsets": replay.get("start_offsets"),
                    "end_offsets": replay.get("end_offsets"), "rows": replay.get("rows") or {},
                    "table_rows": int((replay.get("rows") or {}).get(target.table, 0))}
    return None


def claim(cursor: Cursor, payload: dict[str, Any], owner: str, now: float) -> Cursor:
    """The cursor with ``payload`` claimed (written before the event is handed to Airflow)."""
    return _replace(cursor, pending={"event": payload, "claimed_at": now, "owner": owner})


def settle(cursor: Cursor) -> Cursor:
    """The cursor past its claim, which Airflow holds; the interval counts from the claim."""
    pending = cursor.pending or {}
    event = pending.get("event") or {}
    if event.get("kind") == "replay":
        return _replace(cursor, pending=None, seq=int(event["seq"]), replays=(*cursor.replays, event["replay_id"]))
    return Cursor(int(event["batches"][1]), event.get("end_offsets"), float(pending.get("claimed_at", 0.0)),
                  int(event["seq"]), cursor.replays, None)


def resolution(cursor: Cursor, found: bool | None, now: float) -> str:
    """What to do with a claim: ``settle`` (Airflow holds it), ``resend`` (lost), ``wait`` (too young to
    tell, or Airflow could not be asked: ``found`` is None), ``none`` (no claim)."""
    if cursor.pending is None:
        return "none"
    if found:
        return "settle"
    if found is None or now - float(cursor.pending.get("claimed_at", 0.0)) < GRACE_S:
        return "wait"
    return "resend"


def _replace(cursor: Cursor, **changes: Any) -> Cursor:
    return Cursor(**{**cursor.__dict__, **changes})


def _json(value: Any) -> Any:
    if value is None or isinstance(value, (dict, list)):
        return value
    try:
        return json.loads(str(value))
    except ValueError:
        return None
