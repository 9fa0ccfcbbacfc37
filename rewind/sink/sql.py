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
for replays, whose rows may overlap what the live stream already wrote. The
promises are ``rewind.sink.contract.Sink``'s; this module keeps them with SQL.

One SQLAlchemy Core code serves SQLite (the embedded default) and PostgreSQL
(``postgresql+psycopg2://``); what differs (WAL, BEGIN IMMEDIATE, RETURNING)
is in ``rewind.sink.dialects``. Rows are validated and converted to plain
Python values first (all or nothing, ``rewind.sink.convert``), then go in with
executemany in chunks of CHUNK_ROWS: on SQLite the compiled statement goes
straight to sqlite3's executemany (SQLAlchemy's per-row parameter processing
would double the time), on PostgreSQL SQLAlchemy batches the rows into
multi-row VALUES. Timestamps are stored in UTC.

Create a sink in the process that uses it (engines do not survive fork).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import URL, Connection, Engine, make_url

from rewind.api.tables import LEDGER_TABLE, TableSpec, check_resolved, check_table_name
from rewind.faults import fault_point
from rewind.sink.contract import BatchResult, Rows, Sink, check_batch_id
from rewind.sink.convert import PreparedTable, chunks, prepare_rows, typed_frame
from rewind.sink.dialects import (
    CHUNK_ROWS,
    compiled_sqlite,
    insert_for,
    ledger_table,
    make_engine,
    spec_table,
    upsert_statement,
)
from rewind.sink.errors import SinkConnectionError, SinkRefused, SinkWriteError
from rewind.sink.sql_fence import FENCE_TABLE, claim_epoch, fence_table
from rewind.sink.sql_read import column_max
from rewind.sink.sql_schema import ensure_tables
from rewind.sink.sqlite_lock import waiting_for_the_lock

log = logging.getLogger(__name__)

__all__ = ["ExactlyOnceSqlSink"]


