"""The exactly-once SQL sink: one transaction per micro-batch, guarded by a ledger.

Why: Spark re-runs the last uncommitted micro-batch after a crash (its commit
log lags the sink), so a sink that simply appends writes that batch twice.
Here each ``write_batch(batch_id, rows)`` writes every table *and* a ledger row
``(stream, batch_id)`` in one database transaction. The ledger row is inserted
first with ON CONFLICT DO NOTHING: if it already exists the batch was committed
before and the call changes nothing (``skipped=True``); on PostgreSQL a
concurrent writer of the same batch blocks on the ledger key until the first
commits, then skips. A crash mid-transaction leaves neither rows nor a ledger
row, so the re-run writes the batch in full.

Table writes are idempotent too (primary key = the spec's key): "ignore"
tables keep the first row for a key (raw events, dead letters: the original
record is the truth), "replace" tables upsert (window results: a later, more
complete aggregate wins). ``write_rows`` is the same write without the ledger,
for replays, whose rows may overlap what the live stream already wrote.

One SQLAlchemy Core code serves SQLite (the embedded default: a file in WAL
mode with a busy timeout, because the stream and a verifier share it; writers
take the lock with BEGIN IMMEDIATE) and PostgreSQL (``postgresql+psycopg2://``).
The upserts are built with each dialect's ``insert().on_conflict_do_*``. Rows
are validated and converted to plain Python values first (all or nothing),
then go in with executemany in chunks of CHUNK_ROWS: on SQLite the compiled
statement goes straight to sqlite3's executemany (SQLAlchemy's per-row
parameter processing would double the time), on PostgreSQL SQLAlchemy batches
the rows into multi-row VALUES. Timestamps are stored in UTC.

Create a sink in the process that uses it (engines do not survive fork).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence, Union

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url

log = logging.getLogger(__name__)

__all__ = [
    "BatchResult",
    "Column",
    "ColumnType",
    "ExactlyOnceSqlSink",
    "LEDGER_TABLE",
    "Rows",
    "SinkConnectionError",
    "SinkError",
    "SinkWriteError",
    "TableSpec",
]

ColumnType = Literal["string", "int", "bigint", "double", "timestamp", "binary"]
COLUMN_TYPES: frozenset[str] = frozenset(("string", "int", "bigint", "double", "timestamp", "binary"))
#: Table names and prefixes become SQL identifiers (PostgreSQL: 63 bytes max, unquoted lower case).
TABLE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: Column names are quoted by SQLAlchemy, so mixed case (Kafka's ``timestampType``) is fine.
COLUMN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
LEDGER_TABLE = "rewind_batches"
#: Rows per executemany call: large enough to amortise round trips, small enough to bound memory.
CHUNK_ROWS = 5_000
SQLITE_BUSY_TIMEOUT_MS = 30_000

Rows = Union[pd.DataFrame, Sequence[Mapping[str, Any]]]


class SinkError(RuntimeError):
    """Base class of the sink's runtime errors (bad input raises ValueError instead)."""


class SinkConnectionError(SinkError):
    """The database cannot be reached; the message names the URL with the password masked."""


class SinkWriteError(SinkError):
    """The database rejected a write; the transaction was rolled back, nothing of the call is kept."""


# --------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class Column:
    """One column of a sink table; `type` is a portable name mapped to each dialect's type."""

    name: str
    type: ColumnType
    nullable: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not COLUMN_NAME_RE.match(self.name):
            raise ValueError(f"invalid column name {self.name!r}: must match {COLUMN_NAME_RE.pattern}")
        if self.type not in COLUMN_TYPES:
            raise ValueError(f"column {self.name!r}: unknown type {self.type!r}, expected one of {sorted(COLUMN_TYPES)}")


@dataclass(frozen=True)
class TableSpec:
    """A sink table: its columns, its key (the primary key) and what a second row for a key does.

    on_conflict="ignore": first writer wins (raw events, dead letters).
    on_conflict="replace": upsert, last writer wins (window results).
    """

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    on_conflict: Literal["ignore", "replace"]

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "key", tuple(self.key))
        _check_table_name(self.name, "table name")
        if self.name == LEDGER_TABLE:
            raise ValueError(f"table name {self.name!r} is reserved for the sink's ledger")
        names = [c.name for c in self.columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"table {self.name!r}: duplicate columns {dupes}")
        if not self.key:
            raise ValueError(f"table {self.name!r}: key must name at least one column")
        for k in self.key:
            if k not in names:
                raise ValueError(f"table {self.name!r}: key column {k!r} is not among its columns {names}")
        if self.on_conflict not in ("ignore", "replace"):
            raise ValueError(f"table {self.name!r}: on_conflict must be 'ignore' or 'replace', not {self.on_conflict!r}")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True)
