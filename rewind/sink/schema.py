"""What a sink table is: columns with portable types, a key, and what a second row for a key does.

Why portable: a stream's tables module declares its outputs once as ``TableSpec``s (the stream
contract), and every sink maps them to its own storage: SQL types in ``rewind.sink.sql``, JSON records in
``rewind.sink.kafka_codec``. Names are checked here, when the spec is built, because they become
SQL identifiers: a bad name fails when the tables module is imported, not mid-batch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rewind.sink.errors import SinkRefused

__all__ = [
    "COLUMN_NAME_RE",
    "COLUMN_TYPES",
    "LEDGER_TABLE",
    "TABLE_NAME_RE",
    "Column",
    "ColumnType",
    "TableSpec",
    "check_resolved",
    "check_table_name",
]

ColumnType = Literal["string", "int", "bigint", "double", "timestamp", "binary"]
COLUMN_TYPES: frozenset[str] = frozenset(("string", "int", "bigint", "double", "timestamp", "binary"))
#: Table names and prefixes become SQL identifiers (PostgreSQL: 63 bytes max, unquoted lower case).
TABLE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: Column names are quoted by SQLAlchemy, so mixed case (Kafka's ``timestampType``) is fine.
COLUMN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: The ledger of committed batches (a sink's own table, so no spec may take its name).
LEDGER_TABLE = "rewind_batches"


@dataclass(frozen=True)
class Column:
    """One column of a sink table; `type` is a portable name mapped to each dialect's type."""

    name: str
    type: ColumnType
    nullable: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not COLUMN_NAME_RE.match(self.name):
            raise SinkRefused(f"invalid column name {self.name!r}: must match {COLUMN_NAME_RE.pattern}")
        if self.type not in COLUMN_TYPES:
            raise SinkRefused(f"column {self.name!r}: unknown type {self.type!r}, "
                              f"expected one of {sorted(COLUMN_TYPES)}")


@dataclass(frozen=True)
class TableSpec:
    """A sink table: its columns, its key (the primary key) and what a second row for a key does.

    on_conflict="ignore": first writer wins (raw events, dead letters: the original record is the truth).
    on_conflict="replace": upsert, last writer wins (window results: a later, more complete aggregate wins).
    No columns (``columns=()``): they come from the stream's output schema, filled in before a sink
    opens (``rewind.stream.outputs.resolved_tables``).
    on_conflict="latest": upsert where the row with the highest ``version`` wins, whichever is written
    last (an entity's latest state: a replay of an older range never overwrites a newer state, and
    the result does not depend on the order batches or replays commit in).
    Key columns are never null.
    """

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    on_conflict: Literal["ignore", "replace", "latest"]
    version: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "key", tuple(self.key))
        check_table_name(self.name, "table name")
        if self.name == LEDGER_TABLE:
            raise SinkRefused(f"table name {self.name!r} is reserved for the sink's ledger")
        names = [c.name for c in self.columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SinkRefused(f"table {self.name!r}: duplicate columns {dupes}")
        if not self.key:
            raise SinkRefused(f"table {self.name!r}: key must name at least one column")
        for k in self.key if self.columns else ():
            if k not in names:
                raise SinkRefused(f"table {self.name!r}: key column {k!r} is not among its columns {names}")
        if self.on_conflict not in ("ignore", "replace", "latest"):
            raise SinkRefused(f"table {self.name!r}: on_conflict must be 'ignore', 'replace' or 'latest', "
                              f"not {self.on_conflict!r}")
        if self.on_conflict == "latest" and not self.columns:
            if not self.version or self.version in self.key:
                raise SinkRefused(f"table {self.name!r}: on_conflict 'latest' needs version= naming a column outside "
                                  f"the key, got {self.version!r}")
        elif self.on_conflict == "latest":
            kinds = {c.name: c for c in self.columns}
            col = kinds.get(self.version or "")
            if col is None:
                raise SinkRefused(f"table {self.name!r}: on_conflict 'latest' needs version= naming the column "
                                  f"that orders an entity's states (one of {names}), got {self.version!r}")
            if col.type not in ("int", "bigint", "double", "timestamp") or col.nullable or col.name in self.key:
                raise SinkRefused(f"table {self.name!r}: version column {col.name!r} must be a non-null int, bigint, "
                                  f"double or timestamp outside the key (it is {col.type}, "
                                  f"{'nullable' if col.nullable else 'not null'})")
        elif self.version is not None:
            raise SinkRefused(f"table {self.name!r}: version={self.version!r} is only for on_conflict 'latest'")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def resolved(self) -> bool:
        """False for a table declared without columns (they come from the stream's output schema,
        ``rewind.stream.outputs.resolved_tables``): no sink takes it before they are filled in."""
        return bool(self.columns)


def check_resolved(specs: Sequence[TableSpec]) -> None:
    """Refuse tables whose columns are still to come from the stream's output (a sink needs them)."""
    pending = [s.name for s in specs if not s.resolved]
    if pending:
        raise SinkRefused(f"tables {pending} have no columns yet: they come from the stream's output schema; open the "
                          "sink with rewind.stream.sink_factory.open_sink (it resolves them) or declare the columns")


def check_table_name(value: str, what: str) -> None:
    """Refuse a table name or prefix that is not a plain SQL identifier (``what`` names it in the message)."""
    if not isinstance(value, str) or not TABLE_NAME_RE.match(value):
        raise SinkRefused(f"invalid {what} {value!r}: must match {TABLE_NAME_RE.pattern}")
