"""What a downstream DAG reads for one announced range: the rows the range's batches wrote to a table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from rewind.registry import load_registry


def range_rows(stream: str, table: str, payload: Mapping[str, Any], registry: str | None = None) -> pd.DataFrame:
    """The rows of ``table`` written by the batches of a committed-range event (the table must keep each
    row's ``batch_id``, as the demo's do); a replay's event gives the whole table (a replay may rewrite any
    row of its range: a consumer recomputes from all of it)."""
    from rewind.driver.sink_factory import open_sink  # lazy: opening a sink imports its driver (SQLAlchemy, Kafka)

    spec = load_registry(registry).get(stream)
    with open_sink(spec) as sink:
        frame = sink.read_table(table)
    if payload.get("kind") == "replay":
        return frame
    if "batch_id" not in frame.columns:
        raise ValueError(f"{stream}.{table} has no batch_id column: its rows cannot be told apart by batch")
    ids = {int(b) for b in payload.get("batch_ids") or range(payload["batches"][0], payload["batches"][1] + 1)}
    return frame[frame["batch_id"].isin(ids)]
