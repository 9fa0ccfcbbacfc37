"""The sink tests' tables and rows: events (insert-once), dead letters, window totals (replace), stock (latest).

One definition for every sink's tests (SQL, Kafka, Delta, staging and the commit-point suite), so a
behaviour proven on one sink is proven on the same data on the others.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from rewind.sink.schema import LEDGER_TABLE, Column, TableSpec

UTC = dt.UTC
T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=UTC)

EVENTS = TableSpec(
    "events",
    (Column("topic", "string", nullable=False), Column("partition", "int", nullable=False),
     Column("offset", "bigint", nullable=False), Column("key", "binary"), Column("value", "binary"),
     Column("timestamp", "timestamp"), Column("amount", "double"), Column("batch_id", "bigint")),
    key=("topic", "partition", "offset"), on_conflict="ignore")
DEAD_LETTER = TableSpec(
    "dead_letter",
    (Column("topic", "string", nullable=False), Column("partition", "int", nullable=False),
     Column("offset", "bigint", nullable=False), Column("error", "string"), Column("raw", "binary")),
    key=("topic", "partition", "offset"), on_conflict="ignore")
WINDOWS = TableSpec(
    "window_results",
    (Column("window_start", "timestamp", nullable=False), Column("window_end", "timestamp"),
     Column("user", "string", nullable=False), Column("count", "bigint"), Column("total", "double")),
    key=("window_start", "user"), on_conflict="replace")
TABLES = (EVENTS, DEAD_LETTER, WINDOWS)
STATE = TableSpec("stock", (Column("sku", "string", False), Column("qty", "bigint"),
                            Column("version", "bigint", False), Column("batch_id", "bigint")),
                  key=("sku",), on_conflict="latest", version="version")


def events(start: int, n: int, *, batch_id: int = 0, value: bytes = b"v", partitions: int = 3) -> list[dict[str, Any]]:
    return [
        {"topic": "orders", "partition": i % partitions, "offset": i, "key": f"k{i}".encode(), "value": value,
         "timestamp": T0 + dt.timedelta(seconds=i), "amount": i * 0.5, "batch_id": batch_id}
        for i in range(start, start + n)
    ]


def dead_letters(start: int, n: int) -> list[dict[str, Any]]:
    return [{"topic": "orders", "partition": 0, "offset": i, "error": "bad json", "raw": b"{"}
            for i in range(start, start + n)]


def windows(users: list[str], count: int) -> pd.DataFrame:
    return pd.DataFrame({
        "window_start": pd.Timestamp(T0), "window_end": pd.Timestamp(T0 + dt.timedelta(minutes=1)),
        "user": users, "count": count, "total": float(count) * 1.5,
    })


def counts(sink: Any) -> dict[str, int]:
    """Rows per table of a sink, the ledger's (all streams) included."""
    return {name: len(sink.read_table(name)) for name in [*sink.specs, LEDGER_TABLE]}
