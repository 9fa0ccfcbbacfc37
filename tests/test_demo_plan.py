"""The demo stream's physical plan on a real micro-batch: each Kafka record is read and parsed once.

Spark plans one source scan and one parse per output branch (dead letters, events, windows, and the
late candidates of ``rewind.driver.late_routing``) unless
the branches share the parse's exchange (``rewind.demo.transform._shared_by_every_branch``); this
guards that sharing, and that the stream's output stays exactly-once with it; and that the windows
close and the ids expire when the watermark passes them (a plan whose watermark sat below the shared
exchange ran exactly once but never closed a window: ``_shared_by_every_branch``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from rewind.demo.producer import ProduceSpec, produce
from rewind.registry import load_registry
from tests.harness.registry_templates import demo_stream, write_registry


def test_each_record_is_read_and_parsed_once(  # type: ignore[no-untyped-def]
        tmp_path: Path, platform, spark, new_topic) -> None:
    from rewind.driver.runner import build_query
    from rewind.proof.verify import verify_stream

    topic = new_topic(partitions=3, prefix="plan")
    sent = produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=3000, partitions=3, malformed_every=40,
                                                         late_every=70, duplicate_every=15,
                                                         late_by=timedelta(seconds=40))).sent
    spec = load_registry(write_registry(tmp_path / "s.yaml", demo_stream("plan", topic, tmp_path,
                                                                         max_offsets=100_000))).get("plan")
    # Without the no-data batch that follows, the last execution is the batch that read the data.
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
        query.awaitTermination(300)
    finally:
        spark.conf.set(key, before)
    assert query.exception() is None
    progress = [json.loads(p.json) for p in query.recentProgress]
    assert sum(p["numInputRows"] for p in progress) == sent  # one scan of the source per record
    plan = query._jsq.streamingQuery().lastExecution().executedPlan().toString()
    assert plan.count("MapInArrow") == 1, plan  # one parse, ...
    assert plan.count("ReusedExchange") == 3, plan  # ... read by the three other branches
    rep = verify_stream(spec, platform.kafka_bootstrap)
    assert rep.sink_events == rep.distinct_events > 0 and rep.sink_dead_letters == rep.expected_dead_letters > 0
    assert not (rep.missing_events or rep.unexpected_events or rep.missing_dead_letters or rep.wrong_coordinates
                or rep.duplicate_event_rows or rep.window_mismatches), rep
    # The contract-derived proof (any stream's) reaches the same verdict from DemoTransform's declarations.
    from rewind.proof.contract_proof import verify_contract_stream

    contract = verify_contract_stream(spec, platform.kafka_bootstrap)
    assert contract.ok, contract
    assert contract.counts["records_in_range"] == sent
    assert contract.counts["expected_dead_letters"] == rep.expected_dead_letters
    assert contract.counts["identities"] == rep.distinct_events


def test_windows_close_and_ids_expire_when_the_watermark_passes_them(  # type: ignore[no-untyped-def]
        tmp_path: Path, platform, spark, new_topic) -> None:
    from rewind.driver.runner import build_query
    from rewind.proof.verify import verify_stream

    topic = new_topic(partitions=3, prefix="close")
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=2000, partitions=3, malformed_every=40,
                                                  duplicate_every=15))
    # Then events two minutes ahead: the watermark (max event time - 30 s) passes every earlier window.
    # 1,500 of them, so that data batches follow the one that moves the watermark (no reliance on the
    # no-data batch).
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=1500, partitions=3, start_seq=5000,
                                                  late_every=1, late_by=timedelta(seconds=-120)))
    spec = load_registry(write_registry(tmp_path / "s.yaml", demo_stream("close", topic, tmp_path,
                                                                         max_offsets=1000))).get("close")
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
    query.awaitTermination(300)
    assert query.exception() is None
    removed: dict[int, int] = {}
    for p in query.recentProgress:
        for i, op in enumerate(json.loads(p.json)["stateOperators"]):
            removed[i] = removed.get(i, 0) + op["numRowsRemoved"]
    assert len(removed) == 3 and all(n > 0 for n in removed.values()), removed  # both deduplications and the windows
    rep = verify_stream(spec, platform.kafka_bootstrap)
    assert rep.windows_checked > 0, rep
    assert not (rep.missing_windows or rep.window_mismatches or rep.missing_events or rep.duplicate_event_rows), rep


def test_a_replays_plan_has_no_window_branch_and_its_events_name_the_same_windows(  # type: ignore[no-untyped-def]
        tmp_path: Path, spark) -> None:
    """A replay leaves the transform's window rows out of its plan (``rewind.replay.chunks.without_kinds``)
    and learns the windows its events touch from the events (``rewind.replay.recompute.touched_groups``:
    the demo declares its window measures over the events' columns). On a bounded batch of
    demo records (keyless and keyed, duplicates, malformed, events a few windows apart, a key with
    odd characters): the filtered output is the full output without its window rows, row for row;
    Spark plans no aggregation for it beyond the deduplication; and the events' pairs are exactly
    the window rows' pairs."""
    from datetime import UTC, datetime

    import pandas as pd

    from rewind.api.tables import TableSpec
    from rewind.demo.events import make_event, malformed_payload
    from rewind.demo.transform import DemoTransform
    from rewind.proof.aggregates import group_text
    from rewind.replay.chunks import without_kinds
    from rewind.replay.recompute import from_identity_rows, touched_groups

    spec = load_registry(write_registry(tmp_path / "s.yaml", demo_stream(
        "rplan", "t", tmp_path, window="3 seconds", watermark_delay="1 second"))).get("rplan")
    base = datetime(2026, 11, 25, 12, 0, 0, 400_000, tzinfo=UTC)
    rows = []
    for i in range(400):
        ev = make_event("rp", i, base + timedelta(milliseconds=37 * i), keys=7)
        value = malformed_payload(i) if i % 53 == 0 else ev.encode()
        key = None if i % 3 == 0 else ev.key.encode()
        copies = 2 if i % 11 == 0 else 1  # a producer's retry: the same record twice
        for _ in range(copies):
            rows.append((key, value, "t", i % 4, len(rows), base + timedelta(milliseconds=37 * i + 5), 0))
    source = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset bigint, "
                                         "timestamp timestamp, timestampType int")
    demo = DemoTransform()
    tables: dict[str, TableSpec] = {t.name: t for t in demo.tables}
    by_identity = from_identity_rows(demo, tables)
    assert [a.table for a in by_identity] == ["window_results"]
    full = demo.build(source, spec)
    replayed = without_kinds(full, [a.output_kind for a in by_identity])

    def table(df) -> pd.DataFrame:  # type: ignore[no-untyped-def]
        return df.toPandas().sort_values(["kind", "topic", "partition", "offset"], na_position="first",
                                         ignore_index=True)

    whole, without = table(full), table(replayed)
    assert set(whole["kind"]) == {"dead", "event", "window"} and "window" not in set(without["kind"])
    # (row for row; the full frame holds NULL partitions of window rows, so its ints are floats)
    pd.testing.assert_frame_equal(whole[whole["kind"] != "window"].reset_index(drop=True), without, check_dtype=False)
    def aggregates(df) -> int:  # type: ignore[no-untyped-def]
        return str(df._jdf.queryExecution().optimizedPlan().toString()).count("Aggregate")

    assert aggregates(full) == 3 and aggregates(replayed) == 1  # two deduplications and the windows; one
    windows = whole[whole["kind"] == "window"]
    assert len(windows) > 10
    touched: dict = {}
    touched_groups(demo, spec, demo.split(without, None), by_identity, touched)
    assert set(touched["window_results"]) == set(group_text(windows, demo.aggregates[0]))
