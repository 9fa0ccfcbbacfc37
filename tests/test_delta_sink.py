"""The Delta Lake sink on a local directory: the sink contract, a writer killed between its tables'
commits and its ledger row, options refused at registry load.

The tables are those of test_sink (events, dead letters, window results) and a ``latest`` table;
every test gets its own directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from harness.sink_data import MONEY, STATE, TABLES, check_money, dead_letters, events, money_rows, windows

from rewind.api.tables import LEDGER_TABLE, TableSpec
from rewind.registry import RegistryError, load_registry
from rewind.sink.delta import DeltaSink
from rewind.sink.delta_target import DeltaSinkTarget, parse_delta_sink
from rewind.sink.errors import SinkRefused


@pytest.fixture
def make_sink(tmp_path: Path) -> Iterator[Callable[..., DeltaSink]]:
    made: list[DeltaSink] = []

    def make(stream: str = "orders", tables: tuple[TableSpec, ...] = TABLES, table_prefix: str = "") -> DeltaSink:
        sink = DeltaSink(DeltaSinkTarget(str(tmp_path / "lake")), stream, tables, table_prefix=table_prefix)
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.dispose()


def test_batch_written_once_skipped_on_rerun_and_rewritten_when_replanned(make_sink: Any) -> None:
    from deltalake import DeltaTable

    sink = make_sink()
    batch = {"events": events(0, 300, batch_id=7), "dead_letter": dead_letters(1000, 3),
             "window_results": windows(["a", "b"], 5)}
    first = sink.write_batch(7, batch, '{"orders":{"0":300}}')
    assert not first.skipped and first.rows == {"events": 300, "dead_letter": 3, "window_results": 2}
    before = {name: sink.read_table(name) for name in sink.specs}
    assert len(before["events"]) == 300 and before["events"]["offset"].is_unique
    # Delta's own record of the batch: the app transaction of every table it touched
    for name in sink.specs:
        assert DeltaTable(sink.path(name)).transaction_version(sink.app_id) == 7

    again = sink.write_batch(7, {"events": events(0, 350, batch_id=7, value=b"other")}, '{"orders":{"0":300}}')
    assert again.skipped
    restarted = make_sink()
    assert restarted.write_batch(7, batch, '{"orders":{"0":300}}').skipped
    for name, df in before.items():
        pd.testing.assert_frame_equal(restarted.read_table(name), df)
    assert restarted.committed_batch_ids() == [7]

    wider = restarted.write_batch(7, {"events": events(0, 320, batch_id=7)}, '{"orders":{"0":320}}')
    assert wider.replanned and not wider.skipped
    ev = restarted.read_table("events")
    assert len(ev) == 320 and ev["offset"].is_unique
    ledger = restarted.read_table(LEDGER_TABLE)
    assert ledger["batch_id"].tolist() == [7] and ledger["source_offsets"].tolist() == ['{"orders":{"0":320}}']


def test_conflict_rules_read_back_like_the_sql_sink(make_sink: Any) -> None:
    sink = make_sink(tables=(*TABLES, STATE))
    sink.write_batch(1, {"events": events(0, 5, value=b"first"), "window_results": windows(["a", "b"], 1)})
    sink.write_batch(2, {"events": events(3, 5, value=b"second"), "window_results": windows(["b", "c"], 2)})
    rows = [{"sku": f"s{i % 7}", "qty": i, "version": i} for i in range(60)]
    sink.write_batch(3, {"stock": list(reversed(rows[30:]))})
    sink.write_rows({"stock": rows[:30]}, replay_id="old-range")
    ev = sink.read_table("events")
    assert ev["offset"].tolist() == [0, 3, 6, 1, 4, 7, 2, 5]
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


def test_replay_rows_are_idempotent_and_counted(make_sink: Any) -> None:
    sink = make_sink()
    sink.write_batch(0, {"events": events(0, 50)})
    inserted: dict[str, int] = {}
    assert sink.write_rows({"events": events(25, 50), "dead_letter": dead_letters(0, 4)}, replay_id="r-1",
                           inserted=inserted) == {"events": 50, "dead_letter": 4}
    assert inserted == {"events": 25, "dead_letter": 4}
    sink.write_rows({"events": events(25, 50)}, replay_id="r-1", inserted=inserted)
    assert inserted["events"] == 0
    assert len(sink.read_table("events")) == 75 and sink.committed_batch_ids() == [0]
    assert not sink.write_batch(1, {"events": events(75, 5)}).skipped


def test_table_prefix_and_streams_keep_apart(make_sink: Any) -> None:
    live, shadow, other = make_sink(), make_sink(table_prefix="shadow_r1_"), make_sink(stream="payments")
    live.write_batch(0, {"events": events(0, 10)})
    assert not shadow.write_batch(0, {"events": events(0, 3)}).skipped
    assert not other.write_batch(0, {"events": events(100, 2)}).skipped, "another stream's batch 0 is its own"
    assert len(live.read_table("events")) == 12 and len(shadow.read_table("events")) == 3
    assert live.committed_batch_ids() == [0] and other.committed_batch_ids() == [0]
    assert len(live.read_table(LEDGER_TABLE)) == 2


def test_a_nullable_column_a_new_version_adds_is_added_to_the_live_table(make_sink: Any) -> None:
    """An upgrade that adds a nullable column is compatible (``rewind.upgrade.rules``: the sink adds it): the
    new version's driver opens the tables its old version created, the column is added (old rows read
    NULL), and its batches write it. Before, the Delta sink refused to open them and every upgrade of a
    Delta stream that added a column crash-looped into a rollback (a blue/green cutover included). A
    missing NOT NULL column is still refused."""
    from harness.sink_data import DEAD_LETTER, EVENTS, WINDOWS

    from rewind.api.tables import Column

    make_sink().write_batch(0, {"events": events(0, 5)}, '{"orders":{"0":5}}')
    wider = TableSpec("events", (*EVENTS.columns, Column("amount_cents", "bigint")), EVENTS.key, EVENTS.on_conflict)
    new = make_sink(tables=(wider, DEAD_LETTER, WINDOWS))
    new.create_tables()
    rows = [{**r, "amount_cents": 100 + r["offset"]} for r in events(5, 3)]
    assert not new.write_batch(1, {"events": rows}, '{"orders":{"0":8}}').skipped
    ev = new.read_table("events")
    assert dict(zip(ev["offset"], ev["amount_cents"].astype(object).where(ev["amount_cents"].notna(), None))) == \
        {0: None, 1: None, 2: None, 3: None, 4: None, 5: 105, 6: 106, 7: 107}
    assert new.committed_batch_ids() == [0, 1]
    strict = TableSpec("events", (*EVENTS.columns, Column("region", "string", nullable=False)), EVENTS.key,
                       EVENTS.on_conflict)
    with pytest.raises(SinkRefused, match=r"has no column\(s\) \['region'\]: add them"):
        make_sink(tables=(strict, DEAD_LETTER, WINDOWS)).create_tables()
    # a nullable column Delta cannot add (its names are case-insensitive): refused with delta-rs' reason
    clash = TableSpec("events", (*EVENTS.columns, Column("Amount", "double")), EVENTS.key, EVENTS.on_conflict)
    with pytest.raises(SinkRefused, match=r"no column\(s\) \['Amount'\] \(adding the nullable one\(s\) failed: "
                                          r".*[Dd]uplicate field name"):
        make_sink(tables=(clash, DEAD_LETTER, WINDOWS)).create_tables()


def test_fresh_sink_reads_empty_and_bad_rows_are_refused_before_anything_is_written(make_sink: Any) -> None:
    sink = make_sink()
    assert sink.read_table("events").empty and sink.committed_batch_ids() == []
    with pytest.raises(SinkRefused, match="unknown column"):
        sink.write_batch(0, {"events": [{"topic": "orders", "partition": 0, "offset": 1, "nope": 1}]})
    with pytest.raises(SinkRefused, match="batch_id"):
        sink.write_batch(-1, {})
    assert sink.committed_batch_ids() == [] and sink.read_table(LEDGER_TABLE).empty



def test_decimals_bigints_and_microseconds_round_trip_exactly(make_sink: Any) -> None:
    """Delta stores decimal(P,S) as decimal128(P,S), bigints as int64 and times as timestamp[us, UTC]:
    the money rows read back exactly (``check_money``), straight from Delta and through the sink."""
    from decimal import Decimal

    import pyarrow as pa
    from deltalake import DeltaTable

    from rewind.sink.delta import table_rows

    sink = make_sink(stream="money", tables=(MONEY,))
    sink.write_batch(0, {"money": money_rows()})
    check_money(sink.read_table("money"))
    table = DeltaTable(sink.path("money"))
    schema = pa.schema(table.schema().to_arrow())  # the table's own types, not a scan's
    assert [str(schema.field(c).type) for c in ("id", "fee", "amount", "at")] == \
        ["int64", "decimal128(18, 2)", "decimal128(38, 10)", "timestamp[us, tz=UTC]"]
    assert {r["id"]: r["fee"] for r in table_rows(table)}[-(2**63)] == Decimal("-9999999999999999.99")
    assert sink.column_max("money", "fee") == Decimal("9999999999999999.99")
    with pytest.raises(SinkRefused, match=r"'money', column 'amount': .*more than 10 digits after"):
        sink.write_batch(1, {"money": [{"id": 1, "amount": Decimal("0.00000000001")}]})
    assert sink.committed_batch_ids() == [0]

@pytest.mark.parametrize("options, says", [
    ({"txnAppId": "mine"}, "txnAppId=rewind.<stream>"),
    ({"txnVersion": "3"}, "remove the option"),
    ({"mergeSchema": "true"}, "unknown sink option 'mergeSchema'"),
])
def test_options_that_break_exactly_once_are_refused_at_registry_load(tmp_path: Path, options: dict[str, str],
                                                                       says: str) -> None:
    opts = ", ".join(f"{k}: '{v}'" for k, v in options.items())
    path = tmp_path / "streams.yaml"
    path.write_text("streams:\n  s:\n    topics: [t]\n    transform: rewind.demo.transform:DemoTransform\n"
                    f"    sink: {{url: 'delta://{tmp_path}/lake', options: {{{opts}}}}}\n"
                    f"    checkpoint: {tmp_path}/cp\n    status_dir: {tmp_path}/st\n")
    with pytest.raises(RegistryError) as err:
        load_registry(path)
    assert says in str(err.value)


def test_sink_urls_parse_or_say_what_is_wrong() -> None:
    t = parse_delta_sink("delta:///data/lake", {"delta.appendOnly": "false"})
    assert (t.root, t.properties, t.table_path("events")) == ("/data/lake", {"delta.appendOnly": "false"},
                                                              "/data/lake/events")
    for bad in ("delta://host/lake", "delta:relative", "delta:///"):
        with pytest.raises(SinkRefused, match="three slashes"):
            parse_delta_sink(bad)


# --------------------------------------------------------------------------- in Spark
@pytest.mark.parametrize("write_from", ["executors", "driver"])
def test_the_demo_stream_into_delta(spark: Any, platform: Any, tmp_path: Path, write_from: str) -> None:
    """The demo stream (malformed, late and duplicate records on 5 partitions, keyless) into Delta
    tables: verify proves every Kafka record once, from either writer. 5 s of event time at 1,000
    ev/s: with 1 s windows and a 1 s watermark delay, 1.7 s (3,000 ev/s) sometimes closed no window."""
    import uuid

    from deltalake import DeltaTable

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import build_query, open_sink
    from rewind.proof.verify import verify_stream
    from tests.harness.registry_templates import demo_stream, write_registry

    topic = f"dlt-{uuid.uuid4().hex[:8]}"
    sent = produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=5000, rate=1000, partitions=5,
                                                         id_prefix="dlt", malformed_every=37, late_every=53,
                                                         duplicate_every=31, keyless=True))
    entry = demo_stream("dlt", topic, tmp_path, max_offsets=1300, window="1 second", watermark_delay="1 second",
                        allowed_lateness="500 ms",
                        sink=f'{{url: "delta://{tmp_path}/lake", table_prefix: d_, write_from: {write_from}}}')
    spec = load_registry(write_registry(tmp_path / "s.yaml", entry)).get("dlt")
    phases: list[dict[str, Any]] = []
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True, phases=phases)
    assert query.awaitTermination(300), "the available_now run did not finish"
    assert query.exception() is None
    report = verify_stream(spec, platform.kafka_bootstrap)
    assert report.ok, report
    assert report.kafka_records == sent.sent and report.expected_dead_letters > 0 and report.windows_checked > 0
    assert phases and all(("merge_s" in p) == (write_from == "executors") for p in phases)
    with open_sink(spec) as sink:
        ids = sink.committed_batch_ids()
        assert len(ids) == len(phases) >= 4
        recorded = {n: DeltaTable(sink.path(n)).transaction_version(sink.app_id) for n in sink.specs}
        # Delta's own record: each table's last commit carries (rewind.<stream>, batch id) of a committed batch
        assert all(v in ids for v in recorded.values()) and recorded["events"] >= ids[-2], recorded
