"""What a sink table is: columns with portable types, a key, and what a second row for a key does.

Why portable: a stream's tables module declares its outputs once as ``TableSpec``s (the stream
contract), and every sink maps them to its own storage: SQL types in ``rewind.sink.sql``, JSON records in
``rewind.sink.kafka_codec``. Names are checked here, when the spec is built, because they become
SQL identifiers: a bad name fails when the tables module is imported, not mid-batch.

The portable types are ``string``, ``int``, ``bigint``, ``double``, ``timestamp``, ``binary`` and
``decimal(P,S)`` (1 <= P <= 38, 0 <= S <= P: Spark's and Delta's range), the exact type for money:
integers and decimals are never compared or stored as floats (docs/sinks.md, "How values are
stored"). A table may declare a relative tolerance for its ``double`` columns (``tolerance``), which
the proofs use when they compare a sink's value with its recomputation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from rewind.errors import SinkRefused

__all__ = [
    "COLUMN_NAME_RE",
    "COLUMN_TYPES",
    "DECIMAL_MAX_PRECISION",
    "LEDGER_TABLE",
    "TABLE_NAME_RE",
    "Column",
    "ColumnType",
    "TableSpec",
    "check_resolved",
    "check_table_name",
    "decimal_of",
]

#: A column's portable type: one of ``COLUMN_TYPES`` or ``decimal(P,S)`` (a ``str``: the decimal's
#: precision and scale are part of the name, so no Literal can list them).
ColumnType = str
#: The plain portable types (everything but ``decimal(P,S)``, see ``decimal_of``).
COLUMN_TYPES: frozenset[str] = frozenset(("string", "int", "bigint", "double", "timestamp", "binary"))
#: The largest decimal precision every sink stores exactly (Spark, Delta/Arrow decimal128, PostgreSQL).
DECIMAL_MAX_PRECISION = 38
_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)$")
_TYPE_FORMS = (f"one of {sorted(COLUMN_TYPES)} or 'decimal(P,S)' with 1 <= P <= {DECIMAL_MAX_PRECISION} "
               "and 0 <= S <= P (e.g. 'decimal(18,2)')")
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
        if isinstance(self.type, str) and self.type in COLUMN_TYPES:
            return
        decimal = decimal_of(self.type) if isinstance(self.type, str) else None
        if decimal is None:
            raise SinkRefused(f"column {self.name!r}: unknown type {self.type!r}, expected {_TYPE_FORMS}")
        object.__setattr__(self, "type", f"decimal({decimal[0]},{decimal[1]})")  # "decimal(18, 2)" -> "decimal(18,2)"


def decimal_of(type_name: str) -> tuple[int, int] | None:
    """(precision, scale) of a ``decimal(P,S)`` type name, or None for any other name (a plain type,
    or a decimal out of range: P from 1 to 38, S from 0 to P)."""
    m = _DECIMAL_RE.match(type_name) if isinstance(type_name, str) else None
    if m is None:
        return None
    precision, scale = int(m.group(1)), int(m.group(2))
    if not 1 <= precision <= DECIMAL_MAX_PRECISION or not 0 <= scale <= precision:
        return None
    return precision, scale


@dataclass(frozen=True)
class TableSpec:
    """A sink table: its columns, its key (the primary key) and what a second row for a key does.

    on_conflict="ignore": first writer wins (raw events, dead letters: the original record is the truth).
    on_conflict="replace": upsert, last writer wins (window results: a later, more complete aggregate wins).
    No columns (``columns=()``): they come from the stream's output schema, filled in before a sink
    opens (``rewind.driver.outputs.resolved_tables``).
    on_conflict="latest": upsert where the row with the highest ``version`` wins, whichever is written
    last (an entity's latest state: a replay of an older range never overwrites a newer state, and
    the result does not depend on the order batches or replays commit in).
    Key columns are never null.
    tolerance: a relative tolerance per ``double`` column (``{"rate": 1e-6}``), for the proofs that
    compare the sink's values with a recomputation; stored as a sorted tuple of (column, tolerance)
    pairs (the spec stays hashable), read with ``tolerance_of``. A column without one gets the
    proofs' default; every other type is compared exactly.
    """

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    on_conflict: Literal["ignore", "replace", "latest"]
    version: str | None = None
    tolerance: Mapping[str, float] | tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "key", tuple(self.key))
        object.__setattr__(self, "tolerance", _tolerance_pairs(self.name, self.tolerance))
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
        self._check_tolerance()

    def _check_tolerance(self) -> None:
        """A tolerance names a ``double`` column outside the key (checked once the columns are known)."""
        if not self.columns:
            return  # from the stream's output schema: checked when they are filled in
        types = {c.name: c.type for c in self.columns}
        for column, _ in self._tolerances():
            kind = types.get(column)
            if kind is None:
                raise SinkRefused(f"table {self.name!r}: tolerance names column {column!r}, which it does not have "
                                  f"(its columns: {list(types)}); fix the name or remove the tolerance")
            if kind != "double":
                raise SinkRefused(f"table {self.name!r}: tolerance on column {column!r}, a {kind} column: only double "
                                  "columns take one (ints, decimals, strings, times and bytes compare exactly); "
                                  "remove it, or make the column a double if approximate values are right for it")
            if column in self.key:
                raise SinkRefused(f"table {self.name!r}: tolerance on key column {column!r}: a key is matched "
                                  "exactly; remove the tolerance")

    def tolerance_of(self, column: str) -> float | None:
        """The relative tolerance the table declares for ``column``, or None (then the proofs' default)."""
        for name, value in self._tolerances():
            if name == column:
                return value
        return None

    def _tolerances(self) -> tuple[tuple[str, float], ...]:
        return cast(tuple[tuple[str, float], ...], self.tolerance)  # sorted pairs after __post_init__

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def resolved(self) -> bool:
        """False for a table declared without columns (they come from the stream's output schema,
        ``rewind.driver.outputs.resolved_tables``): no sink takes it before they are filled in."""
        return bool(self.columns)


def _tolerance_pairs(table: str, given: object) -> tuple[tuple[str, float], ...]:
    """A tolerance declaration (a mapping, or (column, tolerance) pairs) -> sorted pairs; each a
    finite number >= 0 (0: exact)."""
    if given is None:
        return ()
    if isinstance(given, Mapping):
        items = list(given.items())
    elif isinstance(given, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in given):
        items = [(p[0], p[1]) for p in given]
    else:
        raise SinkRefused(f"table {table!r}: tolerance must map column -> relative tolerance, e.g. "
                          f"{{'rate': 1e-6}}, not {given!r}")
    pairs: dict[str, float] = {}
    for column, value in items:
        if not isinstance(column, str):
            raise SinkRefused(f"table {table!r}: tolerance keys are column names, not {column!r}")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        if not ok:
            raise SinkRefused(f"table {table!r}: tolerance of column {column!r} is {value!r}; give a finite relative "
                              "tolerance >= 0, e.g. 1e-6 (0 compares exactly)")
        if column in pairs:
            raise SinkRefused(f"table {table!r}: tolerance names column {column!r} twice; keep one")
        pairs[column] = float(value)
    return tuple(sorted(pairs.items()))


def check_resolved(specs: Sequence[TableSpec]) -> None:
    """Refuse tables whose columns are still to come from the stream's output (a sink needs them)."""
    pending = [s.name for s in specs if not s.resolved]
    if pending:
        raise SinkRefused(f"tables {pending} have no columns yet: they come from the stream's output schema; open the "
                          "sink with rewind.driver.sink_factory.open_sink (it resolves them) or declare the columns")


def check_table_name(value: str, what: str) -> None:
    """Refuse a table name or prefix that is not a plain SQL identifier (``what`` names it in the message)."""
    if not isinstance(value, str) or not TABLE_NAME_RE.match(value):
        raise SinkRefused(f"invalid {what} {value!r}: must match {TABLE_NAME_RE.pattern}")

def output_table(name: str, key: Sequence[str], on_conflict: Literal["ignore", "replace", "latest"] = "ignore",
                 version: str | None = None, tolerance: Mapping[str, float] | None = None) -> TableSpec:
    """A table whose columns are the ones ``build`` outputs for it (filled in by ``resolved_tables``);
    ``tolerance``: relative tolerances of its double columns (``TableSpec.tolerance``), checked once
    the columns are known."""
    return TableSpec(name=name, columns=(), key=tuple(key), on_conflict=on_conflict, version=version,
                     tolerance=dict(tolerance or {}))
