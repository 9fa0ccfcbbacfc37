"""Spark's real-time mode into the transactional Kafka sink (``io.rewind.rtm.KafkaRealTimeWriter``, issue 38).

Fast: the plan's encoding of each row is the micro-batch sink's (``rewind.sink.kafka_codec``), byte for byte
for keys; and the writer driven directly: a record re-read after a crash is skipped, a driver whose producer
was taken over commits nothing, and a driver of an older lease refuses to start its producer.

Slow: the scaffold's stream into a Kafka sink under a continuous producer, SIGKILLed mid-epoch twice; then a
read_committed consumer of the output topics finds every input offset exactly once (a row or a dead letter)
and ``rewind verify`` passes.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rewind.sink.convert import prepare_table
from rewind.sink.kafka import TOO_LARGE, TransactionalKafkaSink
from rewind.sink.kafka_codec import decode_value, encode_table
from rewind.sink.kafka_realtime import (
    client_lines,
    encoded_frame,
    fence,
    ledger_topic,
    read_epochs,
    record_limit,
    transactional_prefix,
)
from rewind.sink.kafka_target import parse_kafka_sink
from tests.test_realtime import Producer, RealTimeStream, _wait
from tests.test_realtime_writer import DEAD, ROWS, SCHEMA, _Kinds

KINDS = {**_Kinds.kinds, "pay": "pay", "dead_letter": "dead_letter"}
AT = dt.datetime(2026, 11, 29, 12, 0, 0, 1, tzinfo=dt.UTC)


def _sink(bootstrap: str, prefix: str, stream: str = "rtk") -> TransactionalKafkaSink:
    return TransactionalKafkaSink(parse_kafka_sink(f"kafka://{bootstrap}/{prefix}"), stream, (ROWS, DEAD),
                                  table_prefix="s_", dead_letter_table="dead_letter")


VALUES = [("a\u00e9\"\\/\n", decimal.Decimal("12.30"), AT, "in", 0, 0, None, "ok"),
          ("b", None, None, "in", 0, 1, None, "ok"),
          (None, None, None, "in", 1, 7, "malformed", "bad")]


def test_the_plan_encodes_rows_as_the_micro_batch_sink(spark: Any) -> None:
    sink = _sink("localhost:1", "enc.")
    frame = encoded_frame(spark.createDataFrame(VALUES, SCHEMA), sink, KINDS)
    got = [(r["rewind_topic"], r["rewind_key"].encode(), r["rewind_value"]) for r in frame.collect()]
    assert [t for t, _, _ in got] == ["enc.s_pay", "enc.s_pay", "enc.s_dead_letter"]
    pay = prepare_table(ROWS, [dict(zip(("id", "amount", "at", "topic", "partition", "offset"), v[:6]), batch_id=3)
                               for v in VALUES[:2]], sqlite_text=False)
    dead = prepare_table(DEAD, [{"topic": "in", "partition": 1, "offset": 7, "reason": "malformed", "batch_id": 3}],
                         sqlite_text=False)
    expected = list(encode_table(pay)) + list(encode_table(dead))
    for (_, key, value), (want_key, want_value), spec in zip(got, expected, (ROWS, ROWS, DEAD)):
        assert key == want_key  # byte for byte: a replay compares keys as bytes
        row = json.loads(value)
        row["batch_id"] = 3  # the JVM writer adds the epoch
        assert decode_value(spec, json.dumps(row).encode()) == decode_value(spec, want_value)


def test_a_record_too_large_for_kafka_is_its_dead_letter_or_fails_naming_the_setting(spark: Any) -> None:
    """As in the micro-batch sink: the row's dead letter (its coordinates, the reason with the size), keyed byte
    for byte as that sink keys it; a dead letter itself too large, or a row without coordinates, fails the task."""
    sink = TransactionalKafkaSink(parse_kafka_sink("kafka://localhost:1/big.", {"kafka.message.max.bytes": "1500"}),
                                  "rtk", (ROWS, DEAD), table_prefix="s_", dead_letter_table="dead_letter")
    limit = record_limit(sink)
    assert 0 < limit < sink.target.max_record_bytes
    fits, big = "f" * ((limit - 120) // 2), "b" * (limit // 2)  # the id is in the key and in the value
    values = [(fits, None, None, "in", 0, 0, None, "ok"), (big, None, None, "in", 0, 1, None, "ok"),
              ("c", None, None, "in", 2, 9, None, "ok")]
    got = [(r["rewind_topic"], r["rewind_key"].encode(), r["rewind_value"])
           for r in encoded_frame(spark.createDataFrame(values, SCHEMA), sink, KINDS).collect()]
    assert [t for t, _, _ in got] == ["big.s_pay", "big.s_dead_letter", "big.s_pay"]
    assert all(len(k) + len(v.encode()) <= limit for _, k, v in got)
    dead = json.loads(got[1][2])
    ((want_key, _),) = encode_table(prepare_table(DEAD, [{"topic": "in", "partition": 0, "offset": 1, "reason": "x"}],
                                                  sqlite_text=False))
    assert got[1][1] == want_key and (dead["topic"], dead["partition"], dead["offset"]) == ("in", 0, 1)
    assert dead["reason"].startswith(f"{TOO_LARGE}: a row of table 'pay' is ") and f"({limit})" in dead["reason"]
    assert json.loads(got[0][2])["id"] == fits and len(got[0][1]) + len(got[0][2]) > limit - 60

    for bad in [(None, None, None, "in", 1, 7, big * 3, "bad"),  # a dead letter itself too large
                (big, None, None, None, 0, 3, None, "ok")]:  # no coordinates to dead-letter it by
        with pytest.raises(Exception, match=r"kafka\.message\.max\.bytes"):
            encoded_frame(spark.createDataFrame([bad], SCHEMA), sink, KINDS).collect()


def test_the_java_client_gets_its_own_name_for_the_record_limit() -> None:
    sink = _sink("localhost:1", "x.")
    assert client_lines(sink) == ""
    sink = TransactionalKafkaSink(parse_kafka_sink("kafka://localhost:1/x.", {"kafka.message.max.bytes": "2000000",
                                                                                "kafka.linger.ms": "5"}),
                                  "rtk", (ROWS, DEAD), table_prefix="s_", dead_letter_table="dead_letter")
    assert sorted(client_lines(sink).splitlines()) == ["linger.ms=5", "max.request.size=2000000"]


def _committed(bootstrap: str, topics: list[str]) -> list[tuple[str, bytes, bytes]]:
    """Every record of ``topics`` a read_committed consumer sees."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rtk-check", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out: list[tuple[str, bytes, bytes]] = []
    try:
        tps = [TopicPartition(t, p) for t in topics for p in c.list_topics(t, timeout=10).topics[t].partitions]
        ends = {(tp.topic, tp.partition): c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        todo = {k for k, end in ends.items() if end > 0}
        c.assign([TopicPartition(t, p, 0) for t, p in ends])
        deadline = time.monotonic() + 30
        while todo and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                todo.discard((m.topic(), m.partition()))  # end of partition (read_committed: its last stable offset)
                continue
            out.append((m.topic(), m.key(), m.value()))
    finally:
        c.close()
    return out


def _writer(spark: Any, sink: TransactionalKafkaSink, lease: int) -> Any:
    with_batch = f"{sink.table_name('pay')},{sink.table_name('dead_letter')}"
    return spark._jvm.io.rewind.rtm.KafkaRealTimeWriter(
        sink.bootstrap, "", sink.stream, lease, transactional_prefix(sink), ledger_topic(sink),
        with_batch, 0, 15_000)  # no timer: close() commits


def _rows(spark: Any, sink: TransactionalKafkaSink, values: list[tuple[Any, ...]]) -> list[Any]:
    return list(encoded_frame(spark.createDataFrame(values, SCHEMA), sink, KINDS)._jdf.collectAsList())


def test_a_re_read_record_is_skipped_and_a_taken_over_driver_commits_nothing(spark: Any, kafka_bootstrap: str,
                                                                             new_topic: Any) -> None:
    prefix = new_topic(1) + "."
    sink = _sink(kafka_bootstrap, prefix)
    sink.create_tables()
    fence(sink, 1, 1)
    one, two, three = [(f"r{i}", None, AT, "in", 0, i, None, "ok") for i in range(3)]
    first = _writer(spark, sink, 1)
    first.open(0, 0)
    for row in _rows(spark, sink, [one, two]):
        first.process(row)
    first.close(None)

    zombie = _writer(spark, sink, 1)  # epoch 1 of the first driver: rows buffered, not committed yet
    zombie.open(0, 1)
    for row in _rows(spark, sink, [three]):
        zombie.process(row)
    fence(sink, 2, 1)  # a second driver starts: its fence record, then partition 0's producer
    with pytest.raises(Exception, match="this driver is fenced"):
        zombie.close(None)
    with pytest.raises(Exception, match="this driver is fenced"):
        _writer(spark, sink, 1).open(0, 2)  # the old driver's next epoch refuses to start

    second = _writer(spark, sink, 2)  # the new driver runs epoch 1 again from epoch 0's end... and from 0
    second.open(0, 1)
    for row in _rows(spark, sink, [one, two, three]):
        second.process(row)
    second.close(None)

    records = _committed(kafka_bootstrap, [sink.table_name("pay")])
    assert sorted(json.loads(v)["id"] for _, _, v in records) == ["r0", "r1", "r2"], records
    assert [json.loads(v)["batch_id"] for _, _, v in records if json.loads(v)["id"] == "r2"] == [1]
    epochs = {(e["epoch"], e["lease_epoch"]): e for e in read_epochs(sink)}
    assert set(epochs) == {(0, 1), (1, 2)}, epochs  # the zombie's epoch 1 left nothing
    assert epochs[(1, 2)]["rows_skipped"] == 2 and epochs[(1, 2)]["end_offsets"] == {"in/0": 3}


# --------------------------------------------------------------------------- slow: the real platform

class KafkaSinkStream(RealTimeStream):
    """test_realtime's stream with its sink moved to the platform's Kafka."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        registry = yaml.safe_load((self.cwd / "streams.yaml").read_text())
        self.prefix = f"{self.topic}.out."
        # rows of a 3,000-character id are above this: dead letters too_large_for_kafka, which the proof accepts
        registry["streams"][self.name]["sink"] = {"url": f"kafka:///{self.prefix}",
                                                  "options": {"kafka.message.max.bytes": "6000"}}
        (self.cwd / "streams.yaml").write_text(yaml.safe_dump(registry))
        self.sink = TransactionalKafkaSink(parse_kafka_sink(f"kafka://{self.platform.kafka_bootstrap}/{self.prefix}"),
                                           self.name, (ROWS,))  # only its names are used
        self.topics = [f"{self.prefix}{self.name}_rows", f"{self.prefix}{self.name}_dead_letter"]

    def written(self) -> int:
        try:
            return len(_committed(self.platform.kafka_bootstrap, self.topics))
        except Exception:  # noqa: BLE001 - the topics are not there yet
            return 0

    def closed_by(self, lease: int) -> bool:
        try:
            return any(e["closed"] and e["lease_epoch"] == lease for e in read_epochs(self.sink))
        except Exception:  # noqa: BLE001 - not there yet
            return False

    def check_exactly_once(self, producer: Producer) -> dict[str, Any]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.platform.kafka_bootstrap, "group.id": "rtk-check"})
        ends = {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1] for p in (0, 1)}
        consumer.close()
        records = _committed(self.platform.kafka_bootstrap, self.topics)
        values = [json.loads(v) for _, _, v in records]
        coords = [(v["topic"], v["partition"], v["offset"]) for v in values]
        assert len(coords) == len(set(coords)), "an offset is in the sink twice"
        expected = {(self.topic, p, o) for p, end in ends.items() for o in range(end)}
        assert sum(ends.values()) == producer.sent
        assert set(coords) == expected, (f"missing {sorted(expected - set(coords))[:10]}, "
                                         f"unexpected {sorted(set(coords) - expected)[:10]}")
        rows = {v["id"]: v["value"] for (topic, _, _), v in zip(records, values) if topic == self.topics[0]}
        assert rows == {k: v for k, v in producer.values.items() if k not in producer.big}
        dead = [v for (topic, _, _), v in zip(records, values) if topic == self.topics[1]]
        too_large = [v for v in dead if v["reason"].startswith("too_large_for_kafka")]
        assert producer.big and len(too_large) == len(producer.big), (len(producer.big), too_large[:2])
        assert {v["reason"] for v in dead} - {v["reason"] for v in too_large} == {"malformed"}
        epochs = read_epochs(self.sink)
        print(json.dumps({"records": producer.sent, "rows": len(rows), "dead": len(values) - len(rows),
                          "ledger": len(epochs)}))
        return {"ledger": epochs}


@pytest.mark.slow
def test_a_real_time_stream_into_kafka_loses_and_repeats_nothing_through_sigkills(
        tmp_path: Path, platform: Any, new_topic: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()
    stream = KafkaSinkStream(tmp_path, platform, new_topic(2), monkeypatch)
    producer = Producer(platform.kafka_bootstrap, stream.topic, big_every=251)
    producer.start()
    driver = stream.launch()
    kills = 2
    try:
        for kill in range(kills):
            # an epoch closed by this driver, then records of the next one committed: killed mid-epoch
            _wait(lambda lease=kill + 1: stream.closed_by(lease), 240, f"an epoch closed by driver {kill + 1}",
                  stream.log, driver)
            before = stream.written()
            _wait(lambda before=before: stream.written() >= before + 200, 60, f"rows of driver {kill + 1}",
                  stream.log, driver)
            os.killpg(driver.pid, signal.SIGKILL)  # the producer never pauses
            driver.wait(30)
            driver = stream.launch()
        _wait(lambda: stream.closed_by(kills + 1), 240, f"an epoch closed by driver {kills + 1}", stream.log, driver)
    finally:
        stream.finish(producer, driver)
    ledger = stream.check_exactly_once(producer)["ledger"]
    assert {e["lease_epoch"] for e in ledger} == set(range(1, kills + 2)), ledger
    assert sum(e["rows_skipped"] for e in ledger) > 0, "no record was read again after a kill"
    proved = stream.verify()
    assert proved["ok"] is True and proved["records_in_range"] >= 3_000, proved
    assert proved["rows_ok"] == proved["records_in_range"] and proved["landed_missing"] == 0, proved
    assert proved["landed_too_large"] > 0, proved  # the oversized records, proven as dead letters
    print(f"wall {time.monotonic() - t0:.1f}s")
