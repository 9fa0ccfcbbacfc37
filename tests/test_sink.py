"""The exactly-once SQL sink, on a SQLite file and on a real PostgreSQL server.

Every behaviour test runs on both backends (`db_url` is parametrized); the
PostgreSQL ones carry the `postgres` marker and use a throwaway server started
by `tests.harness.pg.LocalPostgres` (or the server named by $REWIND_POSTGRES_URL), one
fresh database per test.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
import pytest
from harness.sink_data import (
    EVENTS,
    MONEY,
    STATE,
    T0,
    TABLES,
    check_money,
    counts,
    dead_letters,
    events,
    money_rows,
    windows,
)

from rewind.api.tables import LEDGER_TABLE, Column, TableSpec
from rewind.errors import EXIT_FAILED, EXIT_REFUSED, Failed, Refused, exit_code_of
from rewind.sink import contract
from rewind.sink.contract import BatchResult, Sink
from rewind.sink.errors import SinkConnectionError, SinkError, SinkRefused, SinkWriteError
from rewind.sink.sql import ExactlyOnceSqlSink
from tests.harness.pg import LocalPostgres
from tests.harness.pg_install import postgres_available


# --------------------------------------------------------------------------- fixtures
@pytest.fixture
def make_sink(db_url: str) -> Iterator[Any]:
    """Factory of sinks on `db_url`, all disposed at the end."""
    made: list[ExactlyOnceSqlSink] = []

    def make(stream: str = "orders", tables: tuple[TableSpec, ...] = TABLES, prefix: str = "") -> ExactlyOnceSqlSink:
        sink = ExactlyOnceSqlSink(db_url, stream, tables, table_prefix=prefix)
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.dispose()


# --------------------------------------------------------------------------- exactly-once
def test_same_batch_twice_is_skipped_and_changes_nothing(make_sink: Any) -> None:
    sink = make_sink()
    batch = {"events": events(0, 100, batch_id=7), "dead_letter": dead_letters(1000, 3),
             "window_results": windows(["a", "b"], 5)}

    first = sink.write_batch(7, batch)
    assert first == BatchResult(7, False, {"events": 100, "dead_letter": 3, "window_results": 2}, first.seconds)
    before = {name: sink.read_table(name) for name in sink.specs}

    # Spark re-runs the batch after a crash: possibly with other rows (non-deterministic transform).
    again = sink.write_batch(7, {"events": events(0, 150, batch_id=7, value=b"other"),
                                 "window_results": windows(["a"], 99)})
    assert again.skipped and again.rows == {"events": 0, "window_results": 0}
    for name, df in before.items():
        pd.testing.assert_frame_equal(sink.read_table(name), df)

    ledger = sink.read_table(LEDGER_TABLE)
    assert ledger[["stream", "batch_id"]].values.tolist() == [["orders", 7]]
    assert ledger["committed_at"].dt.tz is not None
    assert sink.committed_batch_ids() == [7] and sink.last_committed_batch() == 7

    # The ledger is per stream: another stream's batch 7 is its own batch.
    other = make_sink(stream="payments")
    assert not other.write_batch(7, {"dead_letter": dead_letters(5000, 1)}).skipped
    assert other.committed_batch_ids() == [7] and sink.committed_batch_ids() == [7]


def test_batch_replanned_with_other_offsets_is_written_not_skipped(make_sink: Any) -> None:
    """After a repair or restore rolls the query back, Spark re-plans a committed batch id with a
    different Kafka range: skipping it would lose the records only the new plan holds."""
    sink = make_sink()
    assert not sink.write_batch(3, {"events": events(0, 10, batch_id=3)}, '{"orders":{"0":10}}').skipped
    retry = sink.write_batch(3, {"events": events(0, 10, batch_id=3)}, '{"orders":{"0":10}}')
    assert retry.skipped and not retry.replanned, "same offsets: a plain retry, skipped"
    wider = sink.write_batch(3, {"events": events(0, 25, batch_id=3)}, '{"orders":{"0":25}}')
    assert wider.replanned and not wider.skipped and wider.rows["events"] == 25
    assert len(sink.read_table("events")) == 25, "the 15 new records are in, the 10 old ones once"
    ledger = sink.read_table(LEDGER_TABLE)
    assert ledger["source_offsets"].tolist() == ['{"orders":{"0":25}}']
    assert sink.write_batch(3, {"events": events(0, 25, batch_id=3)}, None).skipped, "unknown offsets: skip"


def test_old_ledger_gets_the_offsets_column(make_sink: Any, db_url: str) -> None:
    import sqlalchemy as sa

    sink = make_sink()
    sink.create_tables()
    with sink.engine.begin() as conn:
        conn.execute(sa.text(f'ALTER TABLE "{sink.table_name(LEDGER_TABLE)}" DROP COLUMN source_offsets'))
    fresh = make_sink()
    assert not fresh.write_batch(1, {"events": events(0, 2, batch_id=1)}, '{"orders":{"0":2}}').skipped
    assert fresh.read_table(LEDGER_TABLE)["source_offsets"].tolist() == ['{"orders":{"0":2}}']


def test_a_nullable_column_the_database_cannot_add_is_refused_with_its_reason(make_sink: Any, db_url: str) -> None:
    """SQLite's names are case-insensitive: a new version's nullable "Amount" beside the table's "amount" cannot
    be added. Refused, naming the column and SQLite's reason (it was the database's raw error); PostgreSQL,
    whose quoted names keep their case, adds it."""
    make_sink().write_batch(0, {"events": events(0, 2, batch_id=0)}, '{"orders":{"0":2}}')
    clash = TableSpec("events", (*EVENTS.columns, Column("Amount", "double")), EVENTS.key, EVENTS.on_conflict)
    tables = (clash, *[t for t in TABLES if t.name != "events"])
    if db_url.startswith("sqlite"):
        with pytest.raises(SinkRefused, match=r"cannot add the nullable column 'Amount' to table .*events.* "
                                              r"\(duplicate column name"):
            make_sink(tables=tables).create_tables()
    else:
        make_sink(tables=tables).create_tables()
        assert "Amount" in make_sink(tables=tables).read_table("events").columns


def test_fresh_sink_reads_empty(make_sink: Any) -> None:
    sink = make_sink()
    assert sink.committed_batch_ids() == [] and sink.last_committed_batch() is None
    df = sink.read_table("events")
    assert df.empty and list(df.columns) == list(EVENTS.column_names)
    sink.create_tables()
    sink.create_tables()  # idempotent
    assert sink.read_table("window_results").empty
    assert not sink.write_batch(0, {}).skipped  # an empty micro-batch still commits its id
    assert sink.committed_batch_ids() == [0]


def test_database_error_mid_transaction_leaves_nothing(make_sink: Any) -> None:
    sink = make_sink()
    sink.write_batch(0, {"events": events(0, 10)})
    good = {"events": events(10, 12_000), "dead_letter": dead_letters(0, 5),
            "window_results": windows(["a", "b", "c"], 1)}
    bad_dead = dead_letters(0, 5)
    # A value the driver cannot bind (number columns refuse non-numbers before the transaction;
    # a text column passes other objects on): raised by the database layer after the events
    # (12,000 rows, several executemany chunks) went in.
    bad_dead[2]["error"] = {"not": "text"}
    with pytest.raises(SinkWriteError) as err:
        sink.write_batch(1, {**good, "dead_letter": bad_dead})
    assert "batch 1" in str(err.value) and "dead_letter" in str(err.value)
    assert isinstance(err.value, Failed) and err.value.retry  # tried and broke: a retry may help

    assert counts(sink) == {"events": 10, "dead_letter": 0, "window_results": 0, LEDGER_TABLE: 1}
    assert sink.committed_batch_ids() == [0]

    retry = sink.write_batch(1, good)
    assert not retry.skipped
    assert counts(sink) == {"events": 12_010, "dead_letter": 5, "window_results": 3, LEDGER_TABLE: 2}


# --------------------------------------------------------------------------- conflict rules
def test_ignore_keeps_first_row_and_replace_upserts(make_sink: Any) -> None:
    sink = make_sink()
    sink.write_batch(1, {"events": events(0, 5, value=b"first"), "window_results": windows(["a", "b"], 1)})
    sink.write_batch(2, {"events": events(3, 5, value=b"second"), "window_results": windows(["b", "c"], 2)})

    ev = sink.read_table("events")
    assert ev["offset"].tolist() == [0, 3, 6, 1, 4, 7, 2, 5]  # ordered by key (topic, partition, offset)
    assert dict(zip(ev["offset"], ev["value"])) == {0: b"first", 1: b"first", 2: b"first", 3: b"first", 4: b"first",
                                                   5: b"second", 6: b"second", 7: b"second"}
    win = sink.read_table("window_results")
    assert dict(zip(win["user"], win["count"])) == {"a": 1, "b": 2, "c": 2}
    assert dict(zip(win["user"], win["total"])) == {"a": 1.5, "b": 3.0, "c": 3.0}

    # The same rule applies to repeated keys inside one input: first wins / last wins.
    dup_events = events(100, 1, value=b"one") + events(100, 1, value=b"two")
    dup_windows = pd.concat([windows(["z"], 1), windows(["z"], 2)], ignore_index=True)
    result = sink.write_batch(3, {"events": dup_events, "window_results": dup_windows})
    assert result.rows == {"events": 2, "window_results": 2}  # rows handed in
    ev = sink.read_table("events")
    assert ev.loc[ev["offset"] == 100, "value"].tolist() == [b"one"]
    win = sink.read_table("window_results")
    assert win.loc[win["user"] == "z", "count"].tolist() == [2]



def test_latest_keeps_the_highest_version_whatever_order_writes_come_in(make_sink: Any) -> None:
    sink = make_sink(stream="stock", tables=(STATE,))
    rows = [{"sku": f"s{i % 7}", "qty": i, "version": i} for i in range(60)]
    want = {f"s{k}": max(i for i in range(60) if i % 7 == k) for k in range(7)}
    # newest first inside one input, then an older replay after a newer batch: neither wins over a higher version
    sink.write_batch(0, {"stock": list(reversed(rows[30:]))})
    sink.write_rows({"stock": rows[:30]}, replay_id="old-range")
    sink.write_batch(1, {"stock": [{"sku": "s0", "qty": -1, "version": 0}]})
    got = sink.read_table("stock")
    assert dict(zip(got["sku"], got["version"])) == want
    assert dict(zip(got["sku"], got["qty"])) == want  # the row of the winning version, not a mix
    sink.write_rows({"stock": [{"sku": "s1", "qty": 999, "version": 1000}]}, replay_id="newer")
    assert sink.read_table("stock").set_index("sku").loc["s1", "qty"] == 999


@pytest.mark.parametrize("kwargs, says", [
    ({"on_conflict": "latest"}, "needs version="),
    ({"on_conflict": "latest", "version": "qty"}, "must be a non-null"),
    ({"on_conflict": "replace", "version": "version"}, "only for on_conflict 'latest'"),
])
def test_latest_needs_a_non_null_version_column(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(SinkRefused, match=says):
        TableSpec("stock", STATE.columns, key=("sku",), **kwargs)


def test_write_rows_replay_path_is_idempotent(make_sink: Any) -> None:
    sink = make_sink()
    live = sink.write_batch(0, {"events": events(0, 50), "window_results": windows(["a"], 1)})
    assert not live.skipped

    # A replay re-reads a Kafka range overlapping what the live stream wrote.
    replay = {"events": pd.DataFrame(events(25, 50)), "dead_letter": dead_letters(0, 4),
              "window_results": windows(["a", "b"], 3)}
    assert sink.write_rows(replay, replay_id="r-1") == {"events": 50, "dead_letter": 4, "window_results": 2}
    after_once = {name: sink.read_table(name) for name in sink.specs}
    sink.write_rows(replay, replay_id="r-1")
    for name, df in after_once.items():
        pd.testing.assert_frame_equal(sink.read_table(name), df)
    assert len(after_once["events"]) == 75 and after_once["events"]["offset"].is_unique
    assert sink.committed_batch_ids() == [0]  # replays do not touch the ledger


def test_table_prefix_writes_separate_shadow_tables(make_sink: Any) -> None:
    live = make_sink()
    shadow = make_sink(prefix="shadow_r1_")
    assert shadow.table_name("events") == "shadow_r1_events"
    assert shadow.table_name(LEDGER_TABLE) == "shadow_r1_rewind_batches"
    live.write_batch(0, {"events": events(0, 10)})
    shadow.write_rows({"events": events(0, 3, value=b"shadow")})
    assert not shadow.write_batch(0, {"events": events(3, 2)}).skipped  # its own ledger
    assert len(live.read_table("events")) == 10 and set(live.read_table("events")["value"]) == {b"v"}
    assert len(shadow.read_table("events")) == 5


# --------------------------------------------------------------------------- values
def test_dataframes_and_dicts_with_numpy_values_nulls_and_time_zones(make_sink: Any) -> None:
    sink = make_sink()
    paris = dt.timezone(dt.timedelta(hours=2))
    rows = [
        {"topic": "orders", "partition": np.int32(0), "offset": np.int64(1),
         "timestamp": dt.datetime(2024, 5, 1, 12, 0, tzinfo=paris), "amount": np.float64(2.5),
         "key": bytearray(b"k"), "value": None},
        {"topic": np.str_("orders"), "partition": 0, "offset": 2,
         "timestamp": dt.datetime(2024, 5, 1, 10, 0),  # naive = UTC
         "amount": float("nan"), "key": memoryview(b"k2")},
        {"topic": "orders", "partition": 0, "offset": 3, "timestamp": "2024-05-01T10:00:00.123456Z", "amount": 3},
        {"topic": "orders", "partition": 0, "offset": 4, "timestamp": None, "amount": None},
    ]
    frame = pd.DataFrame({
        "topic": ["orders"] * 3, "partition": [1, 1, 1], "offset": [1.0, 2.0, 3.0],  # float that is integral: fine
        "timestamp": pd.to_datetime(["2024-05-01 12:00", "2024-05-01 12:30", None]).tz_localize("Europe/Paris"),
        "amount": [1.0, None, 3.0], "batch_id": pd.array([1, None, 3], dtype="Int64"),
    })
    sink.write_batch(0, {"events": rows})
    sink.write_batch(1, {"events": frame})
    ev = sink.read_table("events")
    assert str(ev["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert str(ev["offset"].dtype) == "Int64" and str(ev["amount"].dtype) == "float64"
    p0 = ev[ev["partition"] == 0].set_index("offset")
    assert p0.loc[1, "timestamp"] == pd.Timestamp("2024-05-01 10:00", tz="UTC")
    assert p0.loc[2, "timestamp"] == pd.Timestamp("2024-05-01 10:00", tz="UTC")
    assert p0.loc[3, "timestamp"] == pd.Timestamp("2024-05-01 10:00:00.123456", tz="UTC")
    assert pd.isna(p0.loc[4, "timestamp"]) and pd.isna(p0.loc[2, "amount"]) and pd.isna(p0.loc[4, "amount"])
    assert p0.loc[1, "key"] == b"k" and p0.loc[2, "key"] == b"k2" and p0.loc[1, "value"] is None
    p1 = ev[ev["partition"] == 1].set_index("offset")
    assert p1["timestamp"].tolist()[:2] == [pd.Timestamp("2024-05-01 10:00", tz="UTC"),
                                            pd.Timestamp("2024-05-01 10:30", tz="UTC")]
    assert pd.isna(p1.loc[3, "timestamp"]) and pd.isna(p1.loc[2, "batch_id"]) and p1.loc[3, "batch_id"] == 3


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("prefix", ["Shadow_", "1shadow_", "shadow-1_", "shadow r1_", "s" * 60])
def test_bad_table_prefix_is_rejected(prefix: str, tmp_path: Path) -> None:
    with pytest.raises(SinkRefused, match="prefix"):
        ExactlyOnceSqlSink(f"sqlite:///{tmp_path}/x.db", "orders", TABLES, table_prefix=prefix)
    assert not (tmp_path / "x.db").exists()


def test_bad_specs_are_rejected() -> None:
    with pytest.raises(SinkRefused, match="'Events'"):
        TableSpec("Events", (Column("a", "int"),), ("a",), "ignore")
    with pytest.raises(SinkRefused, match="'missing'"):
        TableSpec("t", (Column("a", "int"),), ("missing",), "ignore")
    with pytest.raises(SinkRefused, match="'decimal'"):
        Column("a", "decimal")  # type: ignore[arg-type]
    with pytest.raises(SinkRefused, match="'drop table'"):
        Column("drop table", "string")
    with pytest.raises(SinkRefused, match="reserved"):
        TableSpec(LEDGER_TABLE, (Column("a", "int"),), ("a",), "ignore")


def test_bad_rows_raise_before_anything_is_written(make_sink: Any) -> None:
    sink = make_sink()
    sink.write_batch(0, {"events": events(0, 5)})
    good = {"events": events(5, 5), "dead_letter": dead_letters(0, 1)}
    cases = {
        "unknown column": ({**good, "window_results": windows(["a"], 1).assign(colour="red")},
                           r"window_results.*'colour'"),
        "unknown dict key": ({**good, "dead_letter": [{**dead_letters(0, 1)[0], "eror": "typo"}]},
                             r"dead_letter.*'eror'"),
        "missing key column": ({**good, "window_results": windows(["a"], 1).drop(columns=["user"])},
                               r"window_results.*'user'"),
        "null key value": ({**good, "events": events(5, 5) + [{**events(99, 1)[0], "offset": None}]},
                           r"events.*row 5.*'offset'"),
        "key missing in one dict": ({**good, "events": [{"topic": "orders", "partition": 0}]}, r"events.*'offset'"),
        "unknown table": ({**good, "evnts": events(0, 1)}, r"evnts"),
        "not an int": ({**good, "events": [{**events(5, 1)[0], "offset": 1.5}]}, r"events.*'offset'.*1.5"),
        "not a timestamp": ({**good, "events": [{**events(5, 1)[0], "timestamp": 12345}]}, r"events.*'timestamp'"),
    }
    for what, (batch, pattern) in cases.items():
        with pytest.raises(SinkRefused, match=pattern):
            sink.write_batch(1, batch)
        with pytest.raises(SinkRefused, match=pattern):
            sink.write_rows(batch)
        assert counts(sink) == {"events": 5, "dead_letter": 0, "window_results": 0, LEDGER_TABLE: 1}, what
    with pytest.raises(SinkRefused, match="batch_id"):
        sink.write_batch(-1, good)
    with pytest.raises(SinkRefused, match="unknown table 'nope'"):
        sink.read_table("nope")


def test_unreachable_database_names_url_with_password_masked(tmp_path: Path) -> None:
    with __import__("socket").socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sink = ExactlyOnceSqlSink(f"postgresql+psycopg2://rewind:s3cret-pw@127.0.0.1:{port}/rewind", "orders", TABLES)
    with pytest.raises(SinkConnectionError) as err:
        sink.write_batch(0, {"events": events(0, 1)})
    message = str(err.value)
    assert f"postgresql+psycopg2://rewind:***@127.0.0.1:{port}/rewind" in message and "s3cret-pw" not in message
    assert "s3cret-pw" not in repr(sink)

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SinkConnectionError, match="a-file"):
        ExactlyOnceSqlSink(f"sqlite:///{blocker}/sub/x.db", "orders", TABLES)
    with pytest.raises(SinkRefused, match="unsupported"):
        ExactlyOnceSqlSink("mysql://u:p@localhost/db", "orders", TABLES)


# --------------------------------------------------------------------------- the contract and the errors
def test_errors_tell_refusal_from_failure() -> None:
    """A refusal is a Refused (exit 3, no retry) and still a ValueError; a failure is a Failed
    (exit 1, retry) and still a RuntimeError, so callers that caught the old bases still do."""
    assert issubclass(SinkRefused, Refused) and issubclass(SinkRefused, ValueError)
    for cls in (SinkError, SinkConnectionError, SinkWriteError):
        assert issubclass(cls, Failed) and issubclass(cls, RuntimeError) and not issubclass(cls, Refused)
    assert exit_code_of(SinkRefused("x")) == EXIT_REFUSED and not SinkRefused("x").retry
    assert exit_code_of(SinkWriteError("x")) == EXIT_FAILED and SinkWriteError("x").retry
    with pytest.raises(ValueError, match="batch_id"):  # the old base still catches a refusal
        ExactlyOnceSqlSink("sqlite://", "orders", TABLES).write_batch(-1, {})


def test_sql_sink_implements_the_documented_contract() -> None:
    """Sink is abstract, says every promise in a docstring, and ExactlyOnceSqlSink implements all of it."""
    promised = {"create_tables", "write_batch", "write_rows", "read_table", "read_rows", "column_max",
                "last_committed_batch", "committed_batch_ids", "table_name", "dispose"}
    assert Sink.__abstractmethods__ == promised
    with pytest.raises(TypeError):
        Sink()  # type: ignore[abstract]
    assert issubclass(ExactlyOnceSqlSink, Sink) and not ExactlyOnceSqlSink.__abstractmethods__
    for name in promised:
        assert (getattr(Sink, name).__doc__ or "").strip(), f"Sink.{name} has no contract"
    for word in ("idempotent", "ignore", "replace", "batch identity", "SinkRefused", "SinkWriteError"):
        assert word.lower() in (contract.__doc__ or "").lower(), word
    with ExactlyOnceSqlSink("sqlite://", "orders", TABLES) as sink:  # __enter__/__exit__ come from Sink
        assert isinstance(sink, ExactlyOnceSqlSink)


# --------------------------------------------------------------------------- concurrency
def _write_batches(url: str, stream: str, batch_ids: list[int], start: Any) -> None:
    """Child process: wait for the start signal, then write one batch per id."""
    sink = ExactlyOnceSqlSink(url, stream, TABLES)
    start.wait(60)
    for b in batch_ids:
        result = sink.write_batch(b, {"events": events(b * 1000, 1000, batch_id=b),
                                      "window_results": windows([f"u{b}"], b)})
        assert not result.skipped, b
    sink.dispose()


def _write_same_batch(url: str, start: Any, results: Any) -> None:
    sink = ExactlyOnceSqlSink(url, "orders", TABLES)
    sink.create_tables()
    start.wait(60)
    results.put(sink.write_batch(42, {"events": events(0, 5000)}).skipped)
    sink.dispose()


def test_two_processes_write_different_batches_concurrently(make_sink: Any, db_url: str) -> None:
    make_sink().create_tables()  # PostgreSQL: avoid racing CREATE TABLE in the children (handled, but slower)
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    children = [ctx.Process(target=_write_batches, args=(db_url, "orders", ids, start))
                for ids in (list(range(0, 20, 2)), list(range(1, 20, 2)))]
    for c in children:
        c.start()
    start.set()
    for c in children:
        c.join(120)
    assert [c.exitcode for c in children] == [0, 0]
    sink = make_sink()
    assert sink.committed_batch_ids() == list(range(20))
    assert len(sink.read_table("events")) == 20_000 and len(sink.read_table("window_results")) == 20


def test_two_processes_writing_the_same_batch_commit_it_once(make_sink: Any, db_url: str) -> None:
    make_sink().create_tables()
    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    children = [ctx.Process(target=_write_same_batch, args=(db_url, start, results)) for _ in range(2)]
    for c in children:
        c.start()
    start.set()
    skipped = sorted(results.get(timeout=120) for _ in children)
    for c in children:
        c.join(60)
    assert skipped == [False, True]
    assert counts(make_sink()) == {"events": 5000, "dead_letter": 0, "window_results": 0, LEDGER_TABLE: 1}


# --------------------------------------------------------------------------- speed
def test_write_speed_50k_rows(make_sink: Any, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Printed, not asserted: machines differ. SQLite should be well under 2 s."""
    sink = make_sink()
    sink.create_tables()
    n = 50_000
    frame = pd.DataFrame({
        "topic": "orders", "partition": np.arange(n) % 6, "offset": np.arange(n), "key": [b"key"] * n,
        "value": [b'{"user": "u1", "amount": 12.5}'] * n,
        "timestamp": pd.date_range(T0, periods=n, freq="ms"), "amount": np.random.default_rng(1).random(n),
        "batch_id": 1,
    })
    t = time.perf_counter()
    result = sink.write_batch(1, {"events": frame})
    batch_s = time.perf_counter() - t
    records = frame.to_dict("records")
    t = time.perf_counter()
    sink.write_rows({"events": records})  # every row conflicts: the replay-overlap case
    replay_s = time.perf_counter() - t
    assert result.rows == {"events": n} and len(sink.read_table("events")) == n
    backend = db_url.split(":", 1)[0]
    with capsys.disabled():
        print(f"\n[sink speed] {backend}: write_batch 50,000 rows (DataFrame) {batch_s:.2f}s = "
              f"{n / batch_s:,.0f} rows/s; write_rows 50,000 rows (dicts, all conflicting) {replay_s:.2f}s = "
              f"{n / replay_s:,.0f} rows/s")