class BatchResult:
    """Outcome of write_batch. `rows` counts the rows handed in per table (0s when skipped)."""

    batch_id: int
    skipped: bool
    rows: dict[str, int]
    seconds: float
    replanned: bool = False  # the id was committed before with other source offsets: rewritten idempotently


def _check_table_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not TABLE_NAME_RE.match(value):
        raise ValueError(f"invalid {what} {value!r}: must match {TABLE_NAME_RE.pattern}")


# --------------------------------------------------------------------------- value conversion
# Drivers take Python scalars only (sqlite3 and psycopg2 reject numpy.int64), missing values
# arrive as None/NaN/NA/NaT, and timestamps must be UTC. Conversion happens before the
# transaction starts, so a value that cannot be converted fails the call before any write.
# Values of other types are passed through and left to the database to judge.

def _is_null(v: Any) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def _conv_string(v: Any) -> Any:
    if _is_null(v):
        return None
    return str(v) if isinstance(v, str) else v  # str subclasses (numpy.str_) -> str


def _conv_int(v: Any) -> Any:
    if _is_null(v):
        return None
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        if not float(v).is_integer():
            raise ValueError(f"{v!r} is not an integer")
        return int(v)
    return v


def _conv_double(v: Any) -> Any:
    if _is_null(v):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    return v


def _conv_binary(v: Any) -> Any:
    if _is_null(v):
        return None
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return v


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": _conv_string, "int": _conv_int, "bigint": _conv_int,
    "double": _conv_double, "binary": _conv_binary,
}


def _timestamps_utc(values: pd.Series, sqlite_text: bool) -> list[Any]:
    """datetime/Timestamp/ISO-string values -> UTC (naive values are taken as UTC).

    PostgreSQL gets aware datetimes (timestamptz). SQLite has no time zones, and
    its rows bypass SQLAlchemy's per-row bind processing for speed, so for it
    `sqlite_text=True` renders UTC text in SQLAlchemy's own SQLite DATETIME
    format ("YYYY-MM-DD HH:MM:SS.ffffff"), which SQLAlchemy reads back.
    """
    if values.dtype == object:
        bad = [v for v in values if not _is_null(v) and not isinstance(v, (dt.datetime, dt.date, str, np.datetime64))]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a timestamp (expected datetime, pandas Timestamp or ISO string)")
    elif not (pd.api.types.is_datetime64_any_dtype(values.dtype) or values.isna().all()):
        raise ValueError(f"values of dtype {values.dtype} are not timestamps")
    ts = pd.to_datetime(values, utc=True, format="mixed") if values.dtype == object else pd.to_datetime(values, utc=True)
    if sqlite_text:
        text = np.datetime_as_string(ts.dt.tz_localize(None).to_numpy(dtype="datetime64[us]"), unit="us")
        return [None if t == "NaT" else t[:10] + " " + t[11:] for t in text.tolist()]
    out = ts.array.to_pydatetime().tolist() if len(ts) else []
    return [None if v is None or v is pd.NaT else v for v in out]


def _column_values(series: pd.Series, col: Column, sqlite_text: bool) -> list[Any]:
    """One DataFrame column -> a list of driver-ready Python values (fast paths by dtype)."""
    if col.type == "timestamp":
        return _timestamps_utc(series, sqlite_text)
    kind = series.dtype.kind if isinstance(series.dtype, np.dtype) else "extension"  # Int64 etc. hold pd.NA
    if col.type in ("int", "bigint") and kind in ("i", "u"):
        return series.tolist()  # numpy ints -> Python ints, no nulls possible
    if col.type == "double" and kind == "f":
        return [None if v != v else v for v in series.tolist()]
    if col.type == "string" and kind == "O":
        conv = _conv_string
        return [v if v.__class__ is str else conv(v) for v in series.tolist()]
    if col.type == "binary" and kind == "O":
        conv = _conv_binary
        return [v if v.__class__ is bytes else conv(v) for v in series.tolist()]
    conv = _CONVERTERS[col.type]
    return [conv(v) for v in series.tolist()]


