"""The demo stream's sink tables and how one output batch splits into them."""

from __future__ import annotations

import pandas as pd

from rewind.sink.schema import Column, TableSpec
from rewind.stream.late_routing import LATE_CANDIDATE

EVENTS = TableSpec(
    name="events",
    columns=(Column("event_id", "string", False), Column("key", "string", False), Column("amount", "double"),
             Column("event_time", "timestamp", False), Column("topic", "string", False),
             Column("partition", "int", False), Column("offset", "bigint", False),
             Column("kafka_timestamp", "timestamp"), Column("batch_id", "bigint")),
    key=("event_id",), on_conflict="ignore")
DEAD_LETTER = TableSpec(
    name="dead_letter",
    columns=(Column("topic", "string", False), Column("partition", "int", False), Column("offset", "bigint", False),
             Column("kafka_timestamp", "timestamp"), Column("reason", "string", False),
             Column("raw_value", "string"), Column("batch_id", "bigint"),
             Column("watermark", "timestamp")),  # behind_watermark: the watermark it was behind
    key=("topic", "partition", "offset"), on_conflict="ignore")
WINDOWS = TableSpec(
    name="window_results",
    columns=(Column("window_start", "timestamp", False), Column("window_end", "timestamp", False),
             Column("key", "string", False), Column("event_count", "bigint", False), Column("amount_sum", "double"),
             Column("batch_id", "bigint")),
    key=("window_start", "key"), on_conflict="replace")
TABLES = (EVENTS, DEAD_LETTER, WINDOWS)
#: Output row kind -> table. Records behind the watermark (late candidates the batch writer kept)
#: are dead letters like the transform's own.
_KIND_TO_TABLE = {"event": EVENTS, "dead": DEAD_LETTER, LATE_CANDIDATE: DEAD_LETTER, "window": WINDOWS}


def split_batch(frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
    """Tagged output rows -> one frame per sink table, with the batch id on every row."""
    out: dict[str, pd.DataFrame] = {}
    for spec in TABLES:
        kinds = [k for k, t in _KIND_TO_TABLE.items() if t is spec]
        part = frame[frame["kind"].isin(kinds)]
        cols = [c.name for c in spec.columns if c.name != "batch_id"]
        table = part.reindex(columns=cols)  # a column no row of this batch carries is NULL
        table["batch_id"] = batch_id
        out[spec.name] = table
    return out
