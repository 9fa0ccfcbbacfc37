"""``format("rewind_kafka")``: a Kafka source on PySpark's Python Data Source API.

It mirrors Spark's built-in Kafka source (option names, columns, offsets recorded in the offset
log) so a job can switch between the two by configuration; see docs/kafka-sources.md.
The options and what they mean are the ``KafkaDataSource`` docstring (the contract); their
parsing is ``options.py``, every decision on offsets ``offsets.py``, the broker look-ups
``lookups.py``, the reads ``reader.py``, the columns ``columns.py``.

Where things run:
- ``initialOffset`` / ``latestOffset`` / ``partitions`` / ``commit`` run in one long-lived Python
  process on the driver, so the reader keeps a look-up consumer there between micro-batches;
- ``read`` runs on executors on a pickled copy of the reader (the consumer is not pickled) and
  creates its own consumer for the one partition range it reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from rewind.kafka.alignment import Alignment, cap_ends, horizon_ms, probe_positions
from rewind.kafka.client_config import base_consumer_config
from rewind.kafka.columns import arrow_schema, kafka_schema, messages_to_batch
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.kafka.offsets import (
    available_now_end,
    check_covers_partitions,
    check_missing_partitions,
    plan_batch_ranges,
    plan_latest,
    plan_ranges,
    resolve_offsets,
    resolve_timestamp_offsets,
    specific_offsets_needs,
    timestamp_targets,
)
from rewind.kafka.options import (
    SOURCE_NAME,
    OffsetSpec,
    SourceOptions,
    includes_headers,
    parse_options,
    validate_options,
)
from rewind.kafka.reader import iter_range, record_timestamps
from rewind.kafka.types import TP, OffsetRange, Offsets, offsets_from_json, offsets_to_json

log = logging.getLogger(__name__)


class KafkaInputPartition(InputPartition):
    """One Kafka partition range ``[from, until)``, read by one Spark task."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        r = self.range
        return f"KafkaInputPartition({r.topic}[{r.partition}] [{r.from_offset}, {r.until_offset}))"


