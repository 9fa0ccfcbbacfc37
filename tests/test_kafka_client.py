"""The ``rewind_kafka`` source's own machinery on the real Apache Kafka broker: the look-ups of
``rewind.kafka.lookups``, ``iter_range`` and ``read_to_end`` over gaps, data loss and silence,
the reader's pickling and Arrow batches, and its error messages. What both sources must do alike
is in ``test_source_conformance.py``; this file is about how the Python source does it."""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from harness.kafka_records import delete_before, produce, produce_transactions, transactional_producer

from rewind.kafka.client_config import base_consumer_config
from rewind.kafka.client_logs import LOGGER_NAME, SimilarLines, librdkafka_logger
from rewind.kafka.columns import arrow_schema
from rewind.kafka.lookups import KafkaOffsetClient, check_reachable, earliest_offsets, true_end_offsets
from rewind.kafka.options import parse_options
from rewind.kafka.reader import iter_range, read_to_end
from rewind.kafka.source import KafkaStreamReader
from rewind.kafka.types import (
    TP,
    DataLossError,
    KafkaTimeoutError,
    KafkaUnreachable,
    OffsetRange,
    UnknownTopicError,
)
from rewind.runtime.processes import free_port


def offsets_read(conf: dict[str, Any], rng: OffsetRange, timeout_s: float = 10.0,
                 fail_on_data_loss: bool = True, batch_size: int = 100) -> list[int]:
    return [m.offset() for msgs in iter_range(conf, rng, batch_size, timeout_s, fail_on_data_loss) for m in msgs]


