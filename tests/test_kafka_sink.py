"""The transactional Kafka sink on the embedded Apache Kafka: the sink contract, zombie fencing,
a driver killed between pre-commit and commit, oversized records, options refused at load.

Every test gets its own topic prefix, so topics never mix; the tables are those of test_sink
(events, dead letters, window results) and a ``latest`` table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from harness.sink_data import DEAD_LETTER, MONEY, STATE, TABLES, check_money, dead_letters, events, money_rows, windows

from rewind.api.tables import LEDGER_TABLE, Column, TableSpec
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.registry import RegistryError, load_registry
from rewind.sink.errors import SinkRefused, SinkWriteError
from rewind.sink.kafka import TransactionalKafkaSink
from rewind.sink.kafka_target import KafkaSinkTarget, parse_kafka_sink


@pytest.fixture
def make_sink(kafka_bootstrap: str) -> Iterator[Callable[..., TransactionalKafkaSink]]:
    prefix = f"ks{uuid.uuid4().hex[:8]}."
    made: list[TransactionalKafkaSink] = []

    def make(stream: str = "orders", tables: tuple[TableSpec, ...] = TABLES, table_prefix: str = "",
             **target: Any) -> TransactionalKafkaSink:
        sink = TransactionalKafkaSink(KafkaSinkTarget(kafka_bootstrap, prefix, **target), stream, tables,
                                      table_prefix=table_prefix, dead_letter_table="dead_letter")
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.dispose()


def ends(bootstrap: str, topic: str, isolation: str) -> dict[Any, int]:
    with KafkaOffsetClient({"bootstrap.servers": bootstrap, "group.id": "t", "isolation.level": isolation}) as c:
        return c.end_offsets(c.partitions([topic]))


# --------------------------------------------------------------------------- the contract
def test_batch_written_once_skipped_on_rerun_and_rewritten_when_replanned(make_sink: Any) -> None:
    sink = make_sink()
    batch = {"events": events(0, 300, batch_id=7), "dead_letter": dead_letters(1000, 3),
             "window_results": windows(["a", "b"], 5)}
    first = sink.write_batch(7, batch, '{"orders":{"0":300}}')
    assert not first.skipped and first.rows == {"events": 300, "dead_letter": 3, "window_results": 2}
    before = {name: sink.read_table(name) for name in sink.specs}
    assert len(before["events"]) == 300 and before["events"]["offset"].is_unique

    # Spark re-runs the batch after a crash, maybe with other rows: skipped, nothing changes.
    again = sink.write_batch(7, {"events": events(0, 350, batch_id=7, value=b"other")}, '{"orders":{"0":300}}')
    assert again.skipped
    # A new sink object (a restarted driver) knows the ledger from the topic.
    restarted = make_sink()
    assert restarted.write_batch(7, batch, '{"orders":{"0":300}}').skipped
    for name, df in before.items():
        pd.testing.assert_frame_equal(restarted.read_table(name), df)
    assert restarted.committed_batch_ids() == [7]

    # Re-planned (a restore moved the range): written again, the old keys of the ignore table not repeated.
    wider = restarted.write_batch(7, {"events": events(0, 320, batch_id=7)}, '{"orders":{"0":320}}')
    assert wider.replanned and not wider.skipped
    topic = restarted.table_name("events")
    raw = sum(ends(restarted.bootstrap, topic, "read_committed").values())
    assert len(restarted.read_table("events")) == 320
    # 300 + 20 new records, plus one commit marker per partition per transaction (2 transactions x 3)
    assert raw == 320 + 6, f"the events topic holds each key once: {raw}"
    ledger = restarted.read_table(LEDGER_TABLE)
    assert ledger[["stream", "batch_id"]].values.tolist() == [["orders", 7]]
    assert ledger["source_offsets"].tolist() == ['{"orders":{"0":320}}']


def test_conflict_rules_read_back_like_the_sql_sink(make_sink: Any) -> None:
    sink = make_sink(tables=(*TABLES, STATE))
    sink.write_batch(1, {"events": events(0, 5, value=b"first"), "window_results": windows(["a", "b"], 1)})
    sink.write_batch(2, {"events": events(3, 5, value=b"second"), "window_results": windows(["b", "c"], 2)})
    rows = [{"sku": f"s{i % 7}", "qty": i, "version": i} for i in range(60)]
    sink.write_batch(3, {"stock": list(reversed(rows[30:]))})
    sink.write_rows({"stock": rows[:30]}, replay_id="old-range")
    ev = sink.read_table("events")
    assert ev["offset"].tolist() == [0, 3, 6, 1, 4, 7, 2, 5]  # ordered by key, like every sink
    assert dict(zip(ev["offset"], ev["value"])) == {i: b"first" if i < 5 else b"second" for i in range(8)}
    win = sink.read_table("window_results")
    assert dict(zip(win["user"], win["count"])) == {"a": 1, "b": 2, "c": 2}
    stock = sink.read_table("stock")
    assert dict(zip(stock["sku"], stock["version"])) == {f"s{k}": max(i for i in range(60) if i % 7 == k)
                                                         for k in range(7)}
    assert str(ev["partition"].dtype) == "Int64" and str(win["window_start"].dtype) == "datetime64[ns, UTC]"
    assert sink.column_max("events", "offset") == 7
    got = sink.read_rows("events", lambda t: t.c.offset >= 6, ["offset", "value"])
    assert got["offset"].tolist() == [6, 7] and list(got.columns) == ["offset", "value"]


def test_replay_rows_are_idempotent_and_do_not_fence_the_live_writer(make_sink: Any) -> None:
    sink = make_sink()
    sink.write_batch(0, {"events": events(0, 50)})
    inserted: dict[str, int] = {}
    assert sink.write_rows({"events": events(25, 50), "dead_letter": dead_letters(0, 4)}, replay_id="r-1",
                           inserted=inserted) == {"events": 50, "dead_letter": 4}
    assert inserted == {"events": 25, "dead_letter": 4}
    sink.write_rows({"events": events(25, 50)}, replay_id="r-1", inserted=inserted)
    assert inserted["events"] == 0
    assert len(sink.read_table("events")) == 75 and sink.committed_batch_ids() == [0]
    assert not sink.write_batch(1, {"events": events(75, 5)}).skipped, "the live writer still commits"


def test_table_prefix_keeps_a_shadow_apart(make_sink: Any) -> None:
    live, shadow = make_sink(), make_sink(table_prefix="shadow_r1_")
    assert shadow.table_name("events").endswith("shadow_r1_events") and shadow.transactional_id != live.transactional_id
    live.write_batch(0, {"events": events(0, 10)})
    assert not shadow.write_batch(0, {"events": events(0, 3)}).skipped
    assert len(live.read_table("events")) == 10 and len(shadow.read_table("events")) == 3


def test_fresh_sink_reads_empty_and_bad_rows_are_refused_before_anything_is_sent(make_sink: Any) -> None:
    sink = make_sink()
    assert sink.read_table("events").empty and sink.committed_batch_ids() == []
    with pytest.raises(SinkRefused, match="unknown column"):
        sink.write_batch(0, {"events": [{"topic": "orders", "partition": 0, "offset": 1, "nope": 1}]})
    with pytest.raises(SinkRefused, match="batch_id"):
        sink.write_batch(-1, {})
    assert sink.committed_batch_ids() == [] and sink.read_table(LEDGER_TABLE).empty


def test_decimals_bigints_and_microseconds_round_trip_exactly(make_sink: Any) -> None:
    """In the topic a decimal is a JSON string at its scale, a bigint a JSON integer (exact past 2**53), a
    time RFC 3339 at microseconds; read back, every value is what was written (``check_money``)."""
    import json
    from decimal import Decimal

    from rewind.kafka.reader import read_to_end

    sink = make_sink(stream="money", tables=(MONEY,))
    sink.write_batch(0, {"money": money_rows()})
    check_money(sink.read_table("money"))
    config = {"bootstrap.servers": sink.bootstrap, "group.id": "t", "isolation.level": "read_committed"}
    raw = {m.key(): m.value() for msgs in read_to_end(config, [sink.table_name("money")]) for m in msgs}
    assert raw[b"[9007199254740993]"] == (b'{"id":9007199254740993,"fee":"9999999999999999.99","amount":'
                                          b'"9999999999999999999999999999.9999999999","at":"2024-05-01T10:00:00.000001Z",'
                                          b'"rate":0.1}')
    assert json.loads(raw[b"[7]"])["amount"] == "0.0000000001"
    with pytest.raises(SinkRefused, match=r"'money', column 'fee': .*more than 16 digits before"):
        sink.write_batch(1, {"money": [{"id": 1, "fee": Decimal("12345678901234567")}]})
    assert sink.committed_batch_ids() == [0]


# --------------------------------------------------------------------------- fencing and crashes
def test_a_zombie_writer_is_fenced_by_its_restarted_driver(make_sink: Any) -> None:
    zombie = make_sink()
    zombie.write_batch(0, {"events": events(0, 10)})
    restarted = make_sink()
    assert restarted.write_batch(0, {"events": events(0, 10)}).skipped  # init_transactions fenced the zombie
    with pytest.raises(SinkWriteError, match="fenced"):
        zombie.write_batch(1, {"events": events(10, 10)})
    assert not restarted.write_batch(1, {"events": events(10, 10)}).skipped
    assert len(restarted.read_table("events")) == 20


# --------------------------------------------------------------------------- bad input
def test_a_row_too_large_for_kafka_becomes_a_dead_letter_and_the_batch_commits(make_sink: Any) -> None:
    sink = make_sink(client={"message.max.bytes": "20000"})
    batch = events(0, 20)
    batch[7]["value"] = b"x" * 30_000
    result = sink.write_batch(0, {"events": batch})
    assert not result.skipped
    ev, dead = sink.read_table("events"), sink.read_table("dead_letter")
    assert sorted(ev["offset"]) == [i for i in range(20) if i != 7]
    assert dead["offset"].tolist() == [7] and dead["error"].isna().all()  # test_sink's table: no 'reason' column
    too_big = windows(["u" * 30_000], 1)
    with pytest.raises(SinkRefused, match="no Kafka coordinates"):
        sink.write_batch(1, {"window_results": too_big})
    assert sink.committed_batch_ids() == [0]


def test_dead_letter_reason_names_the_size_and_the_setting(make_sink: Any) -> None:
    dead = TableSpec("dead_letter", (*DEAD_LETTER.columns, Column("reason", "string")), DEAD_LETTER.key, "ignore")
    sink = make_sink(tables=(TABLES[0], dead), client={"message.max.bytes": "5000"})
    batch = events(0, 3)
    batch[1]["value"] = b"y" * 6000
    sink.write_batch(0, {"events": batch})
    reason = sink.read_table("dead_letter")["reason"].tolist()
    assert len(reason) == 1 and reason[0].startswith("too_large_for_kafka") and "kafka.message.max.bytes" in reason[0]


@pytest.mark.parametrize("options, says", [
    ({"kafka.enable.idempotence": "false"}, "kafka.enable.idempotence=false"),
    ({"kafka.transactional.id": "mine"}, "derives the transactional id"),
    ({"kafka.acks": "1"}, "acks=all"),
    ({"kafka.isolation.level": "read_uncommitted"}, "read_committed"),
    ({"topic.partitions": "0"}, "positive integer"),
    ({"linger": "5"}, "unknown sink option 'linger'"),
])
def test_options_that_break_exactly_once_are_refused_at_registry_load(tmp_path: Path, options: dict[str, str],
                                                                       says: str) -> None:
    opts = ", ".join(f"{k}: '{v}'" for k, v in options.items())
    path = tmp_path / "streams.yaml"
    path.write_text("streams:\n  s:\n    topics: [t]\n    transform: rewind.demo.transform:DemoTransform\n"
                    f"    sink: {{url: 'kafka://localhost:9092/out.', options: {{{opts}}}}}\n"
                    f"    checkpoint: {tmp_path}/cp\n    status_dir: {tmp_path}/st\n")
    with pytest.raises(RegistryError) as err:
        load_registry(path)
    assert says in str(err.value) and "s" in str(err.value)


def test_sink_urls_parse_or_say_what_is_wrong() -> None:
    t = parse_kafka_sink("kafka://a:9092,b:9093/out.", {"kafka.security.protocol": "SASL_PLAINTEXT",
                                                         "topic.partitions": "6"})
    assert (t.bootstrap, t.topic_prefix, t.partitions, t.client) == ("a:9092,b:9093", "out.", 6,
                                                                     {"security.protocol": "SASL_PLAINTEXT"})
    assert parse_kafka_sink("kafka://").bootstrap is None  # the platform's Kafka
    for bad, says in [("kafka://u:p@a:1", "credentials"), ("kafka://a/x", "HOST:PORT"),
                      ("kafka://a:1/bad prefix", "topic prefix"), ("kafka://a:1?acks=1", "options")]:
        with pytest.raises(SinkRefused, match=says):
            parse_kafka_sink(bad)