class _KafkaReaderBase:
    """What batch and streaming readers share: options, look-ups and the executor-side read."""

    def __init__(self, options: SourceOptions) -> None:
        self.opts = options
        self.arrow_schema = arrow_schema(options.include_headers)
        self.consumer_config = base_consumer_config(
            options.bootstrap_servers, options.consumer_conf, group_id=options.group_id_prefix,
            auto_offset_reset="error" if options.fail_on_data_loss else "earliest")
        self._client: KafkaOffsetClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # a live consumer cannot travel to executors
        return state

    @property
    def timeout_s(self) -> float:
        return self.opts.poll_timeout_ms / 1000.0

    def lookup(self) -> KafkaOffsetClient:
        """The cached driver-side look-up client (created on first use)."""
        if self._client is None:
            self._client = KafkaOffsetClient(self.consumer_config, self.timeout_s)
        return self._client

    def close_lookup(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def resolve(self, spec: OffsetSpec, tps: list[TP], starting: bool, earliest: Offsets | None = None,
                latest: Offsets | None = None) -> Offsets:
        """Concrete offsets for a starting/ending spec, asking the broker only what it needs.

        ``earliest`` / ``latest`` may be passed when the caller has them already.
        """
        client = self.lookup()
        if spec.kind in ("timestamp", "timestamps"):
            found = client.offsets_for_times(timestamp_targets(spec, tps))
            missing = [tp for tp, off in found.items() if off is None]
            if missing and latest is None:
                latest = client.end_offsets(missing)
            return resolve_timestamp_offsets(spec, found, latest or {}, self.opts.timestamp_strategy, starting)
        check_covers_partitions(spec, tps)
        need_earliest, need_latest = specific_offsets_needs(spec)
        if need_earliest and earliest is None:
            earliest = client.earliest_offsets(tps)
        if need_latest and latest is None:
            latest = client.end_offsets(tps)
        return resolve_offsets(spec, tps, earliest or {}, latest or {})

    def read_range(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the records of one range as Arrow batches."""
        rng = getattr(partition, "range", None)
        if rng is None:  # Spark's placeholder partition when a batch read has nothing to read
            return
        for msgs in iter_range(self.consumer_config, rng, self.opts.records_per_batch, self.timeout_s,
                               self.opts.fail_on_data_loss):
            yield messages_to_batch(msgs, rng.topic, rng.partition, self.arrow_schema)


class KafkaBatchReader(_KafkaReaderBase, DataSourceReader):
    """``spark.read.format("rewind_kafka")``: ``[startingOffsets, endingOffsets)`` per partition."""

    def partitions(self) -> Sequence[InputPartition]:
        try:
            client = self.lookup()
            tps = client.partitions(self.opts.topics)
            assert self.opts.ending is not None
            earliest = client.earliest_offsets(tps)
            latest = client.end_offsets(tps)
            start = self.resolve(self.opts.starting, tps, True, earliest, latest)
            end = self.resolve(self.opts.ending, tps, False, earliest, latest)
            ranges = plan_batch_ranges(start, end, earliest, latest, self.opts.fail_on_data_loss)
        finally:
            self.close_lookup()
        log.info("batch read of %s: %d non-empty partition ranges", self.opts.topics, len(ranges))
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.read_range(partition)


class KafkaStreamReader(_KafkaReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rewind_kafka")``: micro-batches of Kafka offset ranges.

    Offsets are ``{"topic": {"partition": next_offset}}`` dicts in Spark's offset log, so a
    restarted query re-reads exactly the batch that was not committed.
    """

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._known_ends: Offsets = {}          # last end offsets seen (reportLatestOffset)
        self._target: Offsets | None = None     # Trigger.AvailableNow: never read beyond this

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_known_ends"] = {}
        state["_target"] = None
        return state

    def initialOffset(self) -> dict:
        tps = self.lookup().partitions(self.opts.topics)
        start = self.resolve(self.opts.starting, tps, starting=True)
        log.info("initial offsets of %s: %s", self.opts.topics, start)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        client = self.lookup()
        tps = client.partitions(self.opts.topics)
        self._target = client.end_offsets(tps)
        self._known_ends = dict(self._target)
        log.info("Trigger.AvailableNow target offsets: %s", self._target)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        client = self.lookup()
        begin = offsets_from_json(start, "start offset")
        if self._target is not None:
            ends = available_now_end(begin, self._target)
        else:
            tps = client.partitions(self.opts.topics)
            gone = set(check_missing_partitions(begin, tps, self.opts.fail_on_data_loss))
            begin = {tp: off for tp, off in begin.items() if tp not in gone}
            ends = client.end_offsets(tps)
            self._known_ends = dict(ends)
        if self.opts.alignment is not None:
            ends = self._aligned(begin, ends, self.opts.alignment)
        moved = [tp for tp, end in ends.items() if begin.get(tp) != end]
        earliest = client.earliest_offsets(moved) if moved else {}
        end = plan_latest(begin, ends, earliest, _max_rows(limit), self.opts.fail_on_data_loss)
        return offsets_to_json(end)

    def _aligned(self, begin: Offsets, ends: Offsets, align: Alignment) -> Offsets:
        """``ends`` capped so that no partition runs ahead of the slowest (``rewind.kafka.alignment``)."""
        client = self.lookup()
        stamps = record_timestamps(self.consumer_config, probe_positions(begin, ends), self.timeout_s)
        horizon = horizon_ms(begin, ends, stamps, int(time.time() * 1000), align)
        if horizon is None:
            return ends
        behind = {tp: horizon + 1 for tp, end in ends.items() if begin.get(tp, end) < end}
        capped = cap_ends(begin, ends, client.offsets_for_times(behind))
        held = {str(tp): (capped[tp], ends[tp]) for tp in ends if capped[tp] < ends[tp]}
        if held:
            log.info("event-time alignment: horizon %d ms; held back (to, instead of) %s", horizon, held)
        return capped

    def reportLatestOffset(self) -> dict | None:
        latest = self._target if self._target is not None else self._known_ends
        return offsets_to_json(latest) if latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start, "start offset")
        finish = offsets_from_json(end, "end offset")
        moved = [tp for tp, off in finish.items() if begin.get(tp) != off]
        earliest = self.lookup().earliest_offsets(moved) if moved else {}
        ranges = plan_ranges(begin, finish, earliest, self.opts.fail_on_data_loss)
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.read_range(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in Kafka consumer groups."""

    def stop(self) -> None:
        self.close_lookup()


def _max_rows(limit: ReadLimit) -> int | None:
    if isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    if not isinstance(limit, ReadAllAvailable):
        log.warning("read limit %r is not supported by %s; reading all available", limit, SOURCE_NAME)
    return None


class KafkaDataSource(DataSource):
    """Kafka records as rows with Spark's Kafka columns: ``spark.read`` / ``spark.readStream``
    ``.format("rewind_kafka")``.

    Rows: ``key``, ``value`` (binary), ``topic``, ``partition``, ``offset``, ``timestamp``,
    ``timestampType``, and ``headers`` with ``includeHeaders=true`` (``columns.kafka_schema``).
    Offsets in Spark's offset log: ``{"topic": {"partition": next_offset}}``, as Spark's connector
    writes them. One Spark partition per Kafka partition range.

    Options (names are case-insensitive; every one is checked at ``load()``, and an unknown name or
    a value that cannot be used fails there naming the option):

    | option | default | meaning |
    |---|---|---|
    | ``kafka.bootstrap.servers`` | required | ``host:port[,host:port...]`` |
    | ``subscribe`` | required | comma-separated topic names; every partition of them is read |
    | ``startingOffsets`` | ``latest`` (stream), ``earliest`` (batch) | ``earliest``, ``latest`` (streams only) or ``{"topic": {"0": 42}}`` naming every partition (-2 earliest; -1 latest, streams only); a stream uses it only without a checkpoint |
    | ``startingTimestamp`` | none | ms since the epoch: start every partition at its first record at or after it (wins over the two others) |
    | ``startingOffsetsByTimestamp`` | none | ``{"topic": {"0": ts_ms}}``: the same per partition (wins over ``startingOffsets``) |
    | ``startingOffsetsByTimestampStrategy`` | ``error`` | no record at or after the timestamp: ``error`` fails, ``latest`` starts at the end |
    | ``endingOffsets`` | ``latest`` | batch only: ``latest`` or ``{"topic": {"0": 42}}`` (-1 latest), exclusive |
    | ``endingTimestamp`` | none | batch only: end every partition at its first record at or after it (or its end) |
    | ``endingOffsetsByTimestamp`` | none | batch only: the same per partition |
    | ``maxOffsetsPerTrigger`` | all available | streams only: offsets per micro-batch over all partitions, split by backlog |
    | ``failOnDataLoss`` | ``true`` | records gone (retention, truncation, topic recreated or deleted): fail naming them, or (``false``) warn and go on where Spark's connector goes on |
    | ``kafkaConsumer.pollTimeoutMs`` | 120000 | how long a look-up or a read may go without an answer from Kafka |
    | ``includeHeaders`` | ``false`` | add the ``headers`` column |
    | ``groupIdPrefix`` | ``rewind-kafka-source`` | ``group.id`` of its consumers (they never join the group nor commit) |
    | ``maxRecordsPerBatch`` | 10000 | records per Arrow batch a task hands Spark |
    | ``eventTimeAlignment.maxDriftMs`` | off | streams only: no partition is read further ahead, in Kafka timestamps, than the slowest plus this (``alignment.py``) |
    | ``eventTimeAlignment.idleTimeoutMs`` | 60000 | a partition with nothing to read whose last record is older holds nobody back |
    | ``kafka.<setting>`` | | a consumer setting, Java client or librdkafka name (``client_config``); ``kafka.isolation.level`` defaults to ``read_uncommitted`` like Spark's connector; ``auto.offset.reset``, ``enable.auto.commit``, ``enable.partition.eof`` and the deserializers are refused (the source owns them) |
    | ``fetchOffset.numRetries``, ``fetchOffset.retryIntervalMs`` | | accepted for Spark's option set, unused: look-ups retry on their own until ``kafkaConsumer.pollTimeoutMs`` |

    Spark's ``assign``, ``subscribePattern``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``,
    ``minPartitions`` and ``maxRecordsPerPartition`` are refused, not ignored: they change which
    records are read or how, and this source does not implement them.
    """  # noqa: E501 (the options table is the reference docs/kafka-sources.md points to; a row cannot wrap)

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        validate_options(self.options)  # runs at load(): bad options fail there, not in a query thread
        return kafka_schema(includes_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(parse_options(self.options, streaming=True))
