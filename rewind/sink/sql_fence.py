"""The SQL sink's fence: one row per stream holding the newest driver lease epoch that wrote it.

Why a row, checked in the batch's own transaction: a driver that lost its lease (paused, then
resumed after another took the stream over) may reach its commit before it learns of it. Its
transaction raises the stream's fence row to its epoch unless the row holds a newer one, and then
rolls back (``SinkFenced``). The statement is one ``INSERT .. ON CONFLICT DO UPDATE .. RETURNING``:
on PostgreSQL it locks the row until the transaction ends, so a new driver's ``fence`` and a
zombie's batch are serialized; on SQLite the batch's ``BEGIN IMMEDIATE`` already is.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from rewind.sink.dialects import insert_for
from rewind.sink.errors import SinkFenced

__all__ = ["FENCE_TABLE", "claim_epoch", "fence_table"]

FENCE_TABLE = "rewind_epochs"


def fence_table(metadata: sa.MetaData, prefix: str) -> sa.Table:
    return sa.Table(
        prefix + FENCE_TABLE, metadata,
        sa.Column("stream", sa.String(255), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("fenced_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("stream", name=f"{prefix}{FENCE_TABLE}_pkey"[:63]),
    )


def claim_epoch(conn: Connection, dialect: str, table: sa.Table, stream: str, epoch: int, now: dt.datetime,
                what: str) -> None:
    """Inside a transaction: raise ``stream``'s fence row to ``epoch``; ``SinkFenced`` (the caller
    rolls back) when it holds a newer one."""
    stmt = insert_for(dialect)(table).values(stream=stream, epoch=epoch, fenced_at=now)
    newer = table.c.epoch > stmt.excluded.epoch
    stmt = stmt.on_conflict_do_update(index_elements=["stream"], set_={
        "epoch": sa.case((newer, table.c.epoch), else_=stmt.excluded.epoch),
        "fenced_at": sa.case((newer, table.c.fenced_at), else_=stmt.excluded.fenced_at)}).returning(table.c.epoch)
    current = int(conn.execute(stmt).scalar_one())
    if current > epoch:
        raise SinkFenced(f"stream {stream!r}: {what} refused: it is written under driver lease epoch {epoch}, and "
                         f"epoch {current} has taken the stream over (this driver is fenced); nothing was written",
                         newer=current)
