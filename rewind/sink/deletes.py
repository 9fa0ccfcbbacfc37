"""Removing rows by key, for the one writer that must: a replay that brings late records back.

Why a function and not part of every sink's contract: nothing else deletes. A record the stream
dead-lettered as ``behind_watermark`` that a replay reprocesses into its tables
(``rewind.replay.late``) must not stay a dead letter too, or it would be in two places. SQL sinks
delete the rows (one transaction); the Kafka sink writes tombstones (a record with the key and no
value, in one transaction), which its readers (``rewind.sink.kafka_mirror``) apply as deletes;
Delta tables refuse (``SinkRefused``) until a delete of their own is written.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from rewind.sink.errors import SinkRefused
from rewind.sink.sql_delete import sql_delete

__all__ = ["delete_keys", "supports_delete"]



def supports_delete(sink: Any) -> bool:
    """SQL sinks delete rows, the Kafka sink writes tombstones; others cannot (yet)."""
    return hasattr(sink, "write_tombstones") or _is_sql(sink)


def _is_sql(sink: Any) -> bool:
    return type(sink).__name__ == "ExactlyOnceSqlSink"


def delete_keys(sink: Any, name: str, keys: pd.DataFrame, *, label: str = "delete") -> int:
    """Delete the rows of spec table ``name`` whose key is one of ``keys``' rows (its key columns);
    returns how many keys were asked for. All or nothing."""

    spec = sink.specs[name]
    keys = keys[list(spec.key)].drop_duplicates().reset_index(drop=True)
    if not len(keys):
        return 0
    if _is_sql(sink):
        return sql_delete(sink, name, keys)
    if hasattr(sink, "write_tombstones"):
        return int(sink.write_tombstones(name, keys, label))
    raise SinkRefused(f"{type(sink).__name__} cannot delete rows (table {name!r}); a replay that brings late records "
                      "back needs a SQL or Kafka sink")
