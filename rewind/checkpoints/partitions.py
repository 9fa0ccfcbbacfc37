"""Which state partitions a batch ran with: ``spark.sql.shuffle.partitions`` in its offsets file.

Why it matters: a checkpoint's state partitions are fixed until Spark's offline repartition
(``rewind.upgrade.repartition``) writes a batch with another number. A batch before that batch
never had the new partitions, so whether it is complete is judged on its own partitions only.
"""

from __future__ import annotations

from typing import Any

from rewind.checkpoints.logs import parse_offsets_file
from rewind.storage.base import Storage

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def shuffle_partitions(meta: dict[str, Any]) -> int | None:
    """The state partitions a batch ran with (``spark.sql.shuffle.partitions`` in its offsets file)."""
    value = (meta.get("conf") or {}).get(SHUFFLE_PARTITIONS)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def within(state: Any, partitions: int | None) -> Any:
    """The state listing (full or partition directories) cut to partitions ``0 .. partitions-1``: a batch
    is judged on the partitions it ran with (none cut when not known)."""
    if partitions is None:
        return state
    if all(isinstance(parts, dict) for parts in state.values()):
        return {op: {p: v for p, v in parts.items() if int(p) < partitions} for op, parts in state.items()}
    return {op: [p for p in parts if int(p) < partitions] for op, parts in state.items()}


def partitions_at(store: Storage, batch_id: int) -> int | None:
    """The state partitions of ``batch_id`` from its offsets file (None when unreadable)."""
    try:
        meta, _ = parse_offsets_file(store.read_bytes(f"offsets/{batch_id}").decode(errors="replace"))
    except (OSError, ValueError):
        return None
    return shuffle_partitions(meta)
