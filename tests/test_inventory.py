"""The inventory stream (issue 15, item 4): its rules, its Spark plan held to them, exactly-once under SIGKILL.

A second stream unlike the demo: no watermark, no state, a catalog join and a ``latest`` table
(the highest version per (sku, warehouse) wins, whatever order records are read in). Its proof is
the contract proof (``dq_suite: contract``), which trusts ``expect()``; so ``expect()`` is checked
here by hand, and ``build()`` is held to it record by record on a corpus of odd payloads.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rewind.api.contract import RECORD_COLUMNS
from rewind.inventory.catalog import CATALOG_FILE, generate_catalog, load_catalog
from rewind.inventory.producer import plan_record, produce_inventory
from rewind.inventory.tables import DEAD_LETTER, STOCK, TABLES
from rewind.inventory.transform import InventoryTransform

ROOT = Path(__file__).resolve().parents[1]
T = InventoryTransform()
PRICE = load_catalog().set_index("sku")["unit_price"]
STATE = ["sku", "warehouse", "version", "quantity", "product_name", "category", "stock_value", "updated_at"]


def payload(sku: Any, warehouse: Any, quantity: Any, version: Any, at: Any = "2026-03-01T10:00:00.123Z",
            **extra: Any) -> bytes:
    doc = {"sku": sku, "warehouse": warehouse, "quantity": quantity, "version": version, "updated_at": at, **extra}
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


def records_of(values: list[bytes | None], topic: str = "t") -> pd.DataFrame:
    """A records frame as the proof hands it to ``expect`` (one partition, offsets in order)."""
    n = len(values)
    return pd.DataFrame({"topic": [topic] * n, "partition": [0] * n, "offset": list(range(n)),
                         "timestamp": pd.Series([1_772_000_000_000] * n, dtype="Int64"),
                         "key": [None] * n, "value": pd.Series(values, dtype=object)})[list(RECORD_COLUMNS)]


def latest_state(records: pd.DataFrame, expected: pd.DataFrame) -> pd.DataFrame:
    """What the stock table must hold: per (sku, warehouse), the valid record with the highest version."""
    exp = pd.concat([records[["topic", "partition", "offset"]].reset_index(drop=True),
                     expected.reset_index(drop=True)], axis=1)
    valid = exp[exp["reason"].isna()]
    top = valid.loc[valid.groupby(["sku", "warehouse"])["version"].idxmax()]
    return top.sort_values(["sku", "warehouse"]).reset_index(drop=True)


def normal(frame: pd.DataFrame, by_identity: bool = True) -> pd.DataFrame:
    """Stock rows in one comparable form (the sink reads ints as Int64, times as UTC timestamps), sorted
    by identity unless ``by_identity`` is False (then in their order)."""
    out = frame[STATE].sort_values(["sku", "warehouse"]) if by_identity else frame[STATE]
    out = out.reset_index(drop=True).copy()
    out["version"] = out["version"].astype("int64")
    out["quantity"] = out["quantity"].astype("int64")
    out["stock_value"] = out["stock_value"].astype("float64")
    out["updated_at"] = pd.to_datetime(out["updated_at"], utc=True).astype("datetime64[us, UTC]")
    for c in ("sku", "warehouse", "product_name", "category"):
        out[c] = out[c].astype(object)
    return out


def dead_letters(records: pd.DataFrame, expected: pd.DataFrame) -> set[tuple[str, int, int, str]]:
    reasons = expected["reason"].reset_index(drop=True)
    return {(str(t), int(p), int(o), str(r)) for t, p, o, r in zip(records["topic"], records["partition"],
                                                                     records["offset"], reasons) if r is not None}


def sink_dead_letters(frame: pd.DataFrame) -> set[tuple[str, int, int, str]]:
    return {(str(t), int(p), int(o), str(r)) for t, p, o, r in
            zip(frame["topic"], frame["partition"], frame["offset"], frame["reason"])}


# ---------------------------------------------------------------------------------------------- no services


def test_catalog_is_committed_as_generated() -> None:
    committed = (ROOT / "rewind" / "inventory" / CATALOG_FILE).read_text()
    assert committed == generate_catalog().to_csv(index=False, lineterminator="\n")
    cat = load_catalog()
    assert len(cat) == 200 and cat["sku"].is_unique and (cat["unit_price"] > 0).all()
    assert list(cat.columns) == ["sku", "product_name", "category", "unit_price"]


def test_expect_on_handcrafted_records() -> None:
    values: list[bytes | None] = [
        payload("SKU-00001", "WH-AMS", 10, 1),                      # 0 valid
        payload("SKU-00001", "WH-AMS", 7, 3),                       # 1 valid, the newest of its identity
        payload("SKU-00001", "WH-AMS", 9, 2),                       # 2 valid, out of order: older, read later
        payload("SKU-00001", "WH-AMS", 7, 3),                       # 3 a duplicate of 1
        b'{"sku": "SKU-00002", "warehouse": ',                      # 4 not JSON
        payload("SKU-00002", "WH-BER", 1, ...),                     # 5 a field missing
        payload("SKU-00002", "WH-BER", "ten", 4),                   # 6 a wrong type
        payload("SKU-00002", "WH-BER", 1, 4, "2026-03-01T10:00:00.123"),  # 7 no zone
        payload("SKU-99999", "WH-AMS", 1, 4),                       # 8 not in the catalog
        payload("SKU-00002", "WH-BER", -3, 8),                      # 9 negative: a dead letter, even the newest
        payload("SKU-00002", "WH-BER", 0, 6),                       # 10 valid, zero
        None,                                                       # 11 a tombstone
        payload(42, "WH-BER", 4, 7),                                # 12 a non-string SKU: not in the catalog
        payload("SKU-00002", "WH-BER", 4, 5.0),                     # 13 a float version
        payload("SKU-00002", "wh-ber", 4, 5),                       # 14 a warehouse outside the pattern
        payload("SKU-00002", "WH-BER", 4, 5, "2026-02-30T10:00:00.000Z"),  # 15 no such day
        payload("SKU-00003", "WH-LIS", 2, 1, note="extra fields are ignored"),  # 16 valid
    ]
    records = records_of(values)
    exp = T.expect(records, None)
    assert len(exp) == len(values) and list(exp.index) == list(range(len(values)))
    reasons = [None if pd.isna(r) else r for r in exp["reason"]]
    assert reasons == [None, None, None, None, "malformed", "malformed", "malformed", "malformed", "unknown_sku",
                       "negative_quantity", None, "malformed", "unknown_sku", "malformed", "malformed",
                       "malformed", None]
    dead = exp[exp["reason"].notna()]
    assert dead["sku"].isna().all() and dead["warehouse"].isna().all() and dead["version"].isna().all()
    assert exp.loc[2, "event_time"] == pd.Timestamp("2026-03-01T10:00:00.123Z")
    assert exp.loc[0, "stock_value"] == 10 * PRICE["SKU-00001"]
    assert exp.loc[16, "product_name"] == load_catalog().set_index("sku").at["SKU-00003", "product_name"]

    state = latest_state(records, exp)
    assert [(r.sku, r.warehouse, int(r.version), int(r.quantity)) for r in state.itertuples()] == [
        ("SKU-00001", "WH-AMS", 3, 7), ("SKU-00002", "WH-BER", 6, 0), ("SKU-00003", "WH-LIS", 1, 2)]
    assert state.loc[0, "offset"] in (1, 3)  # the duplicate: either copy holds the same state


def test_split_gives_each_table_its_columns() -> None:
    frame = pd.DataFrame({"kind": ["stock", "dead"], "sku": ["SKU-00001", None], "warehouse": ["WH-AMS", None],
                          "reason": [None, "malformed"], "topic": ["t", "t"], "partition": [0, 0], "offset": [0, 1],
                          "raw_value": [None, "{"]})
    out = T.split(frame, 7)
    assert set(out) == {STOCK.name, DEAD_LETTER.name}
    assert set(out["stock"].columns) == set(STOCK.column_names) and len(out["stock"]) == 1
    assert set(out["dead_letter"].columns) == set(DEAD_LETTER.column_names)
    assert out["dead_letter"].loc[0, "offset"] == 1 and out["dead_letter"]["batch_id"].tolist() == [7]


def test_producer_versions_rise_per_key_and_faults_come_as_asked() -> None:
    rng = random.Random(15)
    now = datetime(2026, 3, 1, tzinfo=UTC)
    plan = [plan_record(seq, rng, now, malformed_every=10, unknown_every=7, negative_every=5) for seq in range(700)]
    records = records_of([v for _, _, v in plan])
    exp = T.expect(records, None)
    kinds = [k for k, _, _ in plan]
    assert [r if r is not None else "stock" for r in exp["reason"].astype(object).where(exp["reason"].notna(), None)
            ] == [{"malformed": "malformed", "unknown": "unknown_sku", "negative": "negative_quantity",
                   "stock": "stock"}[k] for k in kinds]
    assert kinds.count("malformed") == 70 and kinds.count("unknown") > 0 and kinds.count("negative") > 0
    again = [plan_record(seq, random.Random(15), now) for seq in range(1)]
    assert again[0][2] == plan_record(0, random.Random(15), now)[2]  # deterministic content
    valid = exp[exp["reason"].isna()]
    assert valid.groupby(["sku", "warehouse"])["version"].apply(lambda v: v.is_monotonic_increasing).all()


def test_registry_ships_the_inventory_stream() -> None:
    from rewind.api.contract import load_transform
    from rewind.registry import load_registry

    spec = load_registry(ROOT / "streams.yaml", env={"REWIND_HOME": "/h"}).get("inventory")
    assert spec.topics == ["inventory-updates"] and spec.partitions == 3 and spec.dq_suite == "contract"
    assert spec.sink.url == "sqlite:////h/sink/inventory.db" and spec.checkpoint == "/h/checkpoints/inventory"
    assert isinstance(load_transform(spec), InventoryTransform)


# ------------------------------------------------------------------------------------------ Spark and Kafka

#: Payloads where Spark's JSON parser and Python's json module could part ways (see rewind.inventory.rules).
GOOD = '"sku":"SKU-00001","warehouse":"WH-AMS","quantity":5,"version":%d,"updated_at":"2026-01-01T00:00:00.000Z"'
ODD = [
    b"", b"null", b"[]", b"5", b'"text"', b"\xff\xfe", b"\xef\xbb\xbf{" + (GOOD % 1).encode() + b"}",
    "{" + GOOD % 2 + "} trailing text is ignored", "{" + GOOD % 3 + "}}", "  \n{" + GOOD % 4 + "}",
    "\x0b{" + GOOD % 1 + "}",
    "{" + GOOD % 5 + ",}", "{" + GOOD % 5 + " /* c */}", "{'sku':'SKU-00001'}", "{" + GOOD % 6 + ',"x":NaN}',
    "{" + GOOD % 7 + ',"x":01}', "{" + GOOD % 8 + ',"x":"\\q"}', "{" + GOOD % 9 + ',"x":"\\ud800"}',
    "{" + GOOD % 10 + ',"x":' + "1" * 1000 + "}", "{" + GOOD % 11 + ',"x":' + "1" * 1001 + "}",
    "{" + GOOD % 12 + ',"x":1e999}', "{" + GOOD % 13 + ',"x":' + "[" * 1200 + "]" * 1200 + "}",
    '{"quantity":"q",' + GOOD % 14 + "}", '{"quantity":null,' + GOOD % 15 + "}", "{" + GOOD % 16 + ',"quantity":null}',
    '{"SKU":"SKU-00001","warehouse":"WH-AMS","quantity":5,"version":17,"updated_at":"2026-01-01T00:00:00.000Z"}',
    "{" + (GOOD % 18).replace('"SKU-00001"', '{"a":1}') + "}", "{" + (GOOD % 19).replace('"SKU-00001"', "1") + "}",
    "{" + (GOOD % 20).replace('"SKU-00001"', '"SKU-0000\\u0031"') + "}",
    "{" + (GOOD % 21).replace("2026-01-01", "2023-02-29") + "}",
    "{" + (GOOD % 22).replace("2026-01-01", "2024-02-29") + "}",
    "{" + (GOOD % 23).replace("00:00:00", "24:00:00") + "}", "{" + (GOOD % 24).replace("00:00:00", "23:59:60") + "}",
    "{" + (GOOD % 25).replace(".000Z", ".000Z\\n") + "}", "{" + (GOOD % 26).replace("WH-AMS", "WH-AMS\\n") + "}",
    "{" + (GOOD % 27).replace('"quantity":5', '"quantity":9223372036854775807') + "}",
    "{" + (GOOD % 28).replace('"quantity":5', '"quantity":9223372036854775808') + "}",
    "{" + (GOOD % 29).replace('"quantity":5', '"quantity":5e0') + "}",
    "{" + (GOOD % 30).replace('"quantity":5', '"quantity":true') + "}",
    "{" + (GOOD % 31).replace('"quantity":5', '"quantity":-0') + "}",
    "{" + (GOOD % 32).replace('"warehouse":"WH-AMS"', '"warehouse":"WH-AMS","warehouse":7') + "}",
    "{" + (GOOD % 33).replace('"sku":"SKU-00001"', '"sku":{"a":1},"sku":"SKU-00002"') + "}",
    "{" + GOOD % 34 + ',"_rewind_corrupt_record":"zz"}', "{" + GOOD % 35 + ',"tab":"a\tb"}', None,
    # UTF-8 as Spark's is_valid_utf8 and Python's strict decoder read it: an encoded surrogate, an overlong
    # form and a code point past U+10FFFF are refused; a noncharacter (U+FFFE) is valid
    ("{" + GOOD % 36 + ',"x":"\xed\xa0\x80"}').encode("latin-1"), b"\xc0\x80",
    ("{" + GOOD % 37 + ',"x":"\xf4\x90\x80\x80"}').encode("latin-1"),
    ("{" + GOOD % 38 + ',"x":"\xef\xbf\xbe"}').encode("latin-1"),
]


def send(bootstrap: str, topic: str, values: list[bytes | str | None], partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, v in enumerate(values):
        producer.produce(topic, value=v.encode() if isinstance(v, str) else v, partition=i % partitions)
    assert producer.flush(30) == 0


def kafka_frame(bootstrap: str, topic: str) -> pd.DataFrame:
    from rewind.proof.verify import read_records

    recs = read_records(bootstrap, [topic])
    return pd.DataFrame({"topic": [r.topic for r in recs], "partition": [r.partition for r in recs],
                         "offset": [r.offset for r in recs],
                         "timestamp": pd.Series([r.timestamp_ms for r in recs], dtype="Int64"),
                         "key": [r.key for r in recs], "value": pd.Series([r.value for r in recs], dtype=object)})


def test_build_on_a_bounded_read_writes_what_expect_says(spark, platform, new_topic, tmp_path: Path) -> None:
    from rewind.sink.sql import ExactlyOnceSqlSink

    bootstrap, topic = platform.kafka_bootstrap, new_topic(3, "inv")
    handmade = [payload("SKU-00005", "WH-HAND", 3, 90), payload("SKU-00005", "WH-HAND", 4, 95),
                payload("SKU-00005", "WH-HAND", 1, 80),  # older, later: must not win
                payload("SKU-00005", "WH-HAND", 4, 95), payload("SKU-00006", "WH-HAND", -1, 99)]
    send(bootstrap, topic, [*ODD, *handmade], 3)
    produce_inventory(bootstrap, topic, 900, 3, malformed_every=17, unknown_every=23, negative_every=29, keyless=True,
                      seed=4, version_start=1000)
    records = kafka_frame(bootstrap, topic)
    expected = T.expect(records, None)
    source = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    out = T.build(source, None).toArrow().to_pandas()
    assert len(out) == len(records)

    # record by record: the same verdict, and for a stock update the same values
    got = out.set_index(["partition", "offset"]).sort_index()
    want = pd.concat([records[["partition", "offset"]], expected], axis=1)
    want = want.set_index(["partition", "offset"]).sort_index()
    assert got.index.equals(want.index)
    verdicts = pd.DataFrame({"spark": got["reason"].astype(object).where(got["reason"].notna(), "ok"),
                             "expect": want["reason"].astype(object).where(want["reason"].notna(), "ok")})
    disagree = verdicts[verdicts["spark"] != verdicts["expect"]]
    assert disagree.empty, disagree.join(records.set_index(["partition", "offset"])["value"]).to_string()
    stock = (got["kind"] == "stock").to_numpy()
    values, recomputed = normal(got[stock], by_identity=False), normal(want[stock], by_identity=False)
    assert values.equals(recomputed), values.compare(recomputed).head(20).to_string()
    assert set(verdicts["expect"]) == {"ok", "malformed", "unknown_sku", "negative_quantity"}

    # into the sink, out of order: the later half first, then the earlier half, then everything again (a replay)
    sink = ExactlyOnceSqlSink(f"sqlite:///{tmp_path}/inv.db", "inv", TABLES, table_prefix="inv_")
    try:
        sink.create_tables()
        ordered = out.sort_values(["offset", "partition"]).reset_index(drop=True)
        half = len(ordered) // 2
        sink.write_batch(0, T.split(ordered.iloc[half:], 0))
        sink.write_batch(1, T.split(ordered.iloc[:half], 1))
        sink.write_rows(T.split(ordered, None), replay_id="again")
        table, dead = sink.read_table("stock"), sink.read_table("dead_letter")
    finally:
        sink.dispose()
    state = latest_state(records, expected)
    assert normal(table).equals(normal(state)), normal(table).compare(normal(state)).head(20).to_string()
    assert sink_dead_letters(dead) == dead_letters(records, expected)
    hand = table[(table["sku"] == "SKU-00005") & (table["warehouse"] == "WH-HAND")]
    assert hand["version"].tolist() == [95] and hand["quantity"].tolist() == [4]


# ------------------------------------------------------------------------------------------------ SIGKILL

RECORDS = int(os.environ.get("REWIND_INVENTORY_CRASH_RECORDS", "5000"))
KILLS = 2


def write_registry(path: Path, name: str, topic: str, home: Path, sink_url: str | None = None) -> Path:
    from tests.harness.registry_templates import demo_stream
    from tests.harness.registry_templates import write_registry as write

    return write(path, demo_stream(name, topic, home, max_offsets=400, sink_url=sink_url or f"sqlite:///{home}/sink.db",
                                   transform="rewind.inventory.transform:InventoryTransform", partitions="5",
                                   trigger="1 second", dq_suite="contract"))


@pytest.mark.slow
def test_inventory_exactly_once_under_sigkill(tmp_path: Path, platform, new_topic) -> None:
    """Keyless records on 5 partitions, a ``latest`` table, into Kafka topics through the transactional
    Kafka sink (the contract proof then reads the topics back read_committed). The SQL sink's ``latest``
    rule under re-runs and kills: tests/test_sink.py and tests/test_sink_commit_points.py."""
    from harness.processes import StreamProcess, wait_for

    from rewind.control.status import read_status
    from rewind.driver.runner import open_sink
    from rewind.kafka.lookups import true_end_offsets
    from rewind.paths import status_file
    from rewind.proof.contract_proof import verify_contract_stream
    from rewind.registry import load_registry

    name, topic, home = "inv_crash", new_topic(5, "invcrash"), tmp_path / "home"
    sink_url = f"kafka://{platform.kafka_bootstrap}/{topic}-out."
    spec = load_registry(write_registry(tmp_path / "streams.yaml", name, topic, home, sink_url)).get(name)
    spath = status_file(spec)
    rng = random.Random(int(os.environ.get("REWIND_CRASH_SEED", "7")))
    produced: dict[str, Any] = {}
    producer = threading.Thread(target=lambda: produced.update(produce_inventory(
        platform.kafka_bootstrap, topic, RECORDS, 5, malformed_every=97, unknown_every=89, negative_every=71,
        keyless=True, seed=7, rate=RECORDS / 40).summary()), daemon=True)
    producer.start()
    stream = StreamProcess(tmp_path / "streams.yaml", name, platform.kafka_bootstrap, tmp_path, env=platform.env())
    kills = []
    try:
        for i in range(KILLS):
            stream.start()
            st = read_status(spath)
            before = st.last_batch_id if st else None
            wait_for(lambda: (st := read_status(spath)) is not None and st.last_batch_id is not None
                     and st.last_batch_id != before and st.state == "running", 180, "a new batch", stream)
            time.sleep(rng.uniform(0.5, 3.0))  # mid-batch, mid-commit or idle
            st = read_status(spath)
            stream.kill()
            kills.append({"run": i + 1, "last_batch_seen": st.last_batch_id if st else None})
        producer.join(timeout=120)
        assert not producer.is_alive(), "producer did not finish"
        ends = {str(tp.partition): off for tp, off in true_end_offsets(platform.kafka_bootstrap, topic).items()}
        stream.start()
        wait_for(lambda: (st := read_status(spath)) is not None and st.state == "running"
                 and {p: int(o) for p, o in st.end_offsets.get(topic, {}).items()} == ends, 300,
                 f"catch-up to {ends}", stream)
        stream.stop()
    finally:
        stream.stop()

    report = verify_contract_stream(spec, platform.kafka_bootstrap)
    summary = report.summary()
    (tmp_path / "report.json").write_text(json.dumps({**summary, "kills": kills, "produced": produced}, default=str))
    print(json.dumps({"kills": kills, "produced": produced, "ok": report.ok, **report.counts}, default=str))
    assert len(kills) == KILLS and produced.get("sent") == RECORDS
    assert report.ok, str(report)

    # our own check, without the proof: the latest valid version per identity, every dead letter expected
    records = kafka_frame(platform.kafka_bootstrap, topic)
    expected = T.expect(records, spec)
    out = open_sink(spec)
    try:
        table, dead = out.read_table("stock"), out.read_table("dead_letter")
    finally:
        out.dispose()
    assert len(records) == RECORDS
    state = latest_state(records, expected)
    assert normal(table).equals(normal(state)), normal(table).compare(normal(state)).head(20).to_string()
    assert sink_dead_letters(dead) == dead_letters(records, expected)
    assert {r.split("_")[0] for _, _, _, r in sink_dead_letters(dead)} == {"malformed", "unknown", "negative"}
    assert set(records["partition"]) == set(range(5))
