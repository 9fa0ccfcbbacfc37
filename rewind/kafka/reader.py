"""Reading records through confluent-kafka: one partition range (a Spark task), or whole topics to their end (tools).

Reads assign partitions at an offset and consume; offsets may have gaps (transaction markers take
offsets, aborted records are skipped by ``read_committed``), so a read ends at the first record or
end-of-partition event at or past its end, never by waiting for offset ``end - 1``. librdkafka
rides through a broker restart or leader change on its own: transient errors are logged, not
raised; a read gives up after its timeout *without progress*, never because it is long.

- ``iter_range``: the records of ``[from, until)`` of one partition, in batches (the Python
  source's executors, the replay planner);
- ``read_to_end``: every record of some topics up to their end as the read begins (verify, the
  DQ proof);
- ``record_timestamps``: the timestamp of the record at each of some positions (event-time
  alignment).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from rewind.kafka.client_errors import retriable
from rewind.kafka.lookups import KafkaOffsetClient, topic_partitions
from rewind.kafka.types import TP, DataLossError, KafkaTimeoutError, OffsetRange

log = logging.getLogger(__name__)

EOF = KafkaError._PARTITION_EOF
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
POLL_S = 0.1  # consume() blocks until num_messages or this timeout
# confluent-kafka's stubs type Message.offset() and .partition() as ``int | None`` for every
# message; records and end-of-partition events always carry both (None is for error events with no
# partition or position). The ``type: ignore``s below mark those calls.


def iter_range(config: Mapping[str, Any], rng: OffsetRange, batch_size: int, timeout_s: float,
               fail_on_data_loss: bool = True) -> Iterator[list[Message]]:
    """The data records of ``[rng.from_offset, rng.until_offset)`` in lists of up to ``batch_size``.

    The read ends when a record at or beyond ``until`` arrives or librdkafka reports EOF at or
    beyond it (offsets may have gaps: transaction markers, aborted records). An EOF below ``until``
    means the partition no longer holds the range (data loss), and so do records below ``from``
    after librdkafka reset a lost position to earliest (never returned); no answer for ``timeout_s``
    (``kafkaConsumer.pollTimeoutMs``) raises ``KafkaTimeoutError``. librdkafka rides through a
    broker restart or leader change on its own: transient errors are logged, not raised.
    """
    until = rng.until_offset
    if until <= rng.from_offset:
        return
    where = f"{rng.topic}[{rng.partition}] range [{rng.from_offset}, {until})"
    next_offset = rng.from_offset
    consumer = Consumer(dict(config))
    consumer.assign([TopicPartition(rng.topic, rng.partition, next_offset)])
    try:
        pending: list[Message] = []
        last_progress = time.monotonic()
        done = False
        while not done:
            # +1: the record or EOF just past the range ends the read without waiting a poll.
            want = max(1, min(batch_size - len(pending), until - next_offset + 1))
            msgs = consumer.consume(num_messages=want, timeout=POLL_S)
            if not msgs and time.monotonic() - last_progress > timeout_s:
                raise KafkaTimeoutError(
                    f"no answer from Kafka for {timeout_s:.0f}s while reading {where} at offset {next_offset} "
                    "(kafkaConsumer.pollTimeoutMs)")
            data = []
            for m in msgs:
                err = m.error()
                if err is None:
                    data.append(m)
                    continue
                code = err.code()
                if code == EOF:
                    last_progress = time.monotonic()
                    if m.offset() >= until:  # type: ignore[operator]
                        done = True
                    else:
                        _end_below_range(where, m.offset(), fail_on_data_loss)  # type: ignore[arg-type]
                        done = True
                elif code in _OUT_OF_RANGE:
                    raise DataLossError(
                        f"data loss reading {where}: offset {next_offset} is no longer available ({err}). "
                        "Set failOnDataLoss=false to continue from the earliest offset.")
                elif err.fatal() or (m.topic() is not None and not retriable(err)):
                    raise KafkaException(err)
                else:  # transient (broker restart, leader change): librdkafka retries on its own
                    log.warning("Kafka client error while reading %s: %s", where, err)
            if data:
                last_progress = time.monotonic()
                if data[0].offset() < rng.from_offset:  # type: ignore[operator]
                    # auto.offset.reset=earliest (failOnDataLoss=false) after OFFSET_OUT_OF_RANGE:
                    # the partition was truncated below the range; what it holds now is not in it.
                    data = [m for m in data if m.offset() >= rng.from_offset]  # type: ignore[operator]
                if data and data[-1].offset() >= until:  # type: ignore[operator]
                    offsets = [m.offset() for m in data]
                    data = data[:bisect_left(offsets, until)]  # type: ignore[type-var]
                    done = True
                if data:
                    next_offset = data[-1].offset() + 1  # type: ignore[operator]
                    pending.extend(data)
            if next_offset >= until:
                done = True
            if len(pending) >= batch_size or (done and pending):
                yield pending
                pending = []
    finally:
        consumer.close()


def read_to_end(config: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 60.0,
                upper: Mapping[TP, int] | None = None, batch_size: int = 10_000,
                lower: Mapping[TP, int] | None = None) -> Iterator[list[Message]]:
    """Every data record of ``topics`` from the earliest retained offset (or ``lower``, when given and
    higher) up to each partition's end as it is when the read begins (or ``upper``, when given and
    lower), from all partitions at once.

    A producer that keeps writing does not keep the read going: each partition ends at its
    snapshot end, at the first record or EOF at or past it. ``timeout_s`` is how long the read may
    go without progress (not its total length), so a large topic is never cut short.
    """
    with KafkaOffsetClient(config, timeout_s) as client:
        tps = client.partitions(topics)
        earliest = client.earliest_offsets(tps)
        ends = client.end_offsets(tps)
    if upper is not None:
        ends = {tp: min(end, upper.get(tp, 0)) for tp, end in ends.items()}
    if lower is not None:
        earliest = {tp: max(start, lower.get(tp, start)) for tp, start in earliest.items()}
    pending = {tp for tp in tps if ends[tp] > earliest[tp]}
    if not pending:
        return
    consumer = Consumer({**config, "enable.partition.eof": True})
    consumer.assign(topic_partitions(sorted(pending), earliest))
    last_progress = time.monotonic()
    try:
        while pending:
            msgs = consumer.consume(num_messages=batch_size, timeout=POLL_S)
            if msgs:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout_s:
                raise KafkaTimeoutError(
                    f"no records from Kafka for {timeout_s:.0f}s while reading "
                    + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
                    + f" to its end ({config.get('bootstrap.servers')})")
            out: list[Message] = []
            for m in msgs:
                topic = m.topic()
                err = m.error()
                if topic is None:
                    if err is not None and (err.fatal() or not retriable(err)):
                        raise KafkaException(err)
                    continue
                tp = TP(topic, m.partition())  # type: ignore[arg-type]
                if tp not in pending:
                    continue
                if err is not None:
                    if err.code() == EOF:
                        if m.offset() >= ends[tp]:  # type: ignore[operator]
                            pending.discard(tp)
                            consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                        continue
                    if err.code() in _OUT_OF_RANGE:
                        raise DataLossError(f"{tp.topic}[{tp.partition}]: records were deleted while being read "
                                            f"({err}); read again")
                    if err.fatal() or not retriable(err):
                        raise KafkaException(err)
                    log.warning("Kafka client error while reading %s: %s", tp, err)
                    continue
                if m.offset() >= ends[tp]:  # type: ignore[operator]
                    pending.discard(tp)
                    consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                    continue
                out.append(m)
                if m.offset() >= ends[tp] - 1:  # type: ignore[operator]
                    pending.discard(tp)
                    consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
            if out:
                yield out
    finally:
        consumer.close()


def _end_below_range(where: str, end: int, fail_on_data_loss: bool) -> None:
    msg = f"data loss reading {where}: the partition ends at {end}, before the end of the range"
    if fail_on_data_loss:
        raise DataLossError(msg + ". Set failOnDataLoss=false to continue.")
    log.warning("%s; failOnDataLoss=false, skipping the rest of the range", msg)


def record_timestamps(config: Mapping[str, Any], positions: Mapping[TP, int],
                      timeout_s: float = 10.0) -> dict[TP, int | None]:
    """The Kafka timestamp (ms) of the first readable record at or after each position; None when
    none comes within ``timeout_s`` (at most 10 s: a position at the end, deleted records, an open
    transaction)."""
    found: dict[TP, int | None] = {tp: None for tp in positions}
    pending = {tp for tp, off in positions.items() if off >= 0}
    if not pending:
        return found
    consumer = Consumer({**config, "enable.partition.eof": True, "auto.offset.reset": "latest"})
    try:
        consumer.assign(topic_partitions(sorted(pending), positions))
        deadline = time.monotonic() + min(10.0, timeout_s)
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=len(pending) * 64, timeout=POLL_S):
                topic = m.topic()
                if topic is None:
                    continue
                tp = TP(topic, m.partition())  # type: ignore[arg-type]
                if tp not in pending:
                    continue
                if m.error() is None:
                    found[tp] = m.timestamp()[1]
                pending.discard(tp)  # a record, EOF or an error: this partition is answered
    finally:
        consumer.close()
    return found
