"""The sink contract: what every Rewind sink promises, so the runner, replays and proofs work with any.

Why an abstract class: the stream runner, the replay job, ``verify`` and the DQ proof use a sink
through these methods only. A new sink is a subclass that keeps the promises written in the
docstrings below; ``tests/test_sink.py`` proves them for ``rewind.sink.sql.ExactlyOnceSqlSink``
(SQLite and PostgreSQL), ``tests/test_kafka_sink.py`` for ``rewind.sink.kafka.TransactionalKafkaSink``.

Words used below:

- A *table* is a ``rewind.api.tables.TableSpec``: columns, a key, and ``on_conflict``.
- *Idempotent* is decided per table by its key and ``on_conflict``: writing a row whose key is
  already there changes nothing for ``"ignore"`` (first writer wins: raw events and dead letters,
  where the original record is the truth) and replaces that row for ``"replace"`` (last writer
  wins: window results, where a later, more complete aggregate wins). So writing the same rows
  twice leaves the same tables. The rule holds inside one call too: a key repeated in the input
  keeps its first (``"ignore"``) or its last (``"replace"``) row.
- A *batch identity* is ``(stream, batch_id, source_offsets)``: the micro-batch id and the end
  offsets Spark planned for it. The *ledger* records the identity of every committed batch.
- *Rows* for a table are a pandas DataFrame or a list of dicts, column name -> value; a column
  left out is null (refused for key and non-nullable columns); timestamps are stored in UTC
  (naive ones are taken as UTC).

Errors (``rewind.sink.errors``): bad input (an unknown table or column, a missing key value, a
value its column's type cannot take, a bad batch id or URL) raises ``SinkRefused`` before anything
is written; storage that cannot be reached raises ``SinkConnectionError``; a write the storage
rejects raises ``SinkWriteError`` after a full rollback: nothing of the call is kept.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeAlias

import numpy as np
import pandas as pd

from rewind.api.tables import LEDGER_TABLE, TableSpec, check_resolved, check_table_name
from rewind.sink.errors import SinkRefused

__all__ = ["BatchResult", "Rows", "Sink", "check_batch_id", "check_sink_tables"]

Rows: TypeAlias = pd.DataFrame | Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class BatchResult:
    """Outcome of write_batch. `rows` counts the rows handed in per table (0s when skipped)."""

    batch_id: int
    skipped: bool
    rows: dict[str, int]
    seconds: float
    replanned: bool = False  # the id was committed before with other source offsets: rewritten idempotently


def check_batch_id(batch_id: Any) -> int:
    """``batch_id`` as an int, or SinkRefused: Spark's batch ids are non-negative integers."""
    if isinstance(batch_id, bool) or not isinstance(batch_id, (int, np.integer)) or batch_id < 0:
        raise SinkRefused(f"batch_id must be a non-negative integer, not {batch_id!r}")
    return int(batch_id)


def check_sink_tables(stream: Any, tables: Sequence[TableSpec], table_prefix: str) -> dict[str, TableSpec]:
    """The tables of a sink by name, or SinkRefused for a bad stream name, prefix or table list (the
    Kafka and Delta sinks' constructors)."""
    if not isinstance(stream, str) or not stream or len(stream) > 200:
        raise SinkRefused(f"stream must be a non-empty string of at most 200 characters, not {stream!r}")
    if table_prefix:
        check_table_name(table_prefix, "table prefix")
    specs = list(tables)
    if not specs or len({s.name for s in specs}) != len(specs):
        raise SinkRefused(f"one TableSpec per table is needed, got {[s.name for s in specs]}")
    check_resolved(specs)
    return {s.name: s for s in specs}


