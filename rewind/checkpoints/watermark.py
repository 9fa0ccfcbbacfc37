"""The watermark a stream's committed batch ran with, from its checkpoint (``offsets/N``).

Why a module of its own: the proofs (``rewind verify``, the DQ proof) and the replay judge which
windows the stream has closed by it, and none of them should import another to read one file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rewind.checkpoints.logs import parse_offsets_file
from rewind.checkpoints.pointer import active_checkpoint, open_active_checkpoint


@dataclass(frozen=True)
class LastCommit:
    """The stream's last committed batch as its checkpoint records it: ``commits/N`` and ``offsets/N``."""

    batch: int
    end_offsets: dict[tuple[str, int], int]
    watermark: datetime | None


def _offsets_of(spec: Any, batch: int | None) -> tuple[int | None, dict[str, Any], list[dict[str, Any]]]:
    """(N, the offsets file's metadata, its sources) of ``offsets/N`` in the active checkpoint, N = ``batch`` or
    the newest ``commits/N``; (None, {}, []) when nothing is committed. Raises when it cannot be read."""

    store = open_active_checkpoint(spec)
    if batch is None:
        ids = [int(f) for f in store.list_dir("commits")[1] if f.isdigit()]
        if not ids:
            return None, {}, []
        batch = max(ids)
    meta, sources = parse_offsets_file(store.read_bytes(f"offsets/{batch}").decode())
    return batch, meta, sources


def _ends(sources: list[dict[str, Any]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for source in sources:
        for topic, parts in source.items():
            for part, offset in parts.items():
                out[(str(topic), int(part))] = max(out.get((str(topic), int(part)), 0), int(offset))
    return out


def _watermark(meta: dict[str, Any]) -> datetime | None:
    wm = meta.get("batchWatermarkMs")
    return None if wm is None else datetime.fromtimestamp(int(wm) / 1000, UTC)


def last_commit(spec: Any) -> LastCommit | None:
    """The newest ``commits/N`` of the active checkpoint with its end offsets and watermark (one read of
    each file); None when there is none or the checkpoint cannot be read."""
    try:
        batch, meta, sources = _offsets_of(spec, None)
    except Exception:  # noqa: BLE001 - no checkpoint (never ran), unreadable: the caller falls back to the status
        return None
    return None if batch is None else LastCommit(batch, _ends(sources), _watermark(meta))


def stream_watermark(spec: Any, batch: int | None) -> tuple[datetime | None, int | None, str | None]:
    """The watermark batch N ran with (``offsets/N``), N = ``batch`` or the checkpoint's last commit.

    Returns (watermark, batch, note); (None, None, note) when the checkpoint cannot say.
    """

    try:
        found, meta, _ = _offsets_of(spec, batch)
        if found is None:
            return None, None, (f"no committed batch in {active_checkpoint(spec)}: windows judged by the raw horizon "
                                "only")
        return _watermark(meta), found, None
    except Exception as exc:  # noqa: BLE001 - the proof still stands on the raw horizon
        return None, batch, f"stream watermark unknown ({type(exc).__name__}: {exc}); windows judged by the raw horizon"


def committed_end_offsets(spec: Any) -> dict[tuple[str, int], int] | None:
    """Where the stream's last committed batch ended, per (topic, partition), from its checkpoint
    (``offsets/N`` of the last ``commits/N``); None when the checkpoint cannot say. Why: a replay
    recomputes an aggregate group from the records the stream has read, no further."""
    try:
        batch, _, sources = _offsets_of(spec, None)
    except Exception:  # noqa: BLE001 - no checkpoint (never ran), unreadable: the caller reads to the end
        return None
    return None if batch is None else _ends(sources)


def planned_after(spec: Any, batch: int) -> frozenset[int] | None:
    """The batch ids the active checkpoint has planned (``offsets/K``) after ``batch``; None when it cannot
    be read. Why: a sink row's ``batch_id`` is its checkpoint's numbering, which starts again at 0 on a new
    checkpoint (a stateless upgrade) and goes back on a restore, so "written after batch N" is "written by
    a batch this checkpoint planned after N", not "an id above N"."""
    try:
        _, files = open_active_checkpoint(spec).list_dir("offsets")
    except Exception:  # noqa: BLE001 - unreadable from here: the caller falls back to ids above ``batch``
        return None
    return frozenset(int(f) for f in files if f.isdigit() and int(f) > batch)
