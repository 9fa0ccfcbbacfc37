"""``format("rewind_kafka")``: a Kafka source on PySpark's Python Data Source API.

It mirrors Spark's built-in Kafka source (option names, columns, offsets recorded in the offset
log) so a job can switch between the two by configuration; see DESIGN.md "The two Kafka sources".

Where things run:
- ``initialOffset`` / ``latestOffset`` / ``partitions`` / ``commit`` run in one long-lived Python
  process on the driver, so the reader keeps a look-up consumer there between micro-batches;
- ``read`` runs on executors on a pickled copy of the reader (the consumer is not pickled) and
  creates its own consumer for the one partition range it reads.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Sequence

import pyarrow as pa
from confluent_kafka import Message
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
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rewind.kafka.client import KafkaOffsetClient, base_consumer_config, iter_range
from rewind.kafka.offsets import (
    SOURCE_NAME,
    TP,
    OffsetRange,
    Offsets,
    OffsetSpec,
    SourceOptions,
    available_now_end,
    check_covers_partitions,
    check_missing_partitions,
    includes_headers,
    offsets_from_json,
    offsets_to_json,
    parse_options,
    plan_batch_ranges,
    plan_latest,
    plan_ranges,
    resolve_offsets,
    resolve_timestamp_offsets,
    specific_offsets_needs,
    timestamp_targets,
    validate_options,
)

log = logging.getLogger(__name__)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
_TS_MS = pa.timestamp("ms", tz="UTC")
_TS_US = pa.timestamp("us", tz="UTC")


def kafka_schema(include_headers: bool = False) -> StructType:
    """The columns of Spark's built-in Kafka source; ``headers`` only with ``includeHeaders=true``
    (Spark's default is without, and a stream must see the same columns from either source)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow form of ``kafka_schema`` that Spark checks returned batches against."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TS_US),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def messages_to_batch(msgs: list[Message], topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch from records of one partition, built column-wise (the hot path).

    Kafka's timestamp type ids (CreateTime 0, LogAppendTime 1, none -1) are librdkafka's minus one.
    """
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    columns = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset() for m in msgs], pa.int64()),
        pa.array([s[1] for s in stamps], _TS_MS).cast(_TS_US),
        pa.array([s[0] - 1 for s in stamps], pa.int32()),
    ]
    if len(schema) == 8:
        headers = [m.headers() for m in msgs]
        if any(headers):
            columns.append(pa.array(headers, HEADERS_TYPE))
        else:
            columns.append(pa.nulls(n, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


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
            ends = self._aligned(begin, ends)
        moved = [tp for tp, end in ends.items() if begin.get(tp) != end]
        earliest = client.earliest_offsets(moved) if moved else {}
        end = plan_latest(begin, ends, earliest, _max_rows(limit), self.opts.fail_on_data_loss)
        return offsets_to_json(end)

    def _aligned(self, begin: Offsets, ends: Offsets) -> Offsets:
        """``ends`` capped so that no partition runs ahead of the slowest (``rewind.kafka.alignment``)."""
        import time

        from rewind.kafka.alignment import cap_ends, horizon_ms, probe_positions

        client = self.lookup()
        stamps = client.timestamps_at(probe_positions(begin, ends))
        horizon = horizon_ms(begin, ends, stamps, int(time.time() * 1000), self.opts.alignment)
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
    """Kafka records as rows with Spark's Kafka columns; see the module docstring."""

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
