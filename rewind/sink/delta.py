"""The Delta Lake sink: one Delta table per sink table, every batch merged under the stream's app id.

- **Writes** (``write_batch``, ``write_rows``) go through delta-rs (``deltalake``): no Spark session
  is needed, so the driver path, replays and tests write the same way. The streaming path with
  ``write_from: executors`` (``rewind.driver.delta_writer``) has Spark's executors write the files
  and the driver commit them through delta-spark, with the same MERGE clauses
  (``rewind.sink.delta_tables``) and this class's ledger.
- **Exactly once per batch identity**: every table's commit of batch N carries the Delta app
  transaction ``(rewind.<stream>, N)`` (Delta's ``txnAppId``/``txnVersion``), and the ledger row is
  merged last. A re-run batch the ledger holds with the same offsets is skipped; a batch cut short
  by a crash (some tables merged, no ledger row) is merged again, which the conflict rules make
  idempotent; a re-planned batch is merged again and its ledger row replaced.
- **What a Delta sink does not give**: one commit across tables. Each table's MERGE is atomic, and a
  reader may see a batch's events before its windows; the ledger row says when the batch is whole.
- **Reading back** (proofs, replays): each table is loaded into a temporary SQLite copy
  (``ExactlyOnceSqlSink``), reloaded when the table's Delta version moves, so ``read_rows``
  takes the same SQLAlchemy conditions as every other sink and gives the same dtypes:
  ``decimal(P,S)`` (Delta ``decimal128(P,S)``) back as ``decimal.Decimal`` at the scale (the copy
  keeps it as exact text), times (``timestamp[us]``) at microseconds.
"""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa
import sqlalchemy as sa

from rewind.api.tables import LEDGER_TABLE, TableSpec
from rewind.faults import fault_point
from rewind.sink.contract import BatchResult, Rows, Sink, check_batch_id, check_sink_tables
from rewind.sink.convert import dedupe_index, prepare_rows, typed_frame
from rewind.sink.delta_tables import (
    LEDGER_SCHEMA,
    arrow_schema,
    arrow_table,
    ledger_entries,
    ledger_table,
    merge_clauses,
)
from rewind.sink.delta_target import DeltaSinkTarget
from rewind.sink.errors import SinkFenced, SinkRefused, SinkWriteError
from rewind.sink.kafka_ledger import LedgerEntry, ledger_frame
from rewind.sink.sql import ExactlyOnceSqlSink

log = logging.getLogger(__name__)

__all__ = ["DeltaSink"]

COMMIT_RETRIES = 5  # concurrent writers of one table (the stream and a replay) conflict now and then


def table_rows(table: Any) -> list[dict[str, Any]]:
    """Every row of a delta-rs ``DeltaTable`` as dicts, read by delta-rs's own engine (DataFusion).

    Why not ``to_pyarrow_table()``: it scans with pyarrow's dataset scanner, whose C++ threads may
    still be winding down when the interpreter exits; about one process in twenty then died of
    SIGABRT ("terminate called without an active exception", apache/arrow#39862) after its batch had
    committed. delta-rs's engine runs on Rust threads, which exit cleanly (measured: a process reading
    five small tables and exiting, 60 runs each: 3 and 2 aborts with the scanner, threads on and off,
    0 with this). Its strings come as ``string_view``; as Python values they are the same."""
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("t", table).execute('SELECT * FROM "t"')).to_pylist()


