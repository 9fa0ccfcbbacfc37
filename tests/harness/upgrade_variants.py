"""New versions of the demo and inventory transforms, for the upgrade tests and for trying an upgrade.

Each is what a team would really ship, in one small class:

- ``DemoWithCents``: the demo plus a nullable column ``amount_cents`` in its events table (compatible:
  old rows read NULL); ``DemoWithCentsAndSign`` adds ``amount_sign`` on top (a second compatible
  change, so two upgrades in a row each add a column); ``DemoWithCentsSignAndDigits`` a third
  (``amount_digits``, the blue/green cutover's);
- ``DemoDedupByEventAndKey``: deduplicates by (event_id, key) instead of event_id: the state key
  of its deduplication changes, which Spark's state schema check refuses;
- ``DemoFailsOnPoison``: ``DemoWithCentsAndSign`` with a bug that only a record keyed ``poison`` meets: it
  passes a pre-flight batch without one and crashes on its first live batch that holds one (a
  rollback's reason to exist beyond the pre-flight);
- ``DemoCountsOneMore``: ``DemoWithCentsAndSign`` with a bug that fails nothing: one window row of each
  batch counts one event more than it holds (the watch's proof's reason to exist);
- ``InventoryWithCents``: the stateless inventory stream plus a nullable ``value_cents`` column.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pandas as pd

from rewind.api import Column, TableSpec
from rewind.demo.tables import DEAD_LETTER, EVENTS, WINDOWS
from rewind.demo.transform import DemoTransform
from rewind.inventory.tables import STOCK
from rewind.inventory.transform import InventoryTransform

POISON_KEY = "poison"


def _with_columns(table: TableSpec, *columns: Column) -> TableSpec:
    batch = [c for c in table.columns if c.name == "batch_id"]
    rest = [c for c in table.columns if c.name != "batch_id"]
    return TableSpec(table.name, (*rest, *columns, *batch), table.key, table.on_conflict, table.version)


class DemoWithCents(DemoTransform):
    """The demo with ``events.amount_cents`` (bigint, nullable)."""

    extra: tuple[Column, ...] = (Column("amount_cents", "bigint"),)

    @property
    def tables(self) -> Sequence[TableSpec]:
        return (_with_columns(EVENTS, *self.extra), DEAD_LETTER, WINDOWS)

    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        out = super().split(frame, batch_id)
        events = out["events"]
        events["amount_cents"] = (events["amount"].astype("float64") * 100).round().astype("Int64")
        return out


class DemoWithCentsAndSign(DemoWithCents):
    """``DemoWithCents`` with ``events.amount_sign`` (string, nullable) too."""

    extra = (Column("amount_cents", "bigint"), Column("amount_sign", "string"))

    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        out = super().split(frame, batch_id)
        events = out["events"]
        events["amount_sign"] = ["-" if a < 0 else "+" for a in events["amount"].astype("float64")]
        return out


class DemoWithCentsSignAndDigits(DemoWithCentsAndSign):
    """``DemoWithCentsAndSign`` with ``events.amount_digits`` (bigint, nullable: the digits of the cents) too."""

    extra = (Column("amount_cents", "bigint"), Column("amount_sign", "string"), Column("amount_digits", "bigint"))

    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        out = super().split(frame, batch_id)
        events = out["events"]
        events["amount_digits"] = events["amount_cents"].abs().astype("string").str.len().astype("Int64")
        return out


class DemoFailsOnPoison(DemoWithCentsAndSign):
    """``DemoWithCentsAndSign`` that raises on a batch holding an event keyed ``poison``."""

    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        out = super().split(frame, batch_id)
        if (out["events"]["key"] == POISON_KEY).any():
            raise ValueError(f"batch {batch_id}: cannot price key {POISON_KEY!r}")
        return out


class DemoCountsOneMore(DemoWithCentsAndSign):
    """``DemoWithCentsAndSign`` whose first window row of each batch has ``event_count`` one too many: it
    runs, commits and keeps up; only a proof of its output sees it."""

    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        out = super().split(frame, batch_id)
        windows = out["window_results"]
        if len(windows):
            windows.loc[windows.index[0], "event_count"] = windows["event_count"].iloc[0] + 1
        return out


class DemoDedupByEventAndKey(DemoTransform):
    """The demo with its deduplication keyed by (event_id, key): another state key schema."""

    def build(self, source: Any, spec: Any) -> Any:
        return dedup_by(source, spec, ("event_id", "key"))


def dedup_by(source: Any, spec: Any, keys: tuple[str, ...]) -> Any:
    """``rewind.demo.transform.build`` with the deduplication keyed by ``keys`` (the rest as there,
    without the shared exchange, which only saves work)."""
    from pyspark.sql import functions as F

    from rewind.api import LATE_CANDIDATE
    from rewind.demo.transform import PARSED_SCHEMA, _shape, _spark_type, parse_batches

    d = spec.durations()
    ddl = ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in PARSED_SCHEMA)
    parsed = source.select("value", "topic", "partition", "offset", "timestamp").mapInArrow(
        functools.partial(parse_batches, allowed_lateness_s=d["allowed_lateness"].total_seconds()), ddl)
    dead = parsed.filter(F.col("status") == "dead")
    valid_rows = parsed.filter(F.col("status") == "ok")
    valid = valid_rows.withWatermark("event_time", f"{int(d['watermark_delay'].total_seconds())} seconds")
    events = valid.dropDuplicatesWithinWatermark(list(keys)) if source.isStreaming else valid.dropDuplicates(list(keys))
    windows = (events.groupBy(F.window("event_time", f"{int(d['window'].total_seconds())} seconds"), "key")
               .agg(F.count("*").alias("event_count"), F.sum("amount").alias("amount_sum"))
               .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                       "key", "event_count", "amount_sum"))
    out = _shape(dead, "dead").unionByName(_shape(events, "event")).unionByName(_shape(windows, "window"))
    return out.unionByName(_shape(valid_rows, LATE_CANDIDATE)) if source.isStreaming else out


class InventoryWithCents(InventoryTransform):
    """The inventory stream with ``stock.value_cents`` (bigint, nullable)."""

    @property
    def tables(self) -> Sequence[TableSpec]:
        from rewind.inventory.tables import TABLES

        return tuple(_with_columns(t, Column("value_cents", "bigint")) if t.name == STOCK.name else t for t in TABLES)

    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        out = super().split(frame, batch_id)
        stock = out[STOCK.name]
        stock["value_cents"] = (stock["stock_value"].astype("float64") * 100).round().astype("Int64")
        return out
