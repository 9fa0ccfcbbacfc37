"""The offset log as a running query's batches read it: each ``offsets/N`` read and parsed once.

Why: batch N needs ``offsets/N`` (its end offsets and watermark, for the ledger's identity) and
``offsets/N-1`` (its start offsets, and the watermark its late records are judged by), and batch N+1
needs ``offsets/N`` again. Read each time, that is three reads a batch, three GETs on an ``s3a://``
checkpoint; kept, one. A query never rewrites an entry it planned (a restore or repair rewrites the log
only while no query runs, and the next query gets a new writer, so a new ``OffsetLog``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewind.checkpoints.logs import parse_offsets_file
from rewind.storage.location import read_text

__all__ = ["OffsetLog"]

Entry = tuple[dict[str, Any], list[dict[str, Any]]]


class OffsetLog:
    """``entry(n)``: ``offsets/n`` of ``checkpoint`` parsed (metadata, sources), the two newest kept.
    Raises what reading or parsing raises (``OSError``, ``ValueError``), and keeps nothing then."""

    KEEP = 2

    def __init__(self, checkpoint: str | Path, read: Callable[[str | Path, str], str] = read_text) -> None:
        self.checkpoint, self._read = checkpoint, read
        self._kept: dict[int, Entry] = {}
        self.reads = 0

    def entry(self, batch_id: int) -> Entry:
        if batch_id not in self._kept:
            self.reads += 1
            parsed = parse_offsets_file(self._read(self.checkpoint, f"offsets/{batch_id}"))
            self._kept[batch_id] = (dict(parsed[0]), list(parsed[1]))
            for old in sorted(self._kept)[:-self.KEEP]:
                del self._kept[old]
        return self._kept[batch_id]
