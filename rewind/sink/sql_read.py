"""A column's largest value as a SQL sink holds it, exactly.

Why its own function: SQLite keeps decimals as text (``rewind.sink.dialects``), and its ``max()`` would
compare them as text ("9.50" above "10.00"). The exact largest is found among the values whose float is
the largest float (rounding to float keeps order); every other kind is the database's own ``max()``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from rewind.api.tables import decimal_of

__all__ = ["column_max"]


def column_max(conn: Connection, dialect: str, col: sa.Column[Any], kind: str) -> Any:
    """The largest value of ``col`` (None: no value); timestamps as UTC pandas Timestamps, decimals as
    ``decimal.Decimal``."""
    if dialect == "sqlite" and decimal_of(kind) is not None:
        top = sa.select(sa.func.max(sa.cast(col, sa.Float))).scalar_subquery()
        candidates = conn.execute(sa.select(col).where(sa.cast(col, sa.Float) >= top)).scalars().all()
        value = max(candidates, default=None)
    else:
        value = conn.execute(sa.select(sa.func.max(col))).scalar()
    if value is None:
        return None
    if kind == "timestamp":
        return pd.to_datetime(value, utc=True)
    return value
