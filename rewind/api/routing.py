"""Rows of a collected batch to their tables by ``kind``: the default ``Transform.split`` (pure pandas).

Why apart from ``rewind.driver.outputs`` (which needs Spark for schemas): the batch writers, the
replay and the proofs split collected batches in plain Python, and the contract's default
``split`` must not import what imports the contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rewind.api.late import LATE_CANDIDATE

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["KIND", "route_by_kind"]

#: The output column that names where a row goes.
KIND = "kind"


def route_by_kind(frame: pd.DataFrame, tables: Sequence[Any], batch_id: int | None, *,
                  kinds: Mapping[str, str] | None = None,
                  dead_letter_table: str = "dead_letter") -> dict[str, pd.DataFrame]:
    """The default ``split``: each row to the table its ``kind`` names (or ``kinds`` maps it to), late
    candidates to the dead-letter table; each table's frame has its columns and ``batch_id`` (pure).
    pandas is imported here, not with the contract: Spark's Python workers import the contract (they unpickle
    a transform's functions) and need no pandas for an Arrow or SQL transform."""
    import pandas as pd

    routes = {**{t.name: t.name for t in tables}, LATE_CANDIDATE: dead_letter_table, **(kinds or {})}
    kind = frame[KIND] if KIND in frame.columns else pd.Series([None] * len(frame), index=frame.index)
    out: dict[str, pd.DataFrame] = {}
    for table in tables:
        mine = [k for k, name in routes.items() if name == table.name]
        part = frame[kind.isin(mine)]
        table_frame = part.reindex(columns=[c for c in table.column_names if c != "batch_id"]).reset_index(drop=True)
        table_frame["batch_id"] = batch_id
        out[table.name] = table_frame
    return out
