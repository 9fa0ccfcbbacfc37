"""How the SQL sink speaks to SQLite and PostgreSQL: engines, tables built from specs, upserts.

Why one SQLAlchemy Core code for both: the embedded platform runs on SQLite and production on
PostgreSQL, and the exactly-once proof must hold on each; only what differs lives here.

- SQLite (the embedded default) is a file in WAL mode with a busy timeout, because the stream and
  a verifier share it (readers never block the writer). Writers take the lock with BEGIN
  IMMEDIATE: pysqlite's implicit BEGIN is deferred, and a deferred transaction that later writes
  can fail with SQLITE_BUSY at once instead of waiting. ``synchronous = FULL``: a committed batch
  survives power loss too. Its upserts are compiled once to SQL text, so the rows go straight to
  sqlite3's executemany (see ``rewind.sink.convert`` for why).
- PostgreSQL (``postgresql+psycopg2://``) sessions run in UTC. SQLAlchemy 2.1 batches an
  executemany of ``INSERT .. ON CONFLICT`` into multi-row VALUES ("insertmanyvalues") only when it
  has RETURNING (sqlalchemy#13130); without it psycopg2 sends one statement per row, ~3x slower.

The upserts are each dialect's ``insert().on_conflict_do_*`` on the spec's key: "ignore" tables do
nothing on conflict, "replace" tables update every non-key column.

Column types (``_SA_TYPES``): a ``decimal(P,S)`` column is ``ExactDecimal``: ``NUMERIC(P,S)`` on
PostgreSQL, ``TEXT`` holding the canonical text ("12.30") on SQLite, where a NUMERIC column would
turn the value into an 8-byte float; both read back as ``decimal.Decimal`` at the scale. Times are
``timestamptz`` on PostgreSQL (microseconds) and SQLAlchemy's DATETIME text on SQLite
("YYYY-MM-DD HH:MM:SS.ffffff", UTC).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine

from rewind.api.tables import LEDGER_TABLE, TableSpec, decimal_of
from rewind.sink.convert import decimal_text, exact_decimal, read_decimal
from rewind.sink.errors import SinkConnectionError

__all__ = [
    "CHUNK_ROWS",
    "SQLITE_BUSY_TIMEOUT_MS",
    "ExactDecimal",
    "column_type",
    "compiled_sqlite",
    "insert_for",
    "ledger_table",
    "make_engine",
    "spec_table",
    "upsert_statement",
]

#: Rows per executemany call: large enough to amortise round trips, small enough to bound memory.
CHUNK_ROWS = 5_000
SQLITE_BUSY_TIMEOUT_MS = 30_000

_SA_TYPES: dict[str, Callable[[], sa.types.TypeEngine[Any]]] = {
    "string": sa.Text,
    "int": sa.Integer,
    "bigint": sa.BigInteger,
    "double": lambda: sa.Double(),
    "timestamp": lambda: sa.DateTime(timezone=True),
    "binary": sa.LargeBinary,
}


class ExactDecimal(sa.types.TypeDecorator[decimal.Decimal]):
    """A ``decimal(P,S)`` column: ``NUMERIC(P,S)`` on PostgreSQL; on SQLite ``TEXT`` holding the
    canonical text at the scale ("12.30"), since SQLite has no decimal type and NUMERIC affinity
    would store an 8-byte float. Either way it reads back as a ``decimal.Decimal`` at the scale.

    The sink's own SQLite writes bypass this (``rewind.sink.convert`` renders the text); the bind
    processing here serves conditions (``read_rows(where=...)``, deletes) and other SQLAlchemy
    writes. On SQLite a condition compares text: equality is exact, ordering is not numeric.
    """

    impl = sa.Numeric
    cache_ok = True

    def __init__(self, precision: int, scale: int) -> None:
        super().__init__(precision=precision, scale=scale, asdecimal=True)
        self.precision = precision
        self.scale = scale

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.Text())
        return dialect.type_descriptor(sa.Numeric(self.precision, self.scale, asdecimal=True))

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        try:
            exact = exact_decimal(value, self.precision, self.scale)
        except ValueError:  # a condition's value that no row can hold: compared as given
            return value if dialect.name != "sqlite" or isinstance(value, str) else str(value)
        return decimal_text(exact) if dialect.name == "sqlite" else exact

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> decimal.Decimal | None:
        return read_decimal(value, self.scale)


def column_type(kind: str) -> sa.types.TypeEngine[Any]:
    """The SQLAlchemy type of a portable column type (``rewind.api.tables``)."""
    exact = decimal_of(kind)
    if exact is not None:
        return ExactDecimal(*exact)
    return _SA_TYPES[kind]()


# --------------------------------------------------------------------------- tables
def spec_table(spec: TableSpec, metadata: sa.MetaData, prefix: str) -> sa.Table:
    """The SQL table of ``spec``: its key is the primary key, and key columns are NOT NULL."""
    return sa.Table(
        prefix + spec.name, metadata,
        *[sa.Column(c.name, column_type(c.type), nullable=c.nullable and c.name not in spec.key)
          for c in spec.columns],
        sa.PrimaryKeyConstraint(*spec.key, name=f"{prefix}{spec.name}_pkey"[:63]),
    )


def ledger_table(metadata: sa.MetaData, prefix: str) -> sa.Table:
    """The ledger: one row per committed ``(stream, batch_id)``, with its row counts, source offsets and
    the lease epoch of the driver that committed it."""
    return sa.Table(
        prefix + LEDGER_TABLE, metadata,
        sa.Column("stream", sa.String(255), nullable=False),
        sa.Column("batch_id", sa.BigInteger, nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows_json", sa.Text, nullable=False),
        sa.Column("source_offsets", sa.Text, nullable=True),
        sa.Column("epoch", sa.BigInteger, nullable=True),  # the driver lease epoch that committed it
        sa.PrimaryKeyConstraint("stream", "batch_id", name=f"{prefix}{LEDGER_TABLE}_pkey"[:63]),
    )


# --------------------------------------------------------------------------- statements
def insert_for(dialect: str) -> Callable[[sa.Table], Any]:
    """The dialect's ``insert`` (the one with ``on_conflict_do_*``)."""
    return sqlite.insert if dialect == "sqlite" else postgresql.insert


