"""The real-time sink's JVM writer (``io.rewind.rtm.JdbcRealTimeWriter``) driven directly, in seconds.

The end-to-end tests (test_realtime.py) kill and pause real drivers; a paused driver there is stopped by its
lease keeper before its writers reach the sink, so the fence in the writer's own transaction is proven here:
a writer of an older lease epoch commits nothing. Also: a record written twice (re-read after a crash) leaves
one row, values are stored as the Python SQL sink stores them (exact decimals, UTC times), and the ledger row
of a closed epoch holds its end offsets.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pytest

from rewind.api.tables import Column, TableSpec
from rewind.driver.realtime import jdbc_url, writer_plan
from rewind.sink.sql import ExactlyOnceSqlSink
from rewind.sink.sql_fence import FENCE_TABLE
from rewind.sink.sql_realtime import create_ledger

ROWS = TableSpec("pay", (Column("id", "string", False), Column("amount", "decimal(38,2)"),
                         Column("at", "timestamp"), Column("topic", "string"), Column("partition", "int"),
                         Column("offset", "bigint"), Column("batch_id", "bigint")), key=("id",), on_conflict="ignore")
DEAD = TableSpec("dead_letter", (Column("topic", "string", False), Column("partition", "int", False),
                                 Column("offset", "bigint", False), Column("reason", "string", False),
                                 Column("batch_id", "bigint")), key=("topic", "partition", "offset"),
                 on_conflict="ignore")
SCHEMA = ("id STRING, amount DECIMAL(38,2), at TIMESTAMP, topic STRING, partition INT, offset BIGINT, "
          "reason STRING, kind STRING")
BIG = decimal.Decimal("123456789012345678901234567890123456.78")  # 38 digits: no double holds it


class _Kinds:
    kinds = {"ok": "pay", "bad": "dead_letter"}


@pytest.fixture
def sink(db_url: str) -> ExactlyOnceSqlSink:
    """The SQL sink's tables and the real-time ledger, in SQLite and in PostgreSQL."""
    sink = ExactlyOnceSqlSink(db_url, "rt", (ROWS, DEAD), table_prefix="s_")
    sink.create_tables()
    create_ledger(sink)
    return sink


def _rows(spark: Any, values: list[tuple[Any, ...]]) -> list[Any]:
    """Rows with a schema, as Spark hands them to a ForeachWriter."""
    frame = spark.createDataFrame(values, SCHEMA)
    return list(frame._jdf.collectAsList())


def _write(spark: Any, sink: ExactlyOnceSqlSink, lease: int, epoch: int, rows: list[Any], partition: int = 0) -> None:
    writer = spark._jvm.io.rewind.rtm.JdbcRealTimeWriter(
        jdbc_url(sink.engine.url.render_as_string(hide_password=False)), "rt", lease, "s_" + FENCE_TABLE,
        "s_rewind_rtm_epochs", writer_plan(sink, _Kinds()), 60_000)  # no timer flush in a test: close() commits
    writer.open(partition, epoch)
    for row in rows:
        writer.process(row)
    writer.close(None)


def test_rows_land_once_exactly_and_the_ledger_holds_the_end_offsets(spark: Any, sink: ExactlyOnceSqlSink) -> None:
    at = dt.datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=dt.UTC)
    rows = _rows(spark, [("a", BIG, at, "t", 0, 7, None, "ok"),
                         ("b", decimal.Decimal("-0.01"), at, "t", 0, 9, None, "ok"),
                         (None, None, None, "t", 0, 8, "malformed", "bad")])
    sink.fence(1)
    _write(spark, sink, 1, 4, rows)
    _write(spark, sink, 1, 5, rows)  # the same records re-read after a crash, in the next epoch
    pay = sink.read_table("pay").sort_values("id").reset_index(drop=True)
    assert list(pay["id"]) == ["a", "b"] and list(pay["amount"]) == [BIG, decimal.Decimal("-0.01")]
    assert list(pay["batch_id"]) == [4, 4], "a re-read record rewrote its row"
    assert pd_time(pay["at"][0]) == at
    dead = sink.read_table("dead_letter")
    assert dead[["topic", "partition", "offset", "reason"]].values.tolist() == [["t", 0, 8, "malformed"]]
    ledger = _query(sink, "SELECT epoch, spark_partition, lease_epoch, rows_written, end_offsets "
                          "FROM s_rewind_rtm_epochs ORDER BY epoch")
    assert [(e, p, lease, n, json.loads(o)) for e, p, lease, n, o in ledger] == [
        (4, 0, 1, 3, {"t/0": 10}), (5, 0, 1, 3, {"t/0": 10})]


def test_a_writer_of_an_older_lease_epoch_commits_nothing(spark: Any, sink: ExactlyOnceSqlSink) -> None:
    sink.fence(3)  # a newer driver took the stream over
    rows = _rows(spark, [("z", decimal.Decimal("1.00"), None, "t", 1, 5, None, "ok")])
    with pytest.raises(Exception, match=r"lease epoch 2, and epoch 3 has taken the stream over"):
        _write(spark, sink, 2, 9, rows, partition=1)
    assert sink.read_table("pay").empty
    assert _query(sink, "SELECT COUNT(*) FROM s_rewind_rtm_epochs") == [(0,)]
    assert _query(sink, "SELECT epoch FROM s_rewind_epochs") == [(3,)]
    _write(spark, sink, 3, 9, rows, partition=1)  # the holder writes
    assert list(sink.read_table("pay")["id"]) == ["z"]


def _query(sink: ExactlyOnceSqlSink, sql: str) -> list[tuple[Any, ...]]:
    import sqlalchemy as sa

    with sink.engine.connect() as con:
        return [tuple(r) for r in con.execute(sa.text(sql))]


def pd_time(value: Any) -> dt.datetime:
    import pandas as pd

    return pd.Timestamp(value).tz_convert("UTC").to_pydatetime() if pd.Timestamp(value).tzinfo else \
        pd.Timestamp(value).tz_localize("UTC").to_pydatetime()
