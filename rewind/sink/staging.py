"""Executors write, the driver commits: a SQL sink's micro-batch in two phases, so the driver's memory
does not grow with the batch.

- **Prepare** (on the executors, ``stage``): each Spark task converts its share of the batch's rows
  and writes them into staging tables (``<prefix>rewind_stage_<table>``: the table's columns, all
  nullable, plus ``stage_attempt`` and ``stage_seq``), in its own transaction; PostgreSQL loads
  them through ``COPY``, SQLite through ``executemany``.
- **Commit** (on the driver, ``commit``): one transaction claims the batch's ledger row
  (``ExactlyOnceSqlSink.claim``: skipped, written, or re-planned as for ``write_batch``), checks
  that staging holds at least the rows the tasks reported, moves the attempt's rows into the
  tables with the table's conflict rule, and deletes them from staging. Either all of it or none.

Why an attempt id: a driver that dies after the tasks staged and before the commit leaves rows
of an attempt nobody commits; the next attempt of that batch has a new id, so they never reach a
table, and the next writer's ``clear`` deletes them. A retried task stages its rows twice: the
move keeps one row per key (``ROW_NUMBER`` over the key, ordered by ``stage_seq``: the position
in the batch, so "ignore" keeps the first row, "replace" the last, "latest" the highest version),
the same rule ``write_batch`` applies inside one input. A zombie driver whose staged rows were
cleared by its successor finds fewer rows than reported and rolls back (``SinkWriteError``).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc

from rewind.faults import fault_point
from rewind.sink.contract import BatchResult, Rows, check_batch_id
from rewind.sink.convert import PreparedTable, chunks, prepare_table
from rewind.sink.dialects import CHUNK_ROWS, insert_for, spec_table, with_conflict_rule
from rewind.sink.errors import SinkConnectionError, SinkRefused, SinkWriteError
from rewind.sink.sql import ExactlyOnceSqlSink

log = logging.getLogger(__name__)

__all__ = ["SqlStaging"]

STAGE_PREFIX = "rewind_stage_"


class SqlStaging:
    """The staging tables of one SQL sink, and the two phases (see the module docstring)."""

    def __init__(self, sink: ExactlyOnceSqlSink) -> None:
        self.sink = sink
        self.dialect = sink.dialect
        md = sa.MetaData()
        self._targets = {n: spec_table(s, md, sink.table_prefix) for n, s in sink.specs.items()}
        self._stages: dict[str, sa.Table] = {}
        for name, target in self._targets.items():
            physical = f"{sink.table_prefix}{STAGE_PREFIX}{name}"
            if len(physical) > 63:
                raise SinkRefused(f"staging table {physical!r} is longer than 63 characters: shorten the "
                                  "table_prefix or the table name")
            self._stages[name] = sa.Table(
                physical, md, *(sa.Column(c.name, c.type, nullable=True) for c in target.columns),
                sa.Column("stage_attempt", sa.String(64), nullable=False),
                sa.Column("stage_seq", sa.BigInteger, nullable=False),
                sa.Index(f"{physical}_attempt"[:63], "stage_attempt"))
        self._metadata = md

    # ------------------------------------------------------------------ both sides
    def _connect(self) -> sa.Connection:
        try:
            return self.sink.engine.connect()
        except exc.DBAPIError as e:
            raise SinkConnectionError(f"cannot connect to {self.sink.safe_url}: {e.orig}") from None

    def create(self) -> None:
        """The sink's tables and the staging tables, if missing."""
        self.sink.create_tables()
        with self._connect() as conn, conn.begin():
            self._metadata.create_all(conn, tables=list(self._stages.values()), checkfirst=True)

    def clear(self) -> int:
        """Delete every staged row (attempts that never committed); call when a writer starts."""
        n = 0
        with self._connect() as conn, conn.begin():
            for stage in self._stages.values():
                n += int(conn.execute(stage.delete()).rowcount or 0)
        if n:
            log.warning("sink %s: deleted %d staged rows of attempts that never committed", self.sink.stream, n)
        return n

    # ------------------------------------------------------------------ prepare (executors)
    def stage(self, name: str, rows: Rows, attempt: str, first_seq: int) -> tuple[int, int]:
        """Stage one chunk of table ``name``'s rows: (rows handed in, rows staged after the table's
        rule inside the chunk). Raises SinkRefused for bad rows, SinkWriteError if the database refuses."""
        if name not in self._stages:
            raise SinkRefused(f"unknown table {name!r}: this sink has {sorted(self._stages)}")
        prepared = prepare_table(self.sink.specs[name], rows, sqlite_text=self.dialect == "sqlite")
        staged = len(next(iter(prepared.columns.values()), []))
        if staged == 0:
            return prepared.submitted, 0
        try:
            with self._connect() as conn, conn.begin():
                if self.dialect == "postgresql":
                    self._copy(conn, name, prepared, attempt, first_seq)
                else:
                    self._insert(conn, name, prepared, attempt, first_seq)
        except exc.SQLAlchemyError as e:
            raise SinkWriteError(f"staging {staged} rows of table {name!r} (attempt {attempt}) in "
                                 f"{self.sink.safe_url}: {getattr(e, 'orig', e)}") from e
        return prepared.submitted, staged

    def _insert(self, conn: sa.Connection, name: str, prepared: PreparedTable, attempt: str, first_seq: int) -> None:
        stage = self._stages[name]
        cols = [*prepared.spec.column_names, "stage_attempt", "stage_seq"]
        sql = (f'INSERT INTO "{stage.name}" ({", ".join(f"{chr(34)}{c}{chr(34)}" for c in cols)}) '
               f"VALUES ({', '.join('?' * len(cols))})")
        rows = [(*r, attempt, first_seq + i) for i, r in enumerate(prepared.tuples(prepared.spec.column_names))]
        for chunk in chunks(rows, CHUNK_ROWS):
            conn.exec_driver_sql(sql, chunk)

    def _copy(self, conn: sa.Connection, name: str, prepared: PreparedTable, attempt: str, first_seq: int) -> None:
        stage = self._stages[name]
        kinds = [c.type for c in prepared.spec.columns]
        buf = io.StringIO()
        for i, values in enumerate(prepared.tuples(prepared.spec.column_names)):
            buf.write("\t".join(_copy_text(k, v) for k, v in zip(kinds, values)))
            buf.write(f"\t{_copy_text('string', attempt)}\t{first_seq + i}\n")
        buf.seek(0)
        cols = ", ".join(f'"{c}"' for c in [*prepared.spec.column_names, "stage_attempt", "stage_seq"])
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cursor.copy_expert(f'COPY "{stage.name}" ({cols}) FROM STDIN WITH (FORMAT text)', buf)

    # ------------------------------------------------------------------ commit (driver)
    def commit(self, batch_id: int, attempt: str, counts: Mapping[str, int], staged: Mapping[str, int],
               source_offsets: str | None = None) -> BatchResult:
        """Move the attempt's staged rows into the tables with the ledger row, in one transaction.
        ``counts``: rows handed in per table (the ledger's record); ``staged``: rows the tasks staged."""
        batch_id = check_batch_id(batch_id)
        started = time.perf_counter()
        fault_point("sink.before_write", batch=batch_id)
        try:
            with self._connect() as conn:
                with conn.begin():
                    skipped, replanned = self.sink.claim(conn, batch_id, counts, source_offsets)
                    if not skipped:
                        self._check_staged(conn, attempt, staged)
                        for name in self._stages:
                            conn.execute(self._move(name, attempt))
                    for stage in self._stages.values():
                        conn.execute(stage.delete().where(stage.c.stage_attempt == attempt))
                    if not skipped:
                        fault_point("sink.pre_committed", batch=batch_id)
        except exc.SQLAlchemyError as e:
            raise SinkWriteError(f"stream {self.sink.stream!r} batch {batch_id} (staged attempt {attempt}) rolled "
                                 f"back in {self.sink.safe_url}: {getattr(e, 'orig', e)}") from e
        if not skipped:
            fault_point("sink.committed", batch=batch_id)
        seconds = time.perf_counter() - started
        log.info("sink %s batch %s %s from staging in %.3fs: %s", self.sink.stream, batch_id,
                 "skipped (already committed)" if skipped else "re-planned, rewritten" if replanned else "committed",
                 seconds, dict(counts))
        return BatchResult(batch_id, skipped, {n: 0 for n in counts} if skipped else dict(counts), seconds,
                           replanned=replanned)

    def _check_staged(self, conn: sa.Connection, attempt: str, staged: Mapping[str, int]) -> None:
        for name, want in staged.items():
            stage = self._stages[name]
            have = conn.execute(sa.select(sa.func.count()).select_from(stage)
                                .where(stage.c.stage_attempt == attempt)).scalar() or 0
            if have < want:
                raise SinkWriteError(f"stream {self.sink.stream!r}: attempt {attempt} staged {want} rows of table "
                                     f"{name!r} but {have} are there: another writer of this stream cleared them "
                                     "(this driver is a zombie); nothing was committed")

    def _move(self, name: str, attempt: str) -> Any:
        """INSERT INTO table SELECT one row per key of the attempt's staged rows, with the table's rule."""
        spec, stage, target = self.sink.specs[name], self._stages[name], self._targets[name]
        cols = list(spec.column_names)
        order: Iterable[Any]
        if spec.on_conflict == "ignore":
            order = [stage.c.stage_seq.asc()]
        elif spec.on_conflict == "latest":
            order = [stage.c[spec.version or ""].desc(), stage.c.stage_seq.asc()]
        else:
            order = [stage.c.stage_seq.desc()]
        rn = sa.func.row_number().over(partition_by=[stage.c[k] for k in spec.key], order_by=list(order)).label("rn")
        inner = sa.select(*(stage.c[c] for c in cols), rn).where(stage.c.stage_attempt == attempt).subquery()
        pick = sa.select(*(inner.c[c] for c in cols)).where(inner.c.rn == 1)
        return with_conflict_rule(insert_for(self.dialect)(target).from_select(cols, pick), spec, target)


def _copy_text(kind: str, v: Any) -> str:
    """One value in PostgreSQL's COPY text format (NULL is \\N; backslash, tab, newline escaped)."""
    if v is None:
        return "\\N"
    if kind == "binary":
        return "\\\\x" + bytes(v).hex()
    if kind == "timestamp":
        return v.isoformat()
    if kind == "double":
        return repr(float(v)).replace("inf", "Infinity").replace("nan", "NaN")
    text = str(v)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
