"""Tiny record batches (a rate-limited producer) read back in full, against the embedded broker (Tansu).

Tansu answers a Fetch when ``fetch.wait.max.ms`` runs out with whatever it gathered by then, and
every Fetch first lists all record-batch objects of the partition in S3. A rate-limited producer
writes one object per few records, so on a partition of a few thousand batches (or a busy machine)
a 50 ms fetch comes back empty again and again (measured: 5,000 one-record batches, 13 records in
10 s at 50 ms, all 2,500 of the range in 4 s at 500 ms). ``iter_range`` raises the fetch wait when
a read yields too little, and the end-offset look-up retries such a partition with a longer wait.
Writing thousands of batches takes minutes, so the tests read a 1,000-record rate-limited topic
for correctness and force the slow paths (every record once across consumer re-creations).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer

from rewind.kafka import client as kafka_client
from rewind.kafka.client import KafkaOffsetClient, base_consumer_config, iter_range
from rewind.kafka.offsets import TP, OffsetRange
from rewind.producer import ProduceSpec, produce

COUNT = 1_000
RATE = 250.0  # events/s: a few records per Kafka record batch and partition (linger.ms=20)


@pytest.fixture(scope="module")
def small_batches(kafka_bootstrap: str) -> tuple[str, dict[int, list[int]]]:
    """A 3-partition topic written by ``rewind produce --rate 250``; its offsets by partition."""
    topic = f"small-{uuid.uuid4().hex[:10]}"
    t0 = time.monotonic()
    report = produce(kafka_bootstrap, ProduceSpec(topic=topic, count=COUNT, rate=RATE, partitions=3),
                     keep_offsets=True)
    offsets: dict[int, list[int]] = {}
    for _, partition, offset in report.delivered:
        offsets.setdefault(partition, []).append(offset)
    for partition in offsets:
        offsets[partition].sort()
        # One idempotent producer, no transactions: offsets are contiguous from 0.
        assert offsets[partition] == list(range(len(offsets[partition])))
    assert sum(len(v) for v in offsets.values()) == COUNT and len(offsets) == 3
    print(f"\nproduced {COUNT} records at {RATE:.0f}/s in {time.monotonic() - t0:.1f}s: "
          f"{ {p: len(v) for p, v in sorted(offsets.items())} }")
    return topic, offsets


@pytest.fixture
def fresh_waits() -> Iterator[None]:
    """Forget the fetch waits partitions needed before (they are per process)."""
    saved = dict(kafka_client._range_waits)
    kafka_client._range_waits.clear()
    yield
    kafka_client._range_waits.clear()
    kafka_client._range_waits.update(saved)


def read_offsets(bootstrap: str, topic: str, partition: int, frm: int, until: int,
                 batch_size: int = 100) -> tuple[list[int], float]:
    t0 = time.monotonic()
    got = [m.offset() for msgs in iter_range(base_consumer_config(bootstrap), OffsetRange(topic, partition, frm, until),
                                             batch_size, 30.0)
           for m in msgs]
    return got, time.monotonic() - t0


def test_iter_range_reads_every_record_of_tiny_batches(kafka_bootstrap: str, small_batches: Any,
                                                       fresh_waits: None) -> None:
    topic, offsets = small_batches
    for partition, expected in sorted(offsets.items()):
        end = len(expected)
        for frm in (0, end // 2):  # from the start, and from the middle of the partition
            got, took = read_offsets(kafka_bootstrap, topic, partition, frm, end)
            print(f"iter_range {topic}[{partition}] [{frm}, {end}): {len(got)} records in {took:.2f}s")
            assert got == list(range(frm, end)), "records missing or read twice"
        # A range ending inside the partition (more records follow it).
        got, _ = read_offsets(kafka_bootstrap, topic, partition, end // 4, end // 2)
        assert got == list(range(end // 4, end // 2))


def test_a_fetch_wait_that_yields_too_little_is_raised_without_losing_records(
        kafka_bootstrap: str, small_batches: Any, fresh_waits: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Force the escalation after every poll that delivered records, in small steps: the consumer is
    recreated at the next offset in the middle of the read many times, and every record still
    arrives exactly once."""
    topic, offsets = small_batches
    partition, expected = max(offsets.items(), key=lambda kv: len(kv[1]))
    end = len(expected)
    monkeypatch.setattr(kafka_client, "_RANGE_WINDOW_S", 0.0)
    monkeypatch.setattr(kafka_client, "_WINDOW_FETCHES", 0)
    monkeypatch.setattr(kafka_client, "_fetch_wait_too_short", lambda records, window_s, wait_ms: records > 0)
    monkeypatch.setattr(kafka_client, "_FETCH_WAIT_STEP", 1.25)   # 50, 62, 77, ... 800 ms
    monkeypatch.setattr(kafka_client, "_MAX_FETCH_WAIT_MS", 800)
    caplog.set_level(logging.INFO, logger="rewind.kafka.client")
    got, took = read_offsets(kafka_bootstrap, topic, partition, 0, end, batch_size=20)
    raised = [r.getMessage() for r in caplog.records if "fetching with" in r.getMessage()]
    print(f"\nforced escalation: {len(got)} records in {took:.2f}s, {len(raised)} consumers re-created; "
          f"last: {raised[-1] if raised else None}")
    assert got == list(range(end)), "records missing or read twice across consumer re-creations"
    assert len(raised) == 13 and raised[-1].endswith("fetching with 800 ms from here")

    # The wait the partition needed is remembered: the next read of it starts there.
    key = (kafka_bootstrap, topic, partition)
    assert kafka_client._range_waits[key] == 800
    got, _ = read_offsets(kafka_bootstrap, topic, partition, end // 2, end)
    assert got == list(range(end // 2, end))


def test_fetch_wait_judgement() -> None:
    too_short = kafka_client._fetch_wait_too_short
    assert too_short(0, 1.0, 50)                 # empty fetches for a second
    assert too_short(100, 1.0, 50)               # 5 records per 50 ms fetch: Tansu listing tiny batches
    assert not too_short(5_000, 1.0, 50)         # 250 per fetch
    assert not too_short(200, 1.0, 800)          # 160 per 800 ms fetch is enough at that wait


def test_spark_batch_read_of_tiny_batches(spark: Any, kafka_bootstrap: str, small_batches: Any) -> None:
    topic, offsets = small_batches
    start = {str(p): len(v) // 3 for p, v in offsets.items()}
    end = {str(p): len(v) for p, v in offsets.items()}
    expected = sorted((p, o) for p, v in offsets.items() for o in v[len(v) // 3:])
    for attempt in ("first (Python workers start)", "second"):
        t0 = time.monotonic()
        rows = (spark.read.format("rewind_kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", json.dumps({topic: start}))
                .option("endingOffsets", json.dumps({topic: end}))
                .load().select("partition", "offset").collect())
        took = time.monotonic() - t0
        got = sorted((r.partition, r.offset) for r in rows)
        print(f"\nSpark batch read, {attempt}: {len(got)} of {len(expected)} records ({start} -> {end}) "
              f"in {took:.2f}s")
        assert got == expected, "rows missing or duplicated"


class _SilentFetches:
    """A look-up consumer that fetches nothing, though its Fetch responses carry a high watermark
    above the position: what Tansu does at a 50 ms wait on a partition of many tiny batches (a
    real one takes minutes to write, so the silence is simulated; everything else is real)."""

    def __init__(self, real: Consumer, high: int) -> None:
        self.real, self.high = real, high

    def assign(self, partitions: Any) -> None:
        pass

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        time.sleep(max(timeout, 0))
        return []

    def get_watermark_offsets(self, partition: Any, timeout: float | None = None, cached: bool = False) -> Any:
        if cached:
            return 0, self.high
        return self.real.get_watermark_offsets(partition, timeout=timeout, cached=False)

    def unassign(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # ListOffsets look-ups, close: the real consumer
        return getattr(self.real, name)


def test_end_offset_look_up_retries_a_partition_it_fetched_nothing_from(
        kafka_bootstrap: str, new_topic: Callable[..., str], caplog: pytest.LogCaptureFixture) -> None:
    """A partition that sends nothing at the look-up's short fetch wait, below the fetched high
    watermark, must not end at its start position (that left the tail of such a partition unread
    until new writes came): it is read again with a longer wait by a consumer of its own."""
    topic = new_topic(1, "slowend")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    for _ in range(15):  # one-record batches
        producer.produce(topic, value=b"x" * 200, partition=0)
        assert producer.flush(30) == 0
    tp = TP(topic, 0)
    client = KafkaOffsetClient(base_consumer_config(kafka_bootstrap), timeout_s=30)
    client._consumer = _SilentFetches(Consumer(client.config), high=15)  # type: ignore[assignment]
    caplog.set_level(logging.INFO, logger="rewind.kafka.client")
    try:
        t0 = time.monotonic()
        ends = client.end_offsets([tp])
        took = time.monotonic() - t0
    finally:
        client.close()
    retried = [r.getMessage() for r in caplog.records if "retrying with" in r.getMessage()]
    print(f"\nend offset {ends} in {took:.2f}s; {retried}")
    assert ends == {tp: 15}
    assert retried and "fetch.wait.max.ms=1000" in retried[0]
