"""The Kafka sink's ledger: one record per committed batch on the ledger topic, in the batch's transaction.

Why a topic and not a table elsewhere: the ledger record must commit or abort with the batch's
records, and only a record in the same Kafka transaction does. Its key is the stream's name and
the batch id (``LedgerEntry.key``: the topic is compacted, so each batch keeps its last entry),
its value JSON (``LedgerEntry``). A batch re-planned after a restore has a second entry with its new
offsets; the last one counts. ``read_ledger`` reads the topic ``read_committed`` to its end after
the writer's ``init_transactions``, when no transaction of this stream can still be open.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rewind.kafka.reader import read_to_end
from rewind.sink.kafka_mirror import settled_ends

__all__ = ["LedgerEntry", "ledger_frame", "read_ledger"]


@dataclass(frozen=True)
class LedgerEntry:
    stream: str
    batch_id: int
    committed_at: dt.datetime
    rows: dict[str, int]
    source_offsets: str | None

    def key(self) -> bytes:
        """The record key: one per (stream, batch id), so compaction keeps every batch's last entry."""
        return f"{self.stream}/{self.batch_id}".encode()

    def to_json(self) -> bytes:
        return json.dumps({"stream": self.stream, "batch_id": self.batch_id,
                           "committed_at": self.committed_at.isoformat(), "rows": self.rows,
                           "source_offsets": self.source_offsets}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LedgerEntry:
        d = json.loads(raw)
        return cls(str(d["stream"]), int(d["batch_id"]), dt.datetime.fromisoformat(d["committed_at"]),
                   dict(d.get("rows") or {}), d.get("source_offsets"))


def read_ledger(config: Mapping[str, Any], topic: str, stream: str | None) -> dict[Any, LedgerEntry]:
    """The committed entries of ``stream`` by batch id (all streams, by (stream, batch id), for None);
    an absent topic is an empty ledger."""
    conf = {**config, "isolation.level": "read_committed"}
    ends = settled_ends(conf, topic)
    out: dict[Any, LedgerEntry] = {}
    if ends is None:
        return out
    for msgs in read_to_end(conf, [topic], upper=ends):
        for m in msgs:
            raw = m.value()
            if raw is None:
                continue
            entry = LedgerEntry.from_json(raw)
            if stream is None:
                out[(entry.stream, entry.batch_id)] = entry
            elif entry.stream == stream:
                out[entry.batch_id] = entry
    return out


def ledger_frame(entries: Mapping[Any, LedgerEntry]) -> pd.DataFrame:
    """Entries as the SQL sink's ledger table reads: stream, batch_id, committed_at, rows_json, source_offsets."""
    rows = sorted(entries.values(), key=lambda e: (e.stream, e.batch_id))
    return pd.DataFrame({
        "stream": pd.Series([e.stream for e in rows], dtype=object),
        "batch_id": pd.array([e.batch_id for e in rows], dtype="Int64"),
        "committed_at": pd.to_datetime(pd.Series([e.committed_at for e in rows], dtype=object), utc=True),
        "rows_json": pd.Series([json.dumps(e.rows, sort_keys=True) for e in rows], dtype=object),
        "source_offsets": pd.Series([e.source_offsets for e in rows], dtype=object),
    })