# --------------------------------------------------------------------------- LocalPostgres
@pytest.mark.postgres
def test_local_postgres_leaves_no_process_or_directory() -> None:
    if not postgres_available():
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    pg = LocalPostgres(database="probe")
    url = pg.start()
    pid, root = pg.pid, pg.root
    assert pid is not None and root is not None and root.exists()
    assert "***" in repr(pg) and pg.password not in repr(pg)
    sink = ExactlyOnceSqlSink(url, "probe", TABLES)
    assert not sink.write_batch(0, {"events": events(0, 3)}).skipped
    children = psutil.Process(pid).children()
    assert children  # the postmaster's background workers and our session's backend
    sink.dispose()
    pg.stop()
    pg.stop()  # idempotent
    assert all(not _running(p) for p in [pid, *(c.pid for c in children)])
    assert not root.exists()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_collected_batch_keeps_big_integers_exact_next_to_nulls(make_sink: Any) -> None:
    """Arrow -> pandas (rewind.driver.runner.arrow_to_pandas) -> sink: a bigint past 2**53 beside a null
    comes back as written (Arrow's default would make the column float64 and round it)."""
    import pyarrow as pa

    from rewind.driver.runner import arrow_to_pandas

    big = 2**62 + 1
    batch = pa.table({"sku": ["a", "b", "c"], "qty": pa.array([big, None, -big], pa.int64()),
                      "version": pa.array([big, 2, 3], pa.int64()), "batch_id": pa.array([None] * 3, pa.int64())})
    frame = arrow_to_pandas(batch)
    assert str(frame["qty"].dtype) == "Int64"
    sink = make_sink(stream="stock", tables=(STATE,))
    sink.write_batch(0, {"stock": frame})
    got = sink.read_table("stock").set_index("sku")
    assert got.loc["a", "qty"] == big and pd.isna(got.loc["b", "qty"]) and got.loc["c", "qty"] == -big
    assert got.loc["a", "version"] == big


