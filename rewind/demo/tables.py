"""The demo stream's sink tables, and which kind of output row goes to which."""

from __future__ import annotations

from rewind.api import Column, TableSpec

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
#: Output row kind -> table, for the contract's default split (records behind the watermark, late
#: candidates the batch writer kept, are dead letters like the transform's own).
KINDS = {"event": EVENTS.name, "dead": DEAD_LETTER.name, "window": WINDOWS.name}