#: The Python class a column's values usually already have (then no conversion call is needed).
_NATIVE: dict[str, type] = {"string": str, "int": int, "bigint": int, "double": float, "binary": bytes}


def _list_values(values: list[Any], col: Column, sqlite_text: bool) -> list[Any]:
    """One column of a list of dicts -> driver-ready Python values."""
    if col.type == "timestamp":
        return _timestamps_utc(pd.Series(values, dtype=object), sqlite_text)
    conv, native = _CONVERTERS[col.type], _NATIVE[col.type]
    return [v if v.__class__ is native and v == v else conv(v) for v in values]  # v == v: NaN -> None


# --------------------------------------------------------------------------- the sink
_SA_TYPES: dict[str, Callable[[], sa.types.TypeEngine[Any]]] = {
    "string": sa.Text,
    "int": sa.Integer,
    "bigint": sa.BigInteger,
    "double": lambda: sa.Double(),
    "timestamp": lambda: sa.DateTime(timezone=True),
    "binary": sa.LargeBinary,
}


@dataclass
class _Prepared:
    """One table's rows, validated and converted, ready for the driver."""

    spec: TableSpec
    columns: dict[str, list[Any]]  # every spec column, deduplicated by key, in input order
    submitted: int  # rows handed in (before deduplication)

    def records(self) -> list[dict[str, Any]]:
        names = list(self.spec.column_names)
        return [dict(zip(names, vals)) for vals in zip(*(self.columns[c] for c in names))]

    def tuples(self, order: Sequence[str]) -> list[tuple[Any, ...]]:
        return list(zip(*(self.columns[c] for c in order)))


