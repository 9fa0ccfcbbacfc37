"""DELETE by key from a SQL sink's table (``rewind.sink.deletes``; the Kafka sink's copy of its topics too)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import sqlalchemy as sa

IN_CHUNK = 500  # values per IN (...) list: well under every database's parameter limit


def sql_delete(sink: Any, name: str, keys: pd.DataFrame) -> int:
    """DELETE the rows of ``keys`` from a SQL sink's table, in one transaction."""
    table = sink._table(name)
    spec = sink.specs[name]
    values = [tuple(_plain(v) for v in row) for row in keys[list(spec.key)].itertuples(index=False)]
    with sink._connect() as conn, conn.begin():
        for i in range(0, len(values), IN_CHUNK):
            conn.execute(sa.delete(table).where(sa.tuple_(*[table.c[k] for k in spec.key]).in_(values[i:i + IN_CHUNK])))
    return len(values)


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, pd.Timestamp):
        ts = v.tz_convert("UTC") if v.tzinfo else v
        return ts.to_pydatetime().replace(tzinfo=None)
    return v
