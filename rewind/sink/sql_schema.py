"""The SQL sink's tables as a database holds them: created when missing, older ones brought up to date, or refused.

Why its own module: the sink's transaction, ledger and conflict rules are one job; making sure the
tables they write exist with every column is another, done once per sink before its first write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection

from rewind.sink.errors import SinkRefused

log = logging.getLogger(__name__)

__all__ = ["ensure_tables"]


def ensure_tables(connect: Callable[[], Connection], read: Callable[[], Connection], metadata: sa.MetaData,
                  tables: Sequence[sa.Table], *, where: str, stream: str) -> None:
    """Create ``metadata``'s tables if missing (idempotent, safe from several processes), add the nullable
    columns added since an older version created a table, and refuse (``SinkRefused``) a table that
    lacks a NOT NULL column, naming it, instead of failing later mid-batch. ``connect``/``read``: the sink's
connections for writing and for reading only (SQLite takes no write lock for the latter); ``where``: the
masked URL."""
    with read() as conn:  # tables there already: no write transaction (on SQLite, no wait for the write lock)
        present = set(sa.inspect(conn).get_table_names())
    for attempt in range(3 if any(t.name not in present for t in metadata.sorted_tables) else 0):
        try:
            with connect() as conn, conn.begin():
                metadata.create_all(conn, checkfirst=True)
            break
        except (exc.IntegrityError, exc.ProgrammingError):
            # PostgreSQL: two processes racing on CREATE TABLE (duplicate pg_type key).
            if attempt == 2:
                raise
            time.sleep(0.2 * (attempt + 1))
    for table in tables:
        _add_missing_nullable_columns(connect, read, table, stream)
    with read() as conn:
        inspector = sa.inspect(conn)
        for table in tables:
            existing = {c["name"] for c in inspector.get_columns(table.name)}
            missing = [c.name for c in table.columns if c.name not in existing]
            if missing:
                raise SinkRefused(f"table {table.name!r} exists in {where} without columns {missing}; "
                                  f"migrate it or use another table_prefix")


def _add_missing_nullable_columns(connect: Callable[[], Connection], read: Callable[[], Connection], table: sa.Table,
                                  stream: str) -> None:
    """A table created by an earlier version gets the nullable columns added since (the ledger's
    ``source_offsets``, the dead letters' ``watermark``): ADD COLUMN of a nullable column rewrites
    nothing, and the old rows read as NULL. A missing NOT NULL column stays an error."""
    with read() as conn:
        existing = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
        dialect = conn.dialect
    for col in table.columns:
        if col.name in existing or not col.nullable:
            continue
        kind = col.type.compile(dialect=dialect)
        try:
            with connect() as conn, conn.begin():
                conn.execute(sa.text(f'ALTER TABLE "{table.name}" ADD COLUMN "{col.name}" {kind}'))
        except exc.DBAPIError as error:
            # e.g. SQLite, whose names are case-insensitive, already has "amount" for a new "Amount"
            reason = str(error.orig).splitlines()[0] if error.orig is not None else type(error).__name__
            raise SinkRefused(f"cannot add the nullable column {col.name!r} to table {table.name!r} ({reason}): "
                              "rename the column in the stream's tables or migrate the table") from None
        log.info("sink %s: added column %s to %s", stream, col.name, table.name)