class ExactlyOnceSqlSink(Sink):
    """Exactly-once writes of micro-batches into SQL tables (see the module docstring and ``Sink``).

    Tables are created on first use (or by ``create_tables``); with a
    `table_prefix` every table, the ledger included, is ``<prefix><name>``, so a
    replay's shadow tables never mix with the live ones.
    """

    def __init__(self, url: str, stream: str, tables: Sequence[TableSpec], table_prefix: str = "") -> None:
        if not isinstance(stream, str) or not stream or len(stream) > 255:
            raise SinkRefused(f"stream must be a non-empty string of at most 255 characters, not {stream!r}")
        if table_prefix:
            check_table_name(table_prefix, "table prefix")
        specs = list(tables)
        if not specs:
            raise SinkRefused("at least one TableSpec is needed")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise SinkRefused(f"duplicate table names in {names}")
        check_resolved(specs)
        for name in [*names, LEDGER_TABLE, FENCE_TABLE]:
            check_table_name(table_prefix + name, f"table name (prefix {table_prefix!r} + {name!r})")

        try:
            self._url: URL = make_url(url)
        except exc.ArgumentError:
            raise SinkRefused("invalid database URL (expected e.g. sqlite:///path/sink.db or "
                              "postgresql+psycopg2://user:pass@host:5432/db)") from None
        self.dialect = self._url.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise SinkRefused(f"unsupported database {self.safe_url}: only sqlite and postgresql are supported")

        self.stream = stream
        self.table_prefix = table_prefix
        self.specs: dict[str, TableSpec] = {s.name: s for s in specs}
        self._metadata = sa.MetaData()
        self._tables: dict[str, sa.Table] = {s.name: spec_table(s, self._metadata, table_prefix) for s in specs}
        self._ledger = ledger_table(self._metadata, table_prefix)
        self._fence = fence_table(self._metadata, table_prefix)
        self._engine = make_engine(self._url, stream)
        self._upserts = {name: upsert_statement(self.dialect, spec, self._tables[name])
                         for name, spec in self.specs.items()}
        self._sqlite_sql: dict[str, tuple[str, tuple[str, ...]]] = {}
        if self.dialect == "sqlite":
            self._sqlite_sql = {name: compiled_sqlite(stmt, self._engine, self.specs[name])
                                for name, stmt in self._upserts.items()}
        self._ledger_insert = insert_for(self.dialect)(self._ledger).on_conflict_do_nothing(
            index_elements=["stream", "batch_id"])
        self._tables_ready = False

    # ------------------------------------------------------------------ the contract
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
        """``Sink.create_tables`` (``rewind.sink.sql_schema``): an existing table must already have every
        spec column; otherwise a SinkRefused says which are missing instead of failing later mid-batch."""
        ensure_tables(self._connect, self._read, self._metadata, [*self._tables.values(), self._ledger],
                      where=self.safe_url, stream=self.stream)
        self._tables_ready = True

    def write_batch(self, batch_id: int, rows: Mapping[str, Rows], source_offsets: str | None = None) -> BatchResult:
        """``Sink.write_batch`` in one transaction: the ledger row first (ON CONFLICT DO NOTHING),
        then, unless it was there with the same offsets, every table. A skipped re-run whose row
        counts differ from the committed ones is logged: the transform is not deterministic."""
        batch_id = check_batch_id(batch_id)
        started = time.perf_counter()
        prepared = self._prepare(rows)
        counts = {name: p.submitted for name, p in prepared.items()}
        self._ensure_tables()
        zero = {name: 0 for name in prepared}
        fault_point("sink.before_write", batch=batch_id)
        with self._connect() as conn:
            try:
                with conn.begin():
                    skipped, replanned = self.claim(conn, batch_id, counts, source_offsets)
                    if not skipped:
                        self._write_tables(conn, prepared)
                        fault_point("sink.pre_committed", batch=batch_id)
            except exc.SQLAlchemyError as e:
                raise self._write_error(e, f"stream {self.stream!r} batch {batch_id}") from e
            if skipped:
                self._warn_if_different(conn, batch_id, counts)
            else:
                fault_point("sink.committed", batch=batch_id)
        seconds = time.perf_counter() - started
        log.info("sink %s batch %s %s in %.3fs: %s", self.stream, batch_id,
                 "skipped (already committed)" if skipped else "re-planned, rewritten" if replanned else "committed",
                 seconds, counts)
        return BatchResult(batch_id=batch_id, skipped=skipped, rows=zero if skipped else counts, seconds=seconds,
                           replanned=replanned)

    def claim(self, conn: Connection, batch_id: int, counts: Mapping[str, int],
              source_offsets: str | None) -> tuple[bool, bool]:
        """Inside the batch's transaction: the fence (``SinkFenced`` for a driver taken over), then its
        ledger row (ON CONFLICT DO NOTHING); (skipped, replanned): committed before with the same
        offsets, or with other ones (the row then records the new offsets and the batch is rewritten)."""
        if self.epoch is not None:
            claim_epoch(conn, self.dialect, self._fence, self.stream, self.epoch, self._now(), f"batch {batch_id}")
        ledger_row = {"stream": self.stream, "batch_id": batch_id, "committed_at": self._now(),
                      "rows_json": json.dumps(dict(counts), sort_keys=True), "source_offsets": source_offsets,
                      "epoch": self.epoch}
        if conn.execute(self._ledger_insert, ledger_row).rowcount:
            return False, False
        before = conn.execute(sa.select(self._ledger.c.source_offsets).where(
            self._ledger.c.stream == self.stream, self._ledger.c.batch_id == batch_id)).scalar()
        if source_offsets is None or before is None or before == source_offsets:
            return True, False
        log.warning("stream %s batch %s was committed with source offsets %s and is now planned with %s (the query "
                    "was rolled back by a repair or restore): writing its rows idempotently", self.stream, batch_id,
                    before, source_offsets)
        conn.execute(self._ledger.update().where(
            self._ledger.c.stream == self.stream, self._ledger.c.batch_id == batch_id).values(
            committed_at=ledger_row["committed_at"], rows_json=ledger_row["rows_json"], source_offsets=source_offsets,
            epoch=self.epoch))
        return False, True

    def fence(self, epoch: int) -> None:
        """``Sink.fence``: the stream's fence row raised to ``epoch`` now (``rewind.sink.sql_fence``)."""
        self.epoch = epoch
        self._ensure_tables()

        def claim() -> None:
            with self._connect() as conn, conn.begin():
                claim_epoch(conn, self.dialect, self._fence, self.stream, epoch, self._now(), "the fence")
        if self.dialect == "sqlite":  # a paused zombie may hold SQLite's only write lock: wait, then name it
            return waiting_for_the_lock(claim, str(self._url.database), f"stream {self.stream!r}: the fence")
        claim()

    def write_rows(self, rows: Mapping[str, Rows], *, replay_id: str | None = None,
                   inserted: dict[str, int] | None = None) -> dict[str, int]:
        """``Sink.write_rows``: the tables' upserts in one transaction, no ledger row."""
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
        """``Sink.read_table``: one SELECT ordered by key (the ledger: by stream, batch id)."""
        if name == LEDGER_TABLE:
            table, types = self._ledger, {"batch_id": "bigint", "committed_at": "timestamp"}
            order = [table.c.stream, table.c.batch_id]
        else:
            table = self._table(name)
            spec = self.specs[name]
            types = {c.name: c.type for c in spec.columns}
            order = [table.c[k] for k in spec.key]
        return self._frame(table, types, sa.select(table).order_by(*order))

    def ledger_after(self, batch_id: int) -> pd.DataFrame:
        """``Sink.ledger_after``: one SELECT on the ledger's key (stream, batch id)."""
        t = self._ledger
        return self._frame(t, {"batch_id": "bigint", "committed_at": "timestamp"}, sa.select(t).where(
            t.c.stream == self.stream, t.c.batch_id > batch_id).order_by(t.c.batch_id))

    def read_rows(self, name: str, where: Callable[[sa.Table], Any] | None = None,
                  columns: Sequence[str] | None = None) -> pd.DataFrame:
        """``Sink.read_rows``: ``where`` gets the physical SQLAlchemy table and returns a condition
        on it, e.g. ``lambda t: t.c.key.in_(keys)``."""
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
        timestamps come back as UTC pandas Timestamps, decimals as ``decimal.Decimal``."""
        table = self._table(name)
        if not self._exists(table.name):
            return None
        kind = self.specs[name].columns[self.specs[name].column_names.index(column)].type
        with self._read() as conn:
            return column_max(conn, self.dialect, table.c[column], kind)

    def dispose(self) -> None:
        """Close pooled connections (call before the process exits or forks)."""
        self._engine.dispose()

    def __repr__(self) -> str:
        return (f"ExactlyOnceSqlSink({self.safe_url}, stream={self.stream!r}, tables={list(self.specs)}, "
                f"prefix={self.table_prefix!r})")

    # ------------------------------------------------------------------ connections
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
        now = dt.datetime.now(dt.UTC)
        return now.replace(tzinfo=None) if self.dialect == "sqlite" else now

    def _table(self, name: str) -> sa.Table:
        try:
            return self._tables[name]
        except KeyError:
            raise SinkRefused(f"unknown table {name!r}: this sink has {sorted(self.specs)}") from None

    def _frame(self, table: sa.Table, types: Mapping[str, str], stmt: Any,
               names: Sequence[str] | None = None) -> pd.DataFrame:
        records: list[Any] = []
        if self._exists(table.name):
            with self._read() as conn:
                records = [tuple(r) for r in conn.execute(stmt)]
        return typed_frame(records, names or [c.name for c in table.columns], types)

    # ------------------------------------------------------------------ writing
    def _prepare(self, rows: Mapping[str, Rows]) -> dict[str, PreparedTable]:
        """Validate and convert every table's rows before the transaction starts (all or nothing)."""
        return prepare_rows(self.specs, rows, sqlite_text=self.dialect == "sqlite")

    def _write_tables(self, conn: Connection, prepared: Mapping[str, PreparedTable],
                      written: dict[str, int] | None = None) -> None:
        for name, p in prepared.items():
            if self.dialect == "sqlite":
                rows: list[Any] = p.tuples(self._sqlite_sql[name][1])
            else:
                rows = p.records()
            for chunk in chunks(rows, CHUNK_ROWS):
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
