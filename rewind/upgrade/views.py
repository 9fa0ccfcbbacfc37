"""How the history of upgrades and rescales reads (pure): one row per record, for the command line
(``rewind savepoint history``) and the Rewind page alike."""

from __future__ import annotations

import time
from typing import Any


def _utc(ts: Any) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(ts)))
    except (TypeError, ValueError):
        return "-"


def change_of(record: dict[str, Any]) -> str:
    """``from -> to``: transforms and config hashes of an upgrade, state partitions of a rescale."""
    a, b = record.get("from") or {}, record.get("to") or {}
    if record.get("kind") == "repartition":
        return f"{a.get('partitions')} -> {b.get('partitions')} state partitions"
    short = lambda t: str(t or "?").rsplit(":", 1)[-1]  # noqa: E731 - the class name reads best
    return f"{short(a.get('transform'))} {a.get('hash')} -> {short(b.get('transform'))} {b.get('hash')}"


def history_rows(records: list[dict[str, Any]], newest_first: bool = False) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        started, finished = r.get("started_at"), r.get("finished_at")
        rows.append({
            "id": r.get("id"), "kind": r.get("kind", "upgrade"), "mode": r.get("mode", ""), "change": change_of(r),
            "from": r.get("from"), "to": r.get("to"), "started": _utc(started),
            "seconds": round(float(finished) - float(started), 1) if started and finished else None,
            "savepoint": (r.get("savepoint") or {}).get("id"), "result": r.get("result", "?"),
            "reason": str(r.get("reason") or "")[:400], "steps": [s.get("step") for s in r.get("steps", [])]})
    return list(reversed(rows)) if newest_first else rows
