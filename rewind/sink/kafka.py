"""The transactional Kafka sink: one Kafka transaction per micro-batch, its ledger record inside it.

Flink's two-phase-commit Kafka sink, for Spark's micro-batches. Each table of the stream goes to a
topic (``rewind.sink.kafka_target``; rows as JSON, ``rewind.sink.kafka_codec``), and every
``write_batch`` is one transaction holding the batch's records *and* a ledger record (stream,
batch id, source offsets) on the ledger topic. ``read_committed`` consumers see a batch whole or
not at all.

- **Pre-commit** is the flush: every record of the batch is acknowledged by the brokers inside the
  open transaction. **Commit** is ``commit_transaction``. A driver killed between the two leaves
  an open transaction that holds ``read_committed`` readers back; the restarted driver's producer
  has the same ``transactional.id`` (``rewind.<stream>.<topics>``), and its
  ``init_transactions`` aborts that transaction and fences the old producer, so a zombie driver
  that wakes up can no longer commit (``SinkWriteError``, "fenced").
- **Re-run batches**: after ``init_transactions`` the sink reads the ledger topic
  ``read_committed``; a batch id committed before with the same source offsets is skipped, one
  with other offsets (a re-planned batch) is written again, as ``Sink.write_batch`` says. The
  ledger topic is created compacted with unlimited retention (``LEDGER_TOPIC_CONFIG``; its records
  are keyed by stream and batch id), so no broker retention ever forgets a committed batch.
- **Idempotent tables**: a topic is a changelog keyed by the table's key; reading it back applies
  the table's conflict rule (``rewind.sink.kafka_mirror``). Where a write could repeat a key of an
  ``ignore`` table (a re-planned batch, a replay's ``write_rows``), the keys already in the topic
  are left out, so such a topic holds each key once.
- **A record too large for Kafka** (``kafka.message.max.bytes``): a row that carries its Kafka
  coordinates becomes a dead letter (reason ``too_large_for_kafka``) and the batch commits;
  any other row is refused (``SinkRefused``) naming the table, the size and the setting.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from rewind.api.tables import LEDGER_TABLE, TableSpec
from rewind.faults import fault_point
from rewind.kafka.client_config import base_consumer_config, librdkafka_config
from rewind.kafka.client_logs import librdkafka_logger
from rewind.kafka.group_offsets import consumer_group, end_offsets, topic_partitions
from rewind.kafka.topics import ensure_topic
from rewind.settings import resolve_bootstrap
from rewind.sink.contract import BatchResult, Rows, Sink, check_batch_id, check_sink_tables
from rewind.sink.convert import PreparedTable, prepare_rows, prepare_table
from rewind.sink.errors import TOO_LARGE, TOO_LARGE_FIX, SinkRefused
from rewind.sink.kafka_codec import encode_table
from rewind.sink.kafka_ledger import LedgerEntry, ledger_frame, read_ledger
from rewind.sink.kafka_mirror import TopicMirror
from rewind.sink.kafka_target import KafkaSinkTarget
from rewind.sink.kafka_txn import Record, Transactions

log = logging.getLogger(__name__)

__all__ = ["TransactionalKafkaSink"]

#: The ledger decides whether a re-run batch is skipped, so it must outlive any retention: compacted
#: (one record per (stream, batch id) key, the last one counts) and never deleted by time.
LEDGER_TOPIC_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1"}


class TransactionalKafkaSink(Sink):
    """Exactly-once writes of micro-batches into Kafka topics (see the module docstring and ``Sink``)."""

    def __init__(self, target: KafkaSinkTarget, stream: str, tables: Sequence[TableSpec], table_prefix: str = "",
                 dead_letter_table: str | None = None) -> None:
        specs = check_sink_tables(stream, tables, table_prefix)
        self.target = target
        self.stream = stream
        self.table_prefix = table_prefix
        self.specs: dict[str, TableSpec] = specs
        self.dead_letter_table = dead_letter_table if dead_letter_table in self.specs else None
        self._bootstrap: str | None = target.bootstrap
        self._mirror: TopicMirror | None = None
        self._writer: Transactions | None = None
        self._ledger: dict[int, LedgerEntry] | None = None  # while writing: the ledger as this writer knows it
        self._group: Any = None  # a consumer of the stream's group, for its metadata (never subscribes)
    #: batch end offsets go to the stream's consumer group inside each batch's transaction
    commits_group_offsets = True

    # ------------------------------------------------------------------ names and clients
    @property
    def bootstrap(self) -> str:
        if self._bootstrap is None:

            self._bootstrap = resolve_bootstrap(None)
        return self._bootstrap

    def table_name(self, name: str) -> str:
        if name != LEDGER_TABLE and name not in self.specs:
            raise SinkRefused(f"unknown table {name!r}: this sink has {sorted(self.specs)}")
        return f"{self.target.topic_prefix}{self.table_prefix}{name}"

    @property
    def transactional_id(self) -> str:
        return f"rewind.{self.stream}.{self.table_name(LEDGER_TABLE)}"

    def _reader_config(self) -> dict[str, Any]:
        return base_consumer_config(self.bootstrap, self.target.client, group_id=f"rewind-sink-{self.stream}")

    def _producer_config(self, transactional_id: str) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 3,
                **{k: v for k, v in librdkafka_config(self.target.client).items() if k != "isolation.level"},
                "transactional.id": transactional_id, "logger": librdkafka_logger()}

    def _topics(self) -> dict[str, int]:
        return {**{self.table_name(n): self.target.partitions for n in self.specs}, self.table_name(LEDGER_TABLE): 1}

    # ------------------------------------------------------------------ the contract
    def create_tables(self) -> None:

        ledger = self.table_name(LEDGER_TABLE)
        for topic, partitions in self._topics().items():
            ensure_topic(self.bootstrap, topic, partitions, self.target.replication,
                         config=librdkafka_config(self.target.client),
                         topic_config=LEDGER_TOPIC_CONFIG if topic == ledger else None)

    def _start_writing(self) -> Transactions:
        """The batch writer: topics there, older producers of this id fenced, their open transaction
        ended, then the ledger as committed."""
        if self._writer is None:
            self.create_tables()
            self._writer = Transactions(self._producer_config(self.transactional_id))
            self._ledger = read_ledger(self._reader_config(), self.table_name(LEDGER_TABLE), self.stream)
            log.info("kafka sink %s: transactional id %s, %d batches committed before (last %s)", self.stream,
                     self.transactional_id, len(self._ledger), max(self._ledger, default=None))
        return self._writer

    def fence(self, epoch: int) -> None:
        """``Sink.fence``: this driver's transactional producer starts now; its ``init_transactions``
        fences every older producer of the stream's transactional id, so a zombie's next commit fails
        ("fenced"). Each batch's records carry the epoch in a ``rewind.epoch`` header."""
        self.epoch = epoch
        self._start_writing()

    def write_batch(self, batch_id: int, rows: Mapping[str, Rows], source_offsets: str | None = None) -> BatchResult:
        batch_id = check_batch_id(batch_id)
        prepared = prepare_rows(self.specs, rows, sqlite_text=False)
        t0 = time.perf_counter()
        writer = self._start_writing()
        assert self._ledger is not None
        prior = self._ledger.get(batch_id)
        if prior is not None and (prior.source_offsets is None or source_offsets is None
                                  or prior.source_offsets == source_offsets):
            return BatchResult(batch_id, True, {n: 0 for n in prepared}, time.perf_counter() - t0)
        counts = {n: p.submitted for n, p in prepared.items()}
        fault_point("sink.before_write", batch=batch_id)
        records = self._records(prepared, batch_id, skip_known=prior is not None)
        entry = LedgerEntry(self.stream, batch_id, dt.datetime.now(dt.UTC), counts, source_offsets)
        records.append(Record(self.table_name(LEDGER_TABLE), entry.key(), entry.to_json(), []))
        group = self._group_offsets(source_offsets)
        writer.run(records, f"batch {batch_id} of stream {self.stream}",
                   before_commit=lambda: fault_point("sink.pre_committed", batch=batch_id),
                   offsets=group[0], group_metadata=group[1])
        self._ledger[batch_id] = entry
        fault_point("sink.committed", batch=batch_id)
        return BatchResult(batch_id, False, counts, time.perf_counter() - t0, replanned=prior is not None)

    def _group_offsets(self, source_offsets: str | None) -> tuple[list[Any], Any]:
        """The batch's end offsets for the stream's consumer group, and that group's metadata, to commit
        in the batch's transaction (``rewind.kafka.group_offsets``): Kafka's tools then see its lag."""

        offsets = end_offsets(source_offsets)
        if not offsets:
            return [], None
        if self._group is None:
            from confluent_kafka import Consumer

            self._group = Consumer({**base_consumer_config(self.bootstrap, self.target.client,
                                                           group_id=consumer_group(self.stream)),
                                    "enable.auto.commit": False})
        return topic_partitions(offsets), self._group.consumer_group_metadata()

    def write_rows(self, rows: Mapping[str, Rows], *, replay_id: str | None = None,
                   inserted: dict[str, int] | None = None) -> dict[str, int]:
        prepared = prepare_rows(self.specs, rows, sqlite_text=False)
        self.create_tables()
        records = self._records(prepared, None, skip_known=True, inserted=inserted)
        label = f"replay {replay_id}" if replay_id else "rows"
        # Its own transactional id: the live stream's writer must not be fenced by a replay.
        txn = Transactions(self._producer_config(f"{self.transactional_id}.rows.{replay_id or uuid.uuid4().hex}"))
        try:
            txn.run(records, f"{label} of stream {self.stream}")
        finally:
            txn.close()
        return {n: p.submitted for n, p in prepared.items()}

    def write_tombstones(self, name: str, keys: pd.DataFrame, label: str) -> int:
        """Delete rows of table ``name`` by key: one tombstone each (the key, no value), in one transaction
        of its own (``rewind.sink.deletes``); readers apply them as deletes."""
        spec = self.specs[name]
        prepared = prepare_table(TableSpec(spec.name, tuple(c for c in spec.columns if c.name in spec.key), spec.key,
                                           "ignore"), keys.to_dict(orient="records"), sqlite_text=False)
        headers: list[tuple[str, str | bytes | None]] = [("rewind.stream", self.stream.encode())]
        records = [Record(self.table_name(name), key, None, headers) for key, _ in encode_table(prepared)]
        txn = Transactions(self._producer_config(f"{self.transactional_id}.delete.{uuid.uuid4().hex}"))
        try:
            txn.run(records, f"{label}: {len(records)} tombstone(s) in {name} of stream {self.stream}")
        finally:
            txn.close()
        return len(records)

    def duplicate_rows(self, name: str) -> pd.DataFrame:
        """``Sink.duplicate_rows``: the later committed copies of keys of an ``ignore`` table's topic."""
        self.table_name(name)
        return self._mirror_of([name]).repeated(name)

    def _records(self, prepared: Mapping[str, PreparedTable], batch_id: int | None, *, skip_known: bool,
                 inserted: dict[str, int] | None = None) -> list[Record]:
        """The Kafka records of prepared tables; oversized rows become dead letters (module docstring)."""
        headers: list[tuple[str, str | bytes | None]] = [("rewind.stream", self.stream.encode())]
        if batch_id is not None:
            headers.append(("rewind.batch", str(batch_id).encode()))
            if self.epoch is not None:
                headers.append(("rewind.epoch", str(self.epoch).encode()))
        known = self._known_keys([n for n, p in prepared.items() if p.spec.on_conflict == "ignore"]) \
            if skip_known else {}
        out: list[Record] = []
        too_large: list[dict[str, Any]] = []
        limit = self.target.max_record_bytes - sum(len(k) + len(v or b"") for k, v in headers)
        for name, table in prepared.items():
            topic, new = self.table_name(name), 0
            for i, (key, value) in enumerate(encode_table(table)):
                if key in known.get(name, ()):
                    continue
                size = len(key) + len(value)
                if size > limit:
                    row: dict[str, Any] = {c: table.columns[c][i] for c in ("topic", "partition", "offset")
                                           if c in table.columns}
                    too_large.append(self._dead_letter(name, row, size, limit, batch_id))
                    continue
                out.append(Record(topic, key, value, headers))
                new += 1
            if inserted is not None and table.spec.on_conflict == "ignore":
                inserted[name] = new
        if too_large:
            assert self.dead_letter_table is not None
            dead = prepare_table(self.specs[self.dead_letter_table], too_large, sqlite_text=False)
            out.extend(Record(self.table_name(self.dead_letter_table), k, v, headers) for k, v in encode_table(dead))
            log.warning("stream %s: %d rows too large for Kafka (limit %d bytes) written as dead letters",
                        self.stream, len(too_large), limit)
        return out

    def _dead_letter(self, name: str, row: Mapping[str, Any], size: int, limit: int,
                     batch_id: int | None) -> dict[str, Any]:
        coords = ("topic", "partition", "offset")
        why = (f"{TOO_LARGE}: a row of table {name!r} is {size} bytes, above kafka.message.max.bytes less "
               f"overhead ({limit})")
        if self.dead_letter_table is None or name == self.dead_letter_table or any(row.get(c) is None for c in coords):
            raise SinkRefused(f"stream {self.stream}: {why}{TOO_LARGE_FIX}")
        columns = self.specs[self.dead_letter_table].column_names
        dead = {c: row[c] for c in coords}
        dead.update({"reason": why} if "reason" in columns else {})
        if "batch_id" in columns:
            dead["batch_id"] = batch_id
        return dead

    def _known_keys(self, names: Sequence[str]) -> dict[str, set[bytes]]:
        if not names:
            return {}
        mirror = self._mirror_of(names)
        return {n: mirror.keys[n] for n in names}

    def _mirror_of(self, names: Sequence[str]) -> TopicMirror:
        if self._mirror is None:
            self._mirror = TopicMirror(self.specs, {n: self.table_name(n) for n in self.specs}, self._reader_config())
        self._mirror.catch_up(names)
        return self._mirror

    # ------------------------------------------------------------------ reading back
    def read_table(self, name: str) -> pd.DataFrame:
        if name == LEDGER_TABLE:
            return ledger_frame(read_ledger(self._reader_config(), self.table_name(LEDGER_TABLE), None))
        self.table_name(name)
        return self._mirror_of([name]).sql.read_table(name)

    def read_rows(self, name: str, where: Callable[[Any], Any] | None = None,
                  columns: Sequence[str] | None = None) -> pd.DataFrame:
        self.table_name(name)
        return self._mirror_of([name]).sql.read_rows(name, where, columns)

    def column_max(self, name: str, column: str) -> Any:
        self.table_name(name)
        return self._mirror_of([name]).sql.column_max(name, column)

    def committed_batch_ids(self) -> list[int]:
        ledger = self._ledger if self._ledger is not None else \
            read_ledger(self._reader_config(), self.table_name(LEDGER_TABLE), self.stream)
        return sorted(ledger)

    def last_committed_batch(self) -> int | None:
        ids = self.committed_batch_ids()
        return ids[-1] if ids else None

    def dispose(self) -> None:
        if self._group is not None:
            self._group.close()
            self._group = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._mirror is not None:
            self._mirror.dispose()
            self._mirror = None