def test_look_ups(kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(2, "lookup")
    base = int(time.time() * 1000) - 60_000
    produce(kafka_bootstrap, topic, 100, 2, timestamp=lambda i: base + i)
    t0, t1 = TP(topic, 0), TP(topic, 1)
    assert true_end_offsets(kafka_bootstrap, topic) == {t0: 50, t1: 50}
    assert true_end_offsets(kafka_bootstrap, [t1]) == {t1: 50}
    assert earliest_offsets(kafka_bootstrap, topic) == {t0: 0, t1: 0}
    with KafkaOffsetClient(base_consumer_config(kafka_bootstrap), timeout_s=30) as client:
        assert client.partitions([topic]) == [t0, t1]
        # record i is offset i // 2 of partition i % 2, stamped base + i
        assert client.offsets_for_times({t0: base + 10, t1: base + 10}) == {t0: 5, t1: 5}
        assert client.offsets_for_times({t0: base + 1000, t1: 0}) == {t0: None, t1: 0}
        with pytest.raises(UnknownTopicError, match="no-such-topic"):
            client.partitions(["no-such-topic"])
    delete_before(kafka_bootstrap, topic, {0: 20})
    assert earliest_offsets(kafka_bootstrap, topic) == {t0: 20, t1: 0}
    assert true_end_offsets(kafka_bootstrap, topic) == {t0: 50, t1: 50}


def test_check_reachable_names_what_is_wrong(kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(3, "reach")
    assert check_reachable(kafka_bootstrap, [topic]) == {topic: 3}
    with pytest.raises(UnknownTopicError, match="missing-x"):
        check_reachable(kafka_bootstrap, [topic, "missing-x"])
    t0 = time.monotonic()
    with pytest.raises(KafkaUnreachable):
        check_reachable(f"127.0.0.1:{free_port()}", [topic], timeout_s=1.5)
    assert time.monotonic() - t0 < 10


def test_reads_end_at_gaps_and_markers(kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    """Commit markers and aborted records take offsets: a range that ends on one, or holds only
    one, ends without waiting for a record at ``until - 1``."""
    topic = new_topic(1, "gaps")
    tx = produce_transactions(kafka_bootstrap, topic, 1, [(True, 5), (False, 3), (True, 5), (True, 5)])
    data = sorted(o for _, _, o in tx.committed)
    aborted = sorted(o for _, _, o in tx.aborted)
    end = true_end_offsets(kafka_bootstrap, topic)[TP(topic, 0)]
    assert end == data[-1] + 2  # one past the last commit marker
    committed = base_consumer_config(kafka_bootstrap, {"isolation.level": "read_committed"})

    def read(frm: int, until: int, conf: dict[str, Any] = committed) -> list[int]:
        t0 = time.monotonic()
        got = offsets_read(conf, OffsetRange(topic, 0, frm, until))
        assert time.monotonic() - t0 < 3, f"[{frm}, {until}) waited for a record that is a marker"
        return got

    assert read(0, end) == data
    marker = data[4] + 1  # the first commit marker
    assert read(0, marker + 1) == data[:5]          # ends on a marker, more data follows
    assert read(marker, marker + 1) == []           # only a marker
    assert read(aborted[0], aborted[-1] + 2) == []  # only aborted records and their abort marker
    assert read(end - 1, end) == []                 # the last offset is a marker, nothing follows
    uncommitted = base_consumer_config(kafka_bootstrap, {"isolation.level": "read_uncommitted"})
    assert read(0, end, uncommitted) == sorted(data + aborted)
    # Batches of the requested size, in offset order.
    sizes = [len(msgs) for msgs in iter_range(committed, OffsetRange(topic, 0, 0, end), 4, 10.0)]
    assert sum(sizes) == 15 and max(sizes) <= 4


def test_end_offset_is_the_last_stable_offset_with_an_open_transaction(
        kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    """read_committed does not read into an open transaction; read_uncommitted does."""
    topic = new_topic(1, "open")
    produce(kafka_bootstrap, topic, 30, 1)
    tx = transactional_producer(kafka_bootstrap, topic)
    tx.begin_transaction()
    for _ in range(10):
        tx.produce(topic, value=b"open", partition=0)
    tx.flush(30)
    produce(kafka_bootstrap, topic, 5, 1, start=30)
    tp = TP(topic, 0)
    committed = {"isolation.level": "read_committed"}
    assert true_end_offsets(kafka_bootstrap, [tp], committed) == {tp: 30}
    assert true_end_offsets(kafka_bootstrap, [tp], {"isolation.level": "read_uncommitted"}) == {tp: 45}
    tx.commit_transaction(30)
    # commit_transaction returns once the coordinator decided; the partition's commit marker (offset 45) is
    # written a moment later, and the last stable offset moves with it (a full run, load 13, saw 30 at once)
    deadline = time.monotonic() + 15
    while (ends := true_end_offsets(kafka_bootstrap, [tp], committed)) != {tp: 46} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ends == {tp: 46}


def test_range_reads_and_data_loss(kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    """A range that starts below the earliest retained offset, or runs past the end, is data loss:
    an error, or (failOnDataLoss=false, i.e. auto.offset.reset=earliest) what is still there."""
    topic = new_topic(1, "loss")
    produce(kafka_bootstrap, topic, 100, 1)
    strict = base_consumer_config(kafka_bootstrap)
    lenient = base_consumer_config(kafka_bootstrap, auto_offset_reset="earliest")
    assert offsets_read(strict, OffsetRange(topic, 0, 10, 20)) == list(range(10, 20))
    delete_before(kafka_bootstrap, topic, {0: 40})
    with pytest.raises(DataLossError, match=rf"{topic}\[0\].*offset 10 is no longer available"):
        offsets_read(strict, OffsetRange(topic, 0, 10, 60))
    assert offsets_read(lenient, OffsetRange(topic, 0, 10, 60), fail_on_data_loss=False) == list(range(40, 60))
    # Past the end: the partition ends at 100, before the range does.
    with pytest.raises(DataLossError, match=r"ends at 100, before the end of the range"):
        offsets_read(strict, OffsetRange(topic, 0, 90, 110))
    assert offsets_read(strict, OffsetRange(topic, 0, 90, 110), fail_on_data_loss=False) == list(range(90, 100))
    # Wholly beyond the end (truncated after the range was planned): Kafka answers
    # OFFSET_OUT_OF_RANGE; without failOnDataLoss the reset to earliest must not bring records
    # from below the range into it.
    with pytest.raises(DataLossError, match=rf"{topic}\[0\].*offset 500"):
        offsets_read(strict, OffsetRange(topic, 0, 500, 600), timeout_s=2)
    assert offsets_read(lenient, OffsetRange(topic, 0, 500, 600), timeout_s=5, fail_on_data_loss=False) == []


def test_read_gives_up_with_a_clear_error_when_no_broker_answers(new_topic: Callable[..., str]) -> None:
    conf = base_consumer_config(f"127.0.0.1:{free_port()}")
    t0 = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"t\[0\] range \[0, 10\) at offset 0.*pollTimeoutMs"):
        offsets_read(conf, OffsetRange("t", 0, 0, 10), timeout_s=1.5)
    assert time.monotonic() - t0 < 10


def test_read_to_end_reads_a_snapshot(kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    """Every committed record from the earliest offset to each partition's end when the read
    began, over gaps and deleted prefixes; ``upper`` lowers the ends."""
    topic = new_topic(3, "snap")
    plain = produce(kafka_bootstrap, topic, 90, 3)
    tx = produce_transactions(kafka_bootstrap, topic, 3, [(True, 4), (False, 2), (True, 3)])
    delete_before(kafka_bootstrap, topic, {1: 10})
    expected = {c for c in plain | tx.committed if not (c[1] == 1 and c[2] < 10)}
    conf = base_consumer_config(kafka_bootstrap, {"isolation.level": "read_committed"})

    def read(**kw: Any) -> list[tuple[str, int, int]]:
        got = [(m.topic(), m.partition(), m.offset()) for msgs in read_to_end(conf, [topic], timeout_s=10, **kw)
               for m in msgs]
        assert len(got) == len(set(got))
        return got

    assert set(read()) == expected
    assert set(read(upper={TP(topic, 0): 5, TP(topic, 1): 12, TP(topic, 2): 0})) == {
        (topic, 0, o) for o in range(5)} | {(topic, 1, 10), (topic, 1, 11)}
    empty = new_topic(1, "empty")
    assert list(read_to_end(conf, [empty], timeout_s=5)) == []


def test_reader_pickles_without_its_consumer(kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(2, "pickle")
    produce(kafka_bootstrap, topic, 20, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=b"h", partition=0, headers=[("seq", b"1"), ("empty", None)])
    assert producer.flush(30) == 0
    reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic,
                                              "startingOffsets": "earliest", "includeHeaders": "true"},
                                             streaming=True))
    assert reader.initialOffset() == {topic: {"0": 0, "1": 0}}
    assert reader.latestOffset({topic: {"0": 0, "1": 0}}, reader.getDefaultReadLimit()) == {topic: {"0": 11, "1": 10}}
    assert reader._client is not None
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._client is None and reader._client is not None
    parts = reader.partitions({topic: {"0": 0, "1": 5}}, {topic: {"0": 11, "1": 10}})
    batches = [b for p in parts for b in copy.read(p)]
    assert sum(b.num_rows for b in batches) == 16
    assert all(b.schema.equals(arrow_schema(include_headers=True)) for b in batches)
    last = batches[0].to_pylist()[-1]
    assert last["value"] == b"h" and last["headers"] == [{"key": "seq", "value": b"1"}, {"key": "empty", "value": None}]
    assert last["timestampType"] == 0 and last["offset"] == 10
    reader.stop()
    assert reader._client is None


def test_python_source_errors_name_the_cause(spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str],
                                             tmp_path: Path) -> None:
    """The Python source's own messages (Spark's connector words its errors its own way)."""
    topic = new_topic(1, "err")
    produce(kafka_bootstrap, topic, 10, 1)

    def read(topics: str, **opts: str) -> list[Any]:
        return (spark.read.format("rewind_kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
                .option("subscribe", topics).options(**opts).load().collect())

    with pytest.raises(Exception, match=r"requested offset 500 is beyond the partition's end offset 10"):
        read(topic, startingOffsets=json.dumps({topic: {"0": 500}}))
    with pytest.raises(Exception, match=r"topic 'no-such-topic-x' does not exist"):
        read("no-such-topic-x")
    with pytest.raises(Exception, match=r"maxOffsetsPerTrigger.*positive integer"):
        (spark.readStream.format("rewind_kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
         .option("subscribe", topic).option("maxOffsetsPerTrigger", "lots").load())
    # A checkpointed start beyond the end (topic recreated) stops a stream with the numbers.
    df = (spark.readStream.format("rewind_kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("subscribe", topic).option("startingOffsets", json.dumps({topic: {"0": 500}})).load())
    query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception, match=r"requested offset 500 is beyond the partition's end offset 10"):
            query.awaitTermination(120)
    finally:
        query.stop()
    with pytest.raises(Exception, match=r"cannot start beyond the end, even with failOnDataLoss=false"):
        read(topic, startingOffsets=json.dumps({topic: {"0": 500}}), failOnDataLoss="false")


def _librdkafka_line(text: str, level: int = logging.ERROR) -> logging.LogRecord:
    """A log record as confluent-kafka makes it from one of librdkafka's lines."""
    return logging.LogRecord(LOGGER_NAME, level, __file__, 0, "%s [%s] %s",
                             ("FAIL", "rdkafka#consumer-2", text), None)


def test_similar_librdkafka_lines_pass_once_per_window() -> None:
    now = [100.0]
    lines = SimilarLines(window_s=30, clock=lambda: now[0])
    refused = "[thrd:127.0.0.1:{p}/bootstrap]: Connect to ipv4#127.0.0.1:{p} failed: Connection refused " \
              "(after {ms}ms in state CONNECT{more})"
    assert lines.filter(_librdkafka_line(refused.format(p=46775, ms=0, more="")))
    for i in range(1, 11):  # every 50 ms, another port, librdkafka's own count appended
        now[0] += 0.05
        more = f", {i} identical error(s) suppressed" if i % 2 else ""
        assert not lines.filter(_librdkafka_line(refused.format(p=46775 + i % 3, ms=i, more=more)))
    assert lines.filter(_librdkafka_line("1/1 brokers are down"))  # another kind of line
    assert lines.filter(_librdkafka_line(refused.format(p=46775, ms=0, more=""), logging.WARNING))  # another level
    now[0] = 131.0
    shown = _librdkafka_line(refused.format(p=46775, ms=0, more=""))
    assert lines.filter(shown)
    assert shown.getMessage().endswith("Connection refused (after 0ms in state CONNECT) "
                                       "(10 similar line(s) held back in the last 31 s)"), shown.getMessage()
    now[0] += 1
    assert not lines.filter(_librdkafka_line(refused.format(p=46775, ms=0, more="")))
    assert lines.held_back == 11


def test_a_consumer_without_a_broker_logs_a_handful_of_lines(caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka logs a failed connect every 50 ms or so; Rewind's clients route its lines through
    Python logging and hold back the repeats, and their settings still pickle (to executors)."""
    conf = base_consumer_config(f"127.0.0.1:{free_port()}")
    copy = pickle.loads(pickle.dumps(conf))
    assert copy["logger"] is conf["logger"] is librdkafka_logger()
    held = next(f for f in librdkafka_logger().filters if isinstance(f, SimilarLines))
    held_before = held.held_back
    consumer = Consumer(copy)
    consumer.assign([TopicPartition("t", 0, 0)])
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            consumer.consume(num_messages=10, timeout=0.1)
        consumer.close()
    shown = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]
    held_back = held.held_back - held_before
    print(json.dumps({"shown": len(shown), "held_back": held_back, "lines": shown}))
    assert len(shown) <= 5, shown
    assert held_back >= 20, (shown, held_back)  # what librdkafka would have written to stderr