class Sink(abc.ABC):
    """A stream's output tables, written exactly once per batch identity (see the module docstring).

    | attribute | what |
    |---|---|
    | ``stream`` | the stream's name: with the batch id, the key of the ledger |
    | ``specs`` | spec table name -> ``TableSpec``: the tables this sink writes, in order |
    | ``table_prefix`` | put before every physical table name, the ledger's too: keeps a replay's shadow tables apart |

    Create a sink in the process that uses it (connections do not survive fork) and release it
    with ``dispose()`` or a ``with`` block.
    """

    stream: str
    specs: dict[str, TableSpec]
    table_prefix: str
    #: The driver lease epoch batches are written under (``fence``); None: unfenced (replays, tools).
    epoch: int | None = None

    def fence(self, epoch: int) -> None:
        """Write batches under lease ``epoch`` from now on, and make every later batch commit of an
        older epoch fail (``SinkFenced``), checked in the same transaction as its ledger row.

        Called by a driver that took the stream's lease (``rewind.control.lease``), before its first
        batch, so a driver it took over from (paused, then resumed: a zombie) commits nothing more.
        The default only remembers the epoch; every Rewind sink overrides it: SQL with a fence row
        raised in the batch's transaction, Kafka through its transactional id, Delta with an app
        transaction on the ledger table."""
        self.epoch = epoch

    @abc.abstractmethod
    def create_tables(self) -> None:
        """Create the spec tables and the ledger if missing: idempotent, safe from several processes at once.

        Writes create them on first use too; the runner calls this at start so that a table that
        exists without a spec column is refused (SinkRefused naming the columns) before the first
        batch, not in the middle of one.
        """

    @abc.abstractmethod
    def write_batch(self, batch_id: int, rows: Mapping[str, Rows], source_offsets: str | None = None) -> BatchResult:
        """Write one micro-batch exactly once: every table's rows and its ledger entry, atomically.

        ``rows`` maps spec table names to rows (a table left out is not written);
        ``source_offsets`` is the batch's end offsets as recorded in Spark's offset log
        (None = unknown, taken as the same as any). Exactly once per batch identity:

        - not in the ledger: the rows and the ledger entry are written together or not at all,
          so a crash mid-write leaves nothing and the re-run writes the batch in full;
        - committed before with the same offsets (or either unknown): nothing changes,
          ``skipped=True``. Spark re-runs the last uncommitted batch after a crash (its commit
          log lags the sink), and a concurrent writer of the same batch must not write it twice;
        - committed before with *other* offsets: the batch was re-planned after a checkpoint
          repair or a savepoint restore rolled the query back. Skipping it would lose the records
          the new plan holds and the old one did not, so its rows are written again (the table
          writes are idempotent) and the ledger entry records the new offsets (``replanned=True``).

        Raises SinkRefused for bad input before anything is written, SinkWriteError after a full
        rollback.
        """

    @abc.abstractmethod
    def write_rows(self, rows: Mapping[str, Rows], *, replay_id: str | None = None,
                   inserted: dict[str, int] | None = None) -> dict[str, int]:
        """Idempotent write outside the ledger (the replay path): same conflict rules, all or nothing.

        Why no ledger: a replay's rows may overlap what the live stream already wrote, and they
        belong to no micro-batch. Writing the same rows twice leaves the same tables. Returns the
        rows handed in per table. ``replay_id`` only labels logs and errors. Given a dict as
        ``inserted``, it receives per "ignore" table the rows that were new (the rest were already
        there: a replay reports them as skipped). Raises as ``write_batch`` does.
        """

    @abc.abstractmethod
    def read_table(self, name: str) -> pd.DataFrame:
        """A whole table ordered by key, with the same dtypes from every sink.

        Columns: Int64 for ints, float64 for doubles, datetime64[ns, UTC] for timestamps, object
        (str/bytes/None) otherwise. ``name`` is the spec name (without prefix) or
        ``LEDGER_TABLE`` for the ledger (all streams). A table not yet created reads as empty; an
        unknown name raises SinkRefused.
        """

    @abc.abstractmethod
    def read_rows(self, name: str, where: Callable[[Any], Any] | None = None,
                  columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Rows of spec table ``name`` matching ``where(table)``, only ``columns`` if given, with
        ``read_table``'s dtypes.

        ``where`` takes the sink's handle on the physical table and returns a condition in the
        sink's own terms (SQL sinks: a SQLAlchemy Table and condition, e.g.
        ``lambda t: t.c.key.in_(keys)``); timestamps in conditions must be UTC. Why: a replay
        reads back only the rows its range touches (the events of a few windows, the coordinates
        of its range), not whole tables.
        """

    def duplicate_rows(self, name: str) -> pd.DataFrame:
        """The rows of spec table ``name`` that repeat a key already held, as a reader of the storage sees
        them (``read_table`` keeps one row per key). Why: a proof must count every committed copy. A
        SQL table's primary key allows none (the default: empty); a Kafka topic can hold a record twice
        (a re-send), so the Kafka sink returns the later copies of keys of its ``ignore`` tables."""
        return pd.DataFrame()

    @abc.abstractmethod
    def column_max(self, name: str, column: str) -> Any:
        """The largest value of one column of spec table ``name`` (None: empty or not created);
        timestamps come back as UTC pandas Timestamps. Why: a replay that finds no watermark takes
        the latest event time, less the watermark delay, as the horizon of closed windows."""

    @abc.abstractmethod
    def last_committed_batch(self) -> int | None:
        """The highest committed batch id of this stream, or None if none is committed."""

    @abc.abstractmethod
    def committed_batch_ids(self) -> list[int]:
        """Batch ids of this stream in the ledger, ascending ([] before the first commit)."""

    def ledger_after(self, batch_id: int) -> pd.DataFrame:
        """This stream's ledger rows (``read_table(LEDGER_TABLE)``'s columns) of the batches after ``batch_id``,
        ascending. Why: the Asset watchers and the drift check ask every interval what was committed since
        they last looked; a stream's ledger grows by a row a batch for months. The default reads the whole
        ledger; a sink that can select by key overrides it."""
        frame = self.read_table(LEDGER_TABLE)
        if "batch_id" not in frame.columns:  # no ledger yet
            return frame
        if "stream" in frame.columns:
            frame = frame[frame["stream"] == self.stream]
        return frame[frame["batch_id"] > batch_id].sort_values("batch_id").reset_index(drop=True)

    @abc.abstractmethod
    def table_name(self, name: str) -> str:
        """The physical name (prefix included) of spec table ``name``, or of the ledger for
        ``LEDGER_TABLE``: what reports show an operator. An unknown name raises SinkRefused."""

    @abc.abstractmethod
    def dispose(self) -> None:
        """Close pooled connections (call before the process exits or forks)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.dispose()
