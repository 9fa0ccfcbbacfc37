"""The real-time mode's ledger in a SQL sink: one row per (stream, epoch, Spark partition).

Written by the JVM writer (``io.rewind.rtm.JdbcRealTimeWriter``) in the last transaction of an epoch; created
here, beside the sink's own tables, so its schema lives with theirs (``rewind.sink.dialects``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from rewind.api.tables import TableSpec
from rewind.sink.dialects import insert_for, spec_table, with_conflict_rule

__all__ = ["LEDGER", "create_ledger", "positional_insert"]

#: The per-(epoch, partition) ledger of a real-time stream (beside the micro-batch ledger).
LEDGER = "rewind_rtm_epochs"


def create_ledger(sink: Any) -> str:
    """The real-time ledger table beside the sink's tables (created if absent); its physical name."""
    table = sa.Table(
        sink.table_prefix + LEDGER, sa.MetaData(),
        sa.Column("stream", sa.String(255), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("spark_partition", sa.BigInteger, nullable=False),
        sa.Column("lease_epoch", sa.BigInteger, nullable=False),
        sa.Column("rows_written", sa.BigInteger, nullable=False),
        sa.Column("end_offsets", sa.Text, nullable=False),  # {"topic/partition": next offset} of its rows
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("stream", "epoch", "spark_partition", name=f"{sink.table_prefix}{LEDGER}_pkey"[:63]))
    with sink.engine.connect().execution_options(rewind_read_only=True) as conn:  # on SQLite, no write lock
        present = sa.inspect(conn).has_table(table.name)
    if not present:
        table.create(sink.engine, checkfirst=True)
    return table.name


def positional_insert(dialect: str, spec: TableSpec, prefix: str) -> tuple[str, tuple[str, ...]]:
    """``spec``'s idempotent insert as the micro-batch sink writes it (``with_conflict_rule``), as SQL text with
    ``?`` parameters for JDBC, and the columns those parameters take, in order."""
    from sqlalchemy.dialects import postgresql, sqlite

    table = spec_table(spec, sa.MetaData(), prefix)
    stmt = with_conflict_rule(insert_for(dialect)(table), spec, table)
    compiler = sqlite.dialect() if dialect == "sqlite" else postgresql.dialect(paramstyle="qmark")
    compiled = stmt.compile(dialect=compiler, column_keys=list(spec.column_names))
    return compiled.string, tuple(compiled.positiontup or ())