class ExactlyOnceSqlSink:
    """Exactly-once writes of micro-batches into SQL tables (see the module docstring).

    Tables are created on first use (or by ``create_tables``); with a
    `table_prefix` every table, the ledger included, is ``<prefix><name>``, so a
    replay's shadow tables never mix with the live ones.
    """

    def __init__(self, url: str, stream: str, tables: Sequence[TableSpec], table_prefix: str = "") -> None:
        if not isinstance(stream, str) or not stream or len(stream) > 255:
            raise ValueError(f"stream must be a non-empty string of at most 255 characters, not {stream!r}")
        if table_prefix:
            _check_table_name(table_prefix, "table prefix")
        specs = list(tables)
        if not specs:
            raise ValueError("at least one TableSpec is needed")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate table names in {names}")
        for name in [*names, LEDGER_TABLE]:
            _check_table_name(table_prefix + name, f"table name (prefix {table_prefix!r} + {name!r})")

        try:
            self._url: URL = make_url(url)
        except exc.ArgumentError:
            raise ValueError("invalid database URL (expected e.g. sqlite:///path/sink.db or "
                             "postgresql+psycopg2://user:pass@host:5432/db)") from None
        self.dialect = self._url.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database {self.safe_url}: only sqlite and postgresql are supported")

        self.stream = stream
        self.table_prefix = table_prefix
        self.specs: dict[str, TableSpec] = {s.name: s for s in specs}
        self._metadata = sa.MetaData()
        self._tables: dict[str, sa.Table] = {
            s.name: sa.Table(
                table_prefix + s.name, self._metadata,
                *[sa.Column(c.name, _SA_TYPES[c.type](), nullable=c.nullable and c.name not in s.key)
                  for c in s.columns],
                sa.PrimaryKeyConstraint(*s.key, name=f"{table_prefix}{s.name}_pkey"[:63]),
            )
            for s in specs
        }
        self._ledger = sa.Table(
            table_prefix + LEDGER_TABLE, self._metadata,
            sa.Column("stream", sa.String(255), nullable=False),
            sa.Column("batch_id", sa.BigInteger, nullable=False),
            sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("rows_json", sa.Text, nullable=False),
            sa.Column("source_offsets", sa.Text, nullable=True),
            sa.PrimaryKeyConstraint("stream", "batch_id", name=f"{table_prefix}{LEDGER_TABLE}_pkey"[:63]),
        )
        self._engine = self._make_engine()
        self._insert = self._dialect_insert()
        self._upserts = {name: self._upsert_statement(name) for name in self.specs}
        self._sqlite_sql: dict[str, tuple[str, tuple[str, ...]]] = {}
        if self.dialect == "sqlite":
            for name, stmt in self._upserts.items():
                compiled = stmt.compile(dialect=self._engine.dialect, column_keys=list(self.specs[name].column_names))
                self._sqlite_sql[name] = (compiled.string, tuple(compiled.positiontup or ()))
        self._ledger_insert = self._insert(self._ledger).on_conflict_do_nothing(index_elements=["stream", "batch_id"])
        self._tables_ready = False

    # ------------------------------------------------------------------ public API
    @property
    def safe_url(self) -> str:
        """The database URL with the password masked: the only form that may be logged."""
        return self._url.render_as_string(hide_password=True)

    @property
    def engine(self) -> Engine:
        return self._engine

    def table_name(self, name: str) -> str:
        """The physical table name (with prefix) of spec table `name`, or of the ledger."""
        if name == LEDGER_TABLE:
            return self._ledger.name
        return self._table(name).name

    def create_tables(self) -> None:
        """Create the spec tables and the ledger if missing (idempotent, safe from several processes).

        An existing table must already have every spec column; otherwise a
        ValueError says which are missing instead of failing later mid-batch.
        """
        for attempt in range(3):
            try:
                with self._connect() as conn, conn.begin():
                    self._metadata.create_all(conn, checkfirst=True)
                break
            except (exc.IntegrityError, exc.ProgrammingError):
                # PostgreSQL: two processes racing on CREATE TABLE (duplicate pg_type key).
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))
        self._add_missing_nullable_columns()
        with self._read() as conn:
            inspector = sa.inspect(conn)
            for table in [*self._tables.values(), self._ledger]:
                existing = {c["name"] for c in inspector.get_columns(table.name)}
                missing = [c.name for c in table.columns if c.name not in existing]
                if missing:
                    raise ValueError(f"table {table.name!r} exists in {self.safe_url} without columns {missing}; "
                                     f"migrate it or use another table_prefix")
        self._tables_ready = True

    def _add_missing_nullable_columns(self) -> None:
        """Tables created by an earlier version get the nullable columns added since (the ledger's
        ``source_offsets``, the dead letters' ``watermark``): ADD COLUMN of a nullable column
        rewrites nothing, and the old rows read as NULL. A missing NOT NULL column stays an error."""
        for table in [*self._tables.values(), self._ledger]:
            with self._read() as conn:
                existing = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
            for col in table.columns:
                if col.name in existing or not col.nullable:
                    continue
                kind = col.type.compile(dialect=self._engine.dialect)
                with self._connect() as conn, conn.begin():
                    conn.execute(sa.text(f'ALTER TABLE "{table.name}" ADD COLUMN "{col.name}" {kind}'))
                log.info("sink %s: added column %s to %s", self.stream, col.name, table.name)

    def write_batch(self, batch_id: int, rows: Mapping[str, Rows], source_offsets: str | None = None) -> BatchResult:
        """Write one micro-batch exactly once: all tables plus the ledger row, in one transaction.

        Returns skipped=True (and changes nothing) if `(stream, batch_id)` is already
        in the ledger with the same `source_offsets` (the batch's end offsets as
        recorded in Spark's offset log; None = unknown, treated as the same). A batch id
        committed before with *other* offsets was re-planned after a checkpoint repair or
        a savepoint restore rolled the query back: skipping it would lose the records the
        new plan holds and the old one did not, so its rows are written (the table writes
        are idempotent) and the ledger row records the new offsets (``replanned=True``).
        Bad input raises ValueError before anything is written; a database error raises
        SinkWriteError after a full rollback.
        """
        if isinstance(batch_id, bool) or not isinstance(batch_id, (int, np.integer)) or batch_id < 0:
            raise ValueError(f"batch_id must be a non-negative integer, not {batch_id!r}")
        batch_id = int(batch_id)
        started = time.perf_counter()
        prepared = self._prepare(rows)
        counts = {name: p.submitted for name, p in prepared.items()}
        self._ensure_tables()
        zero = {name: 0 for name in prepared}
        with self._connect() as conn:
            try:
                with conn.begin():
                    ledger_row = {"stream": self.stream, "batch_id": batch_id, "committed_at": self._now(),
                                  "rows_json": json.dumps(counts, sort_keys=True), "source_offsets": source_offsets}
                    claimed = conn.execute(self._ledger_insert, ledger_row).rowcount
                    replanned = False
                    if claimed == 0:
                        before = conn.execute(sa.select(self._ledger.c.source_offsets).where(
                            self._ledger.c.stream == self.stream, self._ledger.c.batch_id == batch_id)).scalar()
                        replanned = source_offsets is not None and before is not None and before != source_offsets
                    skipped = claimed == 0 and not replanned
                    if replanned:
                        log.warning("stream %s batch %s was committed with source offsets %s and is now planned "
                                    "with %s (the query was rolled back by a repair or restore): writing its rows "
                                    "idempotently", self.stream, batch_id, before, source_offsets)
                        conn.execute(self._ledger.update().where(
                            self._ledger.c.stream == self.stream, self._ledger.c.batch_id == batch_id).values(
                            committed_at=ledger_row["committed_at"], rows_json=ledger_row["rows_json"],
                            source_offsets=source_offsets))
                    if not skipped:
                        self._write_tables(conn, prepared)
            except exc.SQLAlchemyError as e:
                raise self._write_error(e, f"stream {self.stream!r} batch {batch_id}") from e
            if skipped:
                self._warn_if_different(conn, batch_id, counts)
        seconds = time.perf_counter() - started
        log.info("sink %s batch %s %s in %.3fs: %s", self.stream, batch_id,
                 "skipped (already committed)" if skipped else "re-planned, rewritten" if replanned else "committed",
                 seconds, counts)
        return BatchResult(batch_id=batch_id, skipped=skipped, rows=zero if skipped else counts, seconds=seconds,
                           replanned=replanned)

    def write_rows(self, rows: Mapping[str, Rows], *, replay_id: str | None = None,
                   inserted: dict[str, int] | None = None) -> dict[str, int]:
        """Idempotent write without the ledger (the replay path): same conflict rules, one transaction.

        Writing the same rows twice leaves the same tables. Returns the rows handed
        in per table. `replay_id` only labels logs and errors. Given a dict as
        `inserted`, it receives per "ignore" table the rows that were new (the
        rest were already there: a replay reports them as skipped).
        """
        label = f"replay {replay_id!r}" if replay_id else "write_rows"
        prepared = self._prepare(rows)
        counts = {name: p.submitted for name, p in prepared.items()}
        self._ensure_tables()
        started = time.perf_counter()
        new_rows: dict[str, int] = {}
        with self._connect() as conn:
            try:
                with conn.begin():
                    self._write_tables(conn, prepared, new_rows)
            except exc.SQLAlchemyError as e:
                raise self._write_error(e, f"stream {self.stream!r} {label}") from e
        if inserted is not None:
            inserted.update({name: n for name, n in new_rows.items() if self.specs[name].on_conflict == "ignore"})
        log.info("sink %s %s wrote in %.3fs: %s", self.stream, label, time.perf_counter() - started, counts)
        return counts

    def committed_batch_ids(self) -> list[int]:
        """Batch ids of this stream in the ledger, ascending."""
        if not self._exists(self._ledger.name):
            return []
        stmt = (sa.select(self._ledger.c.batch_id).where(self._ledger.c.stream == self.stream)
                .order_by(self._ledger.c.batch_id))
        with self._read() as conn:
            return [int(b) for b in conn.execute(stmt).scalars()]

    def last_committed_batch(self) -> int | None:
        """The highest committed batch id of this stream, or None if none is committed."""
        if not self._exists(self._ledger.name):
            return None
        stmt = sa.select(sa.func.max(self._ledger.c.batch_id)).where(self._ledger.c.stream == self.stream)
        with self._read() as conn:
            value = conn.execute(stmt).scalar()
        return None if value is None else int(value)

    def read_table(self, name: str) -> pd.DataFrame:
        """A whole table ordered by key, with the same dtypes on every database.

        Columns: Int64 for ints, float64 for doubles, datetime64[ns, UTC] for
        timestamps, object (str/bytes/None) otherwise. `name` is the spec name
        (without prefix) or ``"rewind_batches"`` for the ledger (all streams).
        A table not yet created reads as empty.
        """
        if name == LEDGER_TABLE:
            table, types = self._ledger, {"batch_id": "bigint", "committed_at": "timestamp"}
            order = [table.c.stream, table.c.batch_id]
        else:
            table = self._table(name)
            spec = self.specs[name]
            types = {c.name: c.type for c in spec.columns}
            order = [table.c[k] for k in spec.key]
        return self._frame(table, types, sa.select(table).order_by(*order))

    def read_rows(self, name: str, where: Callable[[sa.Table], Any] | None = None,
                  columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Rows of spec table `name` matching ``where(table)`` (a SQLAlchemy condition built on the
        physical table, e.g. ``lambda t: t.c.key.in_(keys)``), with ``read_table``'s dtypes.

        Why: a replay reads back only the rows its range touches (the events of a few windows,
        the coordinates of its range), not whole tables. Timestamps in conditions must be UTC.
        """
        table = self._table(name)
        spec = self.specs[name]
        cols = [table.c[c] for c in (columns or spec.column_names)]
        stmt = sa.select(*cols)
        if where is not None:
            stmt = stmt.where(where(table))
        types = {c.name: c.type for c in spec.columns if c.name in {col.name for col in cols}}
        return self._frame(table, types, stmt, [c.name for c in cols])

    def column_max(self, name: str, column: str) -> Any:
        """The largest value of one column of spec table `name` (None: empty or not created);
        timestamps come back as UTC pandas Timestamps."""
        table = self._table(name)
        if not self._exists(table.name):
            return None
        with self._read() as conn:
            value = conn.execute(sa.select(sa.func.max(table.c[column]))).scalar()
        if value is None:
            return None
        if self.specs[name].columns[self.specs[name].column_names.index(column)].type == "timestamp":
            return pd.to_datetime(value, utc=True)
        return value

    def _frame(self, table: sa.Table, types: Mapping[str, str], stmt: Any,
               names: Sequence[str] | None = None) -> pd.DataFrame:
        names = list(names or [c.name for c in table.columns])
        records: list[Any] = []
        if self._exists(table.name):
            with self._read() as conn:
                records = [tuple(r) for r in conn.execute(stmt)]
        df = pd.DataFrame.from_records(records, columns=names)
        for col, kind in types.items():
            if kind in ("int", "bigint"):
                df[col] = df[col].astype("Int64")
            elif kind == "double":
                df[col] = df[col].astype("float64")
            elif kind == "timestamp":
                df[col] = pd.to_datetime(df[col], utc=True)
        return df

    def dispose(self) -> None:
        """Close pooled connections (call before the process exits or forks)."""
        self._engine.dispose()

    def __enter__(self) -> "ExactlyOnceSqlSink":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        return f"ExactlyOnceSqlSink({self.safe_url}, stream={self.stream!r}, tables={list(self.specs)}, prefix={self.table_prefix!r})"

    # ------------------------------------------------------------------ engine
    def _make_engine(self) -> Engine:
        if self.dialect == "sqlite":
            return self._make_sqlite_engine()
        return sa.create_engine(
            self._url,
            pool_pre_ping=True,
            insertmanyvalues_page_size=CHUNK_ROWS,
            connect_args={"connect_timeout": 10, "options": "-c timezone=UTC",
                          "application_name": f"rewind-sink:{self.stream}"[:63]},
        )

    def _make_sqlite_engine(self) -> Engine:
        db = self._url.database
        if db and db != ":memory:" and not db.startswith("file:"):
            try:
                Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise SinkConnectionError(f"cannot create the directory of {self.safe_url}: {e}") from None
        engine = sa.create_engine(self._url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # We emit BEGIN ourselves (below); pysqlite's implicit BEGIN is deferred, and
            # a deferred transaction that later writes can fail with SQLITE_BUSY at once
            # instead of waiting when another process holds the write lock.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA journal_mode = WAL")  # readers never block the writer (stream + verifier)
            cur.execute("PRAGMA synchronous = FULL")  # a committed batch survives power loss too
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front (BEGIN IMMEDIATE waits up to the busy
            # timeout); readers use a plain deferred snapshot.
            read_only = conn.get_execution_options().get("rewind_read_only", False)
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine

    def _connect(self) -> Connection:
        """A connection, or SinkConnectionError naming the (masked) URL."""
        try:
            return self._engine.connect()
        except exc.DBAPIError as e:
            reason = str(e.orig).strip() if e.orig is not None else str(e)
            raise SinkConnectionError(f"cannot connect to {self.safe_url}: {reason}") from None

    def _read(self) -> Connection:
        return self._connect().execution_options(rewind_read_only=True)

    def _ensure_tables(self) -> None:
        if not self._tables_ready:
            self.create_tables()

    def _exists(self, physical: str) -> bool:
        if self._tables_ready:
            return True
        with self._read() as conn:
            return sa.inspect(conn).has_table(physical)

    def _now(self) -> dt.datetime:
        now = dt.datetime.now(dt.timezone.utc)
        return now.replace(tzinfo=None) if self.dialect == "sqlite" else now

    # ------------------------------------------------------------------ statements
    def _dialect_insert(self) -> Callable[[sa.Table], Any]:
        return sqlite.insert if self.dialect == "sqlite" else postgresql.insert

    def _upsert_statement(self, name: str) -> Any:
        spec, table = self.specs[name], self._tables[name]
        stmt = self._insert(table)
        others = [c for c in spec.column_names if c not in spec.key]
        if spec.on_conflict == "ignore" or not others:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(spec.key))
        else:
            stmt = stmt.on_conflict_do_update(index_elements=list(spec.key),
                                              set_={c: stmt.excluded[c] for c in others})
        if self.dialect == "postgresql":
            # SQLAlchemy 2.1 batches an executemany into multi-row VALUES ("insertmanyvalues")
            # for INSERT .. ON CONFLICT only when it has RETURNING (sqlalchemy#13130);
            # without it psycopg2 sends one statement per row, ~3x slower.
            stmt = stmt.returning(table.c[spec.key[0]])
        return stmt

    def _table(self, name: str) -> sa.Table:
        try:
            return self._tables[name]
        except KeyError:
            raise ValueError(f"unknown table {name!r}: this sink has {sorted(self.specs)}") from None

    # ------------------------------------------------------------------ writing
    def _prepare(self, rows: Mapping[str, Rows]) -> dict[str, _Prepared]:
        """Validate and convert every table's rows before the transaction starts (all or nothing)."""
        if not isinstance(rows, Mapping):
            raise ValueError(f"rows must map table name -> rows, not {type(rows).__name__}")
        unknown = [t for t in rows if t not in self.specs]
        if unknown:
            raise ValueError(f"unknown table(s) {unknown}: this sink has {sorted(self.specs)}")
        return {name: self._prepare_table(self.specs[name], rows[name]) for name in self.specs if name in rows}

    def _prepare_table(self, spec: TableSpec, rows: Rows) -> _Prepared:
        sqlite_text = self.dialect == "sqlite"
        columns: dict[str, list[Any]] = {}
        if rows is None:
            n = 0
        elif isinstance(rows, pd.DataFrame):
            extra = [c for c in rows.columns if c not in spec.column_names]
            if extra:
                raise ValueError(f"table {spec.name!r}: unknown column {extra[0]!r} (columns: {list(spec.column_names)})")
            if rows.columns.duplicated().any():
                raise ValueError(f"table {spec.name!r}: duplicate DataFrame columns {list(rows.columns[rows.columns.duplicated()])}")
            n = len(rows)
            for col in spec.columns:
                if col.name in rows.columns:
                    try:
                        columns[col.name] = _column_values(rows[col.name], col, sqlite_text)
                    except (ValueError, TypeError) as e:
                        raise ValueError(f"table {spec.name!r}, column {col.name!r}: {e}") from None
        else:
            if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
                raise ValueError(f"table {spec.name!r}: rows must be a DataFrame or a list of dicts, not {type(rows).__name__}")
            present: set[str] = set()
            for i, r in enumerate(rows):
                if not isinstance(r, Mapping):
                    raise ValueError(f"table {spec.name!r}: row {i} is a {type(r).__name__}, not a mapping")
                present.update(r.keys())
            extra = sorted((c for c in present if c not in spec.column_names), key=str)
            if extra:
                raise ValueError(f"table {spec.name!r}: unknown column {extra[0]!r} (columns: {list(spec.column_names)})")
            n = len(rows)
            for col in spec.columns:
                if col.name in present:
                    try:
                        columns[col.name] = _list_values([r.get(col.name) for r in rows], col, sqlite_text)
                    except (ValueError, TypeError) as e:
                        raise ValueError(f"table {spec.name!r}, column {col.name!r}: {e}") from None
        if n == 0:
            return _Prepared(spec, {c: [] for c in spec.column_names}, 0)
        for col in spec.columns:
            required = col.name in spec.key or not col.nullable
            if col.name not in columns:
                if required:
                    what = "key column" if col.name in spec.key else "non-nullable column"
                    raise ValueError(f"table {spec.name!r}: rows are missing {what} {col.name!r}")
                columns[col.name] = [None] * n
            elif required:
                for i, v in enumerate(columns[col.name]):
                    if v is None:
                        what = "key column" if col.name in spec.key else "non-nullable column"
                        raise ValueError(f"table {spec.name!r}: row {i} has no value for {what} {col.name!r}")
        names = list(spec.column_names)
        try:
            keep = _dedupe_index(spec, [columns[k] for k in spec.key], n)
        except TypeError as e:  # an unhashable key value (a list, a dict) cannot be a key
            raise ValueError(f"table {spec.name!r}: bad key value: {e}") from None
        if keep is not None:
            columns = {c: [columns[c][i] for i in keep] for c in names}
        return _Prepared(spec, {c: columns[c] for c in names}, n)

    def _write_tables(self, conn: Connection, prepared: Mapping[str, _Prepared],
                      written: dict[str, int] | None = None) -> None:
        for name, p in prepared.items():
            if self.dialect == "sqlite":
                rows: list[Any] = p.tuples(self._sqlite_sql[name][1])
            else:
                rows = p.records()
            for chunk in _chunks(rows, CHUNK_ROWS):
                n = self._insert_rows(conn, name, chunk)
                if written is not None:
                    written[name] = written.get(name, 0) + (n if isinstance(n, int) and n >= 0 else len(chunk))

    def _insert_rows(self, conn: Connection, name: str, chunk: list[Any]) -> int:
        """One executemany of up to CHUNK_ROWS rows into table `name` (a seam for fault-injection tests).

        SQLite: the dialect-compiled upsert goes straight to sqlite3's executemany
        with tuples (SQLAlchemy's per-row parameter processing would double the
        time; values are driver-ready already). PostgreSQL: SQLAlchemy's
        executemany with dicts, batched into multi-row VALUES. Returns the rows
        the database wrote (for "ignore" tables: the new ones; sqlite3 sums its
        rowcount over an executemany, PostgreSQL's RETURNING returns only the
        rows inserted or updated).
        """
        try:
            if self.dialect == "sqlite":
                return int(conn.exec_driver_sql(self._sqlite_sql[name][0], chunk).rowcount)
            return len(conn.execute(self._upserts[name], chunk).all())
        except exc.SQLAlchemyError as e:
            e.add_note(f"while writing table {self._tables[name].name!r}")
            raise

    def _write_error(self, e: exc.SQLAlchemyError, what: str) -> SinkWriteError:
        orig = getattr(e, "orig", None)
        reason = str(orig).strip() if orig is not None else str(e).split("\n")[0]
        where = "; ".join(getattr(e, "__notes__", []))
        return SinkWriteError(f"{what} rolled back ({where or 'no table written'}) in {self.safe_url}: "
                              f"{type(orig or e).__name__}: {reason}")

    def _warn_if_different(self, conn: Connection, batch_id: int, counts: dict[str, int]) -> None:
        """A re-run batch with other row counts means a non-deterministic transform: say so."""
        stmt = sa.select(self._ledger.c.rows_json).where(self._ledger.c.stream == self.stream,
                                                         self._ledger.c.batch_id == batch_id)
        try:
            conn.execution_options(rewind_read_only=True)
            before = json.loads(conn.execute(stmt).scalar() or "{}")
            conn.rollback()
        except (exc.SQLAlchemyError, ValueError):
            return
        if before != counts:
            log.warning("stream %s batch %s was committed with rows %s but re-run with %s: the transform is "
                        "not deterministic; the committed rows are kept", self.stream, batch_id, before, counts)


def _dedupe_index(spec: TableSpec, key_columns: list[list[Any]], n: int) -> list[int] | None:
    """Row positions to keep when keys repeat inside one input, or None if all keys are unique.

    The conflict rule applies inside the input too: "ignore" keeps the first row of
    a key, "replace" the last. (PostgreSQL would also reject one upsert statement
    that touches a key twice.)
    """
    keys: list[Any] = key_columns[0] if len(key_columns) == 1 else list(zip(*key_columns))
    if len(set(keys)) == n:
        return None
    position: dict[Any, int] = {}
    if spec.on_conflict == "ignore":
        for i, k in enumerate(keys):
            position.setdefault(k, i)
    else:
        for i, k in enumerate(keys):
            position[k] = i
    return sorted(position.values())


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
