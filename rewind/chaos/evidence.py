"""What a chaos run left behind, read into the facts its judge rules on.

Why apart from the run: once the stream has stopped, the harness (`rewind.chaos.harness.ChaosRun.prove`)
reads every record Kafka holds, the sink's events and dead-letter tables, and the stream's own
per-batch late checks (``<status_dir>/<stream>.late.jsonl``, a line per batch from every driver
the run launched). This module turns those reads into the ``kafka``, ``known`` and
``late_checks`` facts; the rules over them are pure (`rewind.chaos.known_set.compare_known`,
`rewind.chaos.judge`), and the reads of Kafka and the sink are the verifier's and the sink's own.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from rewind.chaos.known_set import Coord, Expected, compare_known
from rewind.demo.events import classify_many


def kafka_facts(records: list[Any], delivered: list[Coord]) -> dict[str, Any]:
    """Whether Kafka still holds every record the producer saw acknowledged (``facts["kafka"]``)."""
    held = {(r.topic, r.partition, r.offset) for r in records}
    missing_acks = [c for c in delivered if c not in held]
    return {"records": len(records), "acknowledged_missing": len(missing_acks), "missing_examples": missing_acks[:5]}


def known_facts(expected: Expected, records: list[Any], events: Any, dead: Any,
                allowed_lateness: timedelta) -> dict[str, Any]:
    """The known-set comparison (``facts["known"]``) over Kafka's records and the sink's events and
    dead-letter tables (pandas frames)."""
    return compare_known(expected, _valid_ids_by_coord(records, allowed_lateness),
                         zip(events["event_id"], _coords(events)) if len(events) else [],
                         zip(_coords(dead), dead["reason"]) if len(dead) else [])


def read_late_checks(path: Path, status: Any) -> dict[str, Any]:
    """The stream's own per-batch checks (records routed as behind the watermark vs the rows Spark's
    stateful operators dropped by it), every line of every driver the run launched; `status` is the
    stream's status, for its ``late_mismatches``."""
    rows: list[dict[str, Any]] = []
    unreadable = 0
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:  # a driver SIGKILLed mid-line
            unreadable += 1
    last: dict[int, dict[str, Any]] = {}
    for r in rows:
        last[int(r["batch"])] = r
    bad = [r for r in rows if not r.get("ok")]
    return {"path": str(path), "lines": len(rows), "unreadable_lines": unreadable, "batches": len(last),
            "bad_count": len(bad), "bad": bad[:5], "routed": sum(int(r.get("routed") or 0) for r in last.values()),
            "batches_with_routed": sorted(b for b, r in last.items() if r.get("routed"))[:50],
            "status_mismatches": list(status.late_mismatches) if status is not None else []}


def _coords(frame: Any) -> list[Coord]:
    return list(zip(frame["topic"], frame["partition"].astype(int), frame["offset"].astype(int)))


def _valid_ids_by_coord(records: list[Any], allowed_lateness: timedelta) -> dict[Coord, str]:
    """The event id of every Kafka record the stream's classifier takes for a valid event."""

    out: dict[Coord, str] = {}
    step = 50_000
    for i in range(0, len(records), step):
        chunk = records[i:i + step]
        v = classify_many([r.value for r in chunk], [r.timestamp_ms for r in chunk], allowed_lateness)
        for r, event_id, reason in zip(chunk, v.event_id, v.reason):
            if reason is None and event_id is not None:
                out[(r.topic, int(r.partition), int(r.offset))] = event_id
    return out