class DeltaSink(Sink):
    """Exactly-once writes of micro-batches into Delta tables (see the module docstring and ``Sink``)."""

    def __init__(self, target: DeltaSinkTarget, stream: str, tables: Sequence[TableSpec],
                 table_prefix: str = "") -> None:
        specs = check_sink_tables(stream, tables, table_prefix)
        self.target = target
        self.stream = stream
        self.table_prefix = table_prefix
        self.specs: dict[str, TableSpec] = specs
        self._mirror: Any = None
        self._mirror_dir: tempfile.TemporaryDirectory[str] | None = None
        self._mirrored: dict[str, int] = {}  # table -> Delta version in the copy

    @property
    def app_id(self) -> str:
        """Delta's ``txnAppId`` of this stream's batches (its ``txnVersion`` is the batch id)."""
        return f"rewind.{self.stream}"

    @property
    def epoch_app_id(self) -> str:
        """The app transaction on the ledger table whose version is the newest driver lease epoch."""
        return f"rewind.{self.stream}.epoch"

    def fence(self, epoch: int) -> None:
        """``Sink.fence``: an empty commit of the ledger table carrying the app transaction
        (``epoch_app_id``, ``epoch``). A ledger commit carries it too, and is refused when the table
        holds a newer one; delta-rs fails a commit whose app transaction a concurrent commit also
        set ("Concurrent transaction failed"), so the check and the commit cannot be interleaved. Each
        table's commit of a batch carries and checks it too (and the ledger's, where the fence is)."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError

        self.epoch = epoch
        for _ in range(COMMIT_RETRIES):
            table = self._open(LEDGER_TABLE, LEDGER_SCHEMA)
            self._check_epoch(table, "the fence")
            try:
                table.create_write_transaction(actions=[], mode="append", schema=table.schema(), partition_by=[],
                                               commit_properties=CommitProperties(
                                                   app_transactions=[Transaction(self.epoch_app_id, epoch)]))
                return
            except CommitFailedError:
                continue
        raise SinkWriteError(f"Delta table {self.path(LEDGER_TABLE)}: the fence at epoch {epoch} failed "
                             f"{COMMIT_RETRIES} times against concurrent writers")

    def _check_epoch(self, table: Any, what: str) -> None:

        newest = table.transaction_version(self.epoch_app_id)
        if self.epoch is not None and newest is not None and newest > self.epoch:
            raise SinkFenced(f"stream {self.stream!r}: {what} refused: it is written under driver lease epoch "
                             f"{self.epoch}, and epoch {newest} has taken the stream over (this driver is fenced); "
                             "the ledger row was not written", newer=int(newest))

    def table_name(self, name: str) -> str:
        if name != LEDGER_TABLE and name not in self.specs:
            raise SinkRefused(f"unknown table {name!r}: this sink has {sorted(self.specs)}")
        return f"{self.table_prefix}{name}"

    def path(self, name: str) -> str:
        return self.target.table_path(self.table_name(name))

    # ------------------------------------------------------------------ tables
    def create_tables(self) -> None:
        for name, spec in self.specs.items():
            self._open(name, arrow_schema(spec))
        self._open(LEDGER_TABLE, LEDGER_SCHEMA)

    def ensure_table(self, name: str) -> Any:
        """Table ``name`` as a delta-rs ``DeltaTable``, created if missing."""
        return self._open(name, arrow_schema(self.specs[name]))

    def tags(self, table: Any, batch_id: int | None) -> bool:
        """Whether a commit of ``batch_id`` to ``table`` carries the app transaction (rewind.<stream>, batch id).
        A version at or below the one recorded is a re-run or a re-plan: merged again, untagged
        (Delta keeps the highest version per app id)."""
        recorded = table.transaction_version(self.app_id)
        return batch_id is not None and (recorded is None or recorded < batch_id)

    def _open(self, name: str, schema: pa.Schema) -> Any:
        """The Delta table, created if missing (a concurrent creator's table is taken as is)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        path = self.path(name)
        if not DeltaTable.is_deltatable(path):
            try:
                DeltaTable.create(path, schema=schema, mode="ignore", name=self.table_name(name),
                                  configuration=self.target.properties or None)
            except DeltaError as exc:
                if not DeltaTable.is_deltatable(path):
                    raise SinkWriteError(f"cannot create Delta table {path}: {exc}") from exc
        table = DeltaTable(path)
        table, failed = self._add_missing_nullable_columns(table, schema, path)
        have = {f.name for f in table.schema().fields}
        missing = [f.name for f in schema if f.name not in have]
        if missing:
            why = f" (adding the nullable one(s) failed: {failed})" if failed else ""
            raise SinkRefused(f"Delta table {path} has no column(s) {missing}{why}: add them (ALTER TABLE ... ADD "
                              "COLUMNS) or point the sink at another directory")
        return table

    def _add_missing_nullable_columns(self, table: Any, schema: pa.Schema, path: str) -> tuple[Any, str | None]:
        """A table created by an earlier version gets the nullable columns its spec added since, as the SQL
        sinks do (``rewind.sink.sql_schema``): an upgrade that adds a nullable column is compatible
        (``rewind.upgrade.rules``), and its new driver must be able to open the live tables; old rows read
        NULL. A missing NOT NULL column stays a refusal (the caller's). A concurrent adder's column is taken
        as is. Returns the table re-read and why adding failed, if it did (the caller's refusal says it)."""
        from deltalake import DeltaTable, Field

        have = {f.name for f in table.schema().fields}
        add = [f for f in schema if f.name not in have and f.nullable]
        if not add:
            return table, None
        failed = None
        try:
            table.alter.add_columns([Field.from_arrow(f) for f in add])
            log.info("sink %s: added column(s) %s to Delta table %s", self.stream, [f.name for f in add], path)
        except Exception as exc:  # noqa: BLE001 - delta-rs raises DeltaError, or Exception ("External error: ...")
            failed = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("sink %s: adding column(s) %s to Delta table %s failed (%s); re-reading it", self.stream,
                        [f.name for f in add], path, failed)
        return DeltaTable(path), failed

    # ------------------------------------------------------------------ writing
    def committed(self) -> dict[int, LedgerEntry]:
        """This stream's ledger rows by batch id."""
        return {e.batch_id: e for e in self._ledger_rows() if e.stream == self.stream}

    def write_batch(self, batch_id: int, rows: Mapping[str, Rows], source_offsets: str | None = None) -> BatchResult:
        batch_id = check_batch_id(batch_id)
        prepared = prepare_rows(self.specs, rows, sqlite_text=False)
        t0 = time.perf_counter()
        prior = self.committed().get(batch_id)
        if prior is not None and (prior.source_offsets is None or source_offsets is None
                                  or prior.source_offsets == source_offsets):
            return BatchResult(batch_id, True, {n: 0 for n in prepared}, time.perf_counter() - t0)
        fault_point("sink.before_write", batch=batch_id)
        for name, table in prepared.items():
            self.merge(name, arrow_table(table), batch_id)
        counts = {n: p.submitted for n, p in prepared.items()}
        self.commit_ledger(batch_id, counts, source_offsets)
        return BatchResult(batch_id, False, counts, time.perf_counter() - t0, replanned=prior is not None)

    def commit_ledger(self, batch_id: int, counts: Mapping[str, int], source_offsets: str | None) -> None:
        """The batch's ledger row, merged after its tables: from here on the batch is committed."""
        fault_point("sink.pre_committed", batch=batch_id)
        entry = LedgerEntry(self.stream, batch_id, dt.datetime.now(dt.UTC), dict(counts), source_offsets)
        self._merge_into(LEDGER_TABLE, None, LEDGER_SCHEMA, ledger_table([entry]), batch_id)
        fault_point("sink.committed", batch=batch_id)

    def write_rows(self, rows: Mapping[str, Rows], *, replay_id: str | None = None,
                   inserted: dict[str, int] | None = None) -> dict[str, int]:
        prepared = prepare_rows(self.specs, rows, sqlite_text=False)
        for name, table in prepared.items():
            metrics = self.merge(name, arrow_table(table), None)
            if inserted is not None and table.spec.on_conflict == "ignore":
                inserted[name] = int(metrics.get("num_target_rows_inserted", 0))
        return {n: p.submitted for n, p in prepared.items()}

    def merge(self, name: str, data: pa.Table, batch_id: int | None) -> dict[str, Any]:
        """Merge rows into one table under its conflict rule (``batch_id``: tag the commit with the
        stream's app transaction)."""
        spec = self.specs[name]
        return self._merge_into(name, spec, arrow_schema(spec), data, batch_id)

    def _merge_into(self, name: str, spec: TableSpec | None, schema: pa.Schema, data: pa.Table,
                    batch_id: int | None) -> dict[str, Any]:
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError, DeltaError

        if data.num_rows == 0:
            self._open(name, schema)
            return {}
        on, update_if, update = merge_clauses(spec)
        for attempt in range(1, COMMIT_RETRIES + 1):
            table = self._open(name, schema)
            txns = [Transaction(self.app_id, batch_id)] if batch_id is not None and self.tags(table, batch_id) else []
            if batch_id is not None and self.epoch is not None:  # a batch's commit: fenced by the epoch
                if name != LEDGER_TABLE:
                    self._check_epoch(self._open(LEDGER_TABLE, LEDGER_SCHEMA), f"batch {batch_id}")
                self._check_epoch(table, f"batch {batch_id}")
                txns.append(Transaction(self.epoch_app_id, self.epoch))
            props = CommitProperties(app_transactions=txns) if txns else None
            merger = table.merge(data, predicate=on, source_alias="s", target_alias="t", commit_properties=props)
            if update:
                merger = merger.when_matched_update_all(predicate=update_if)
            try:
                return dict(merger.when_not_matched_insert_all().execute())
            except CommitFailedError as exc:
                if attempt == COMMIT_RETRIES:
                    raise SinkWriteError(f"Delta table {self.path(name)}: commit failed {attempt} times "
                                         f"against concurrent writers: {exc}") from exc
                log.info("Delta table %s: concurrent commit (%s), merging again", self.path(name), exc)
            except DeltaError as exc:
                raise SinkWriteError(f"Delta table {self.path(name)}: merge failed: {exc}") from exc
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ reading back
    def _ledger_rows(self) -> list[LedgerEntry]:
        from deltalake import DeltaTable

        path = self.path(LEDGER_TABLE)
        if not DeltaTable.is_deltatable(path):
            return []
        return ledger_entries(table_rows(DeltaTable(path)))

    def committed_batch_ids(self) -> list[int]:
        return sorted(self.committed())

    def last_committed_batch(self) -> int | None:
        ids = self.committed_batch_ids()
        return ids[-1] if ids else None

    def read_table(self, name: str) -> pd.DataFrame:
        if name == LEDGER_TABLE:
            return ledger_frame({(e.stream, e.batch_id): e for e in self._ledger_rows()})
        return self._copy_of(name).read_table(name)

    def read_rows(self, name: str, where: Callable[[Any], Any] | None = None,
                  columns: Sequence[str] | None = None) -> pd.DataFrame:
        return self._copy_of(name).read_rows(name, where, columns)

    def column_max(self, name: str, column: str) -> Any:
        return self._copy_of(name).column_max(name, column)

    def duplicate_rows(self, name: str) -> pd.DataFrame:
        """``Sink.duplicate_rows``: a Delta table has no primary key, and ``read_table`` reads it through a
        SQLite copy that keeps one row per key by the table's rule; these are the other rows of a key the
        table holds more than once (a second writer's append, a copied row), typed like ``read_table``'s."""
        from deltalake import DeltaTable

        self.table_name(name)
        path = self.path(name)
        if not DeltaTable.is_deltatable(path):
            return pd.DataFrame()
        spec = self.specs[name]
        rows = table_rows(DeltaTable(path))
        keep = dedupe_index(spec, [[r[k] for r in rows] for k in spec.key], len(rows),
                            [r[spec.version] for r in rows] if spec.version else None)
        if keep is None:
            return pd.DataFrame()
        kept = set(keep)
        names = list(spec.column_names)
        return typed_frame([tuple(r.get(c) for c in names) for i, r in enumerate(rows) if i not in kept], names,
                           {c.name: c.type for c in spec.columns})

    def _copy_of(self, name: str) -> Any:
        """The SQLite copy with table ``name`` at the Delta table's current version."""
        from deltalake import DeltaTable


        self.table_name(name)
        if self._mirror is None:
            self._mirror_dir = tempfile.TemporaryDirectory(prefix="rewind-delta-copy-")
            self._mirror = ExactlyOnceSqlSink(f"sqlite:///{self._mirror_dir.name}/copy.db", "copy",
                                              list(self.specs.values()))
            self._mirror.create_tables()
        path = self.path(name)
        if not DeltaTable.is_deltatable(path):
            return self._mirror
        table = DeltaTable(path)
        if self._mirrored.get(name) != table.version():
            rows = table_rows(table)
            with self._mirror.engine.begin() as conn:
                conn.execute(sa.text(f'DELETE FROM "{self._mirror.table_name(name)}"'))
            self._mirror.write_rows({name: rows})
            self._mirrored[name] = table.version()
        return self._mirror

    def dispose(self) -> None:
        if self._mirror is not None:
            self._mirror.dispose()
            self._mirror = None
        if self._mirror_dir is not None:
            self._mirror_dir.cleanup()
            self._mirror_dir = None
        self._mirrored.clear()