def test_decimals_bigints_and_microseconds_round_trip_exactly(make_sink: Any, db_url: str) -> None:
    """decimal(18,2) and decimal(38,10) at their largest, negative, zero and with trailing zeros, bigints
    past 2**53 and -(2**63), times 1 us apart: read back exactly (SQLite stores decimals as text, PostgreSQL
    as NUMERIC(P,S)); a decimal that does not fit is refused before anything is written, never rounded."""
    from decimal import Decimal

    sink = make_sink(stream="money", tables=(MONEY,))
    sink.write_batch(0, {"money": money_rows()})
    check_money(sink.read_table("money"))
    assert sink.column_max("money", "amount") == Decimal("9" * 28 + "." + "9" * 10)
    got = sink.read_rows("money", lambda t: t.c.fee == Decimal("12.3"), ["id", "fee"])
    assert got["id"].tolist() == [9_007_199_254_740_994] and got["fee"].tolist() == [Decimal("12.30")]
    if db_url.startswith("sqlite"):
        with sink.engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT fee, typeof(fee), amount, at FROM money WHERE id = 7").one()
        assert tuple(stored) == ("5.00", "text", "0.0000000001", None)
    else:
        with sink.engine.connect() as conn:
            kinds = conn.exec_driver_sql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                                         "'money'::regclass AND attname IN ('fee', 'amount', 'at') ORDER BY attnum")
            assert kinds.scalars().all() == ["numeric(18,2)", "numeric(38,10)", "timestamp with time zone"]
    for bad, says in [(Decimal("12345678901234567.00"), "more than 16 digits before"),
                      ("1.005", "more than 2 digits after"), (0.1 + 0.2, "more than 2 digits after")]:
        with pytest.raises(SinkRefused, match=rf"'money', column 'fee': .*{says}"):
            sink.write_batch(1, {"money": [{"id": 1, "fee": bad}]})
    assert len(sink.read_table("money")) == len(money_rows()) and sink.committed_batch_ids() == [0]


def test_ledger_after_selects_this_streams_later_batches_as_the_whole_ledger_would(make_sink: Any) -> None:
    """``ledger_after`` (what the Asset watchers ask every interval) is the whole ledger, filtered, without
    reading it: the same rows and columns as ``read_table`` for this stream's batches after the one given."""
    mine, other = make_sink("orders"), make_sink("other")
    for b in range(5):
        mine.write_batch(b, {"events": events(b * 10, 3, batch_id=b)}, f'{{"t": {{"0": {b + 1}}}}}')
        other.write_batch(b + 10, {"events": events(1000 + b * 10, 3, batch_id=b)})
    whole = mine.read_table(LEDGER_TABLE)
    ours = whole[whole["stream"] == "orders"].reset_index(drop=True)
    for after in (-1, 0, 2, 4, 99):
        got = mine.ledger_after(after)
        want = ours[ours["batch_id"] > after].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)
        assert Sink.ledger_after(mine, after).equals(want)  # the contract's default, for sinks without a key
    assert mine.ledger_after(2)["batch_id"].tolist() == [3, 4]
    assert make_sink("fresh", prefix="none_").ledger_after(-1).empty  # no ledger table yet