def upsert_statement(dialect: str, spec: TableSpec, table: sa.Table) -> Any:
    """The idempotent insert of ``spec``'s rows: do nothing ("ignore"), update the rest ("replace"), or
    update the rest when the new row's version is higher ("latest")."""
    stmt = with_conflict_rule(insert_for(dialect)(table), spec, table)
    if dialect == "postgresql":
        # SQLAlchemy 2.1 batches an executemany into multi-row VALUES ("insertmanyvalues")
        # for INSERT .. ON CONFLICT only when it has RETURNING (sqlalchemy#13130);
        # without it psycopg2 sends one statement per row, ~3x slower.
        stmt = stmt.returning(table.c[spec.key[0]])
    return stmt


def with_conflict_rule(stmt: Any, spec: TableSpec, table: sa.Table) -> Any:
    """A dialect insert into ``table`` (of values or a SELECT) with ``spec``'s rule for an existing key."""
    others = [c for c in spec.column_names if c not in spec.key]
    if spec.on_conflict == "ignore" or not others:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(spec.key))
    elif spec.on_conflict == "latest":
        version = spec.version or ""
        stmt = stmt.on_conflict_do_update(index_elements=list(spec.key),
                                          set_={c: stmt.excluded[c] for c in others},
                                          where=stmt.excluded[version] > table.c[version])
    else:
        stmt = stmt.on_conflict_do_update(index_elements=list(spec.key),
                                          set_={c: stmt.excluded[c] for c in others})
    return stmt


def compiled_sqlite(stmt: Any, engine: Engine, spec: TableSpec) -> tuple[str, tuple[str, ...]]:
    """SQLite: the statement's SQL text and the column order its positional parameters take."""
    compiled = stmt.compile(dialect=engine.dialect, column_keys=list(spec.column_names))
    return compiled.string, tuple(compiled.positiontup or ())


# --------------------------------------------------------------------------- engines
def make_engine(url: URL, stream: str) -> Engine:
    """An engine for ``url`` (``stream`` names PostgreSQL sessions); connections are opened lazily."""
    if url.get_backend_name() == "sqlite":
        return _make_sqlite_engine(url)
    return sa.create_engine(
        url,
        pool_pre_ping=True,
        insertmanyvalues_page_size=CHUNK_ROWS,
        connect_args={"connect_timeout": 10, "options": "-c timezone=UTC",
                      "application_name": f"rewind-sink:{stream}"[:63]},
    )


def _make_sqlite_engine(url: URL) -> Engine:
    db = url.database
    if db and db != ":memory:" and not db.startswith("file:"):
        try:
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SinkConnectionError(f"cannot create the directory of {url.render_as_string(hide_password=True)}: "
                                      f"{e}") from None
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

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


def coordinates_in(ranges: Mapping[Any, tuple[int, int]]) -> Callable[[sa.Table], Any]:
    """A ``where`` for ``Sink.read_rows``: rows whose Kafka coordinates (``topic``, ``partition``,
    ``offset``) lie in ``[start, end)`` of their partition; ``ranges`` is keyed by ``(topic, partition)``."""
    def where(t: sa.Table) -> Any:
        parts = [sa.and_(t.c.topic == topic, t.c.partition == part, t.c.offset >= lo, t.c.offset < hi)
                 for (topic, part), (lo, hi) in ranges.items() if hi > lo]
        return sa.or_(*parts) if parts else sa.false()
    return where
