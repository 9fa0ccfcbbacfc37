"""A savepoint restore re-plans batch ids: a re-planned no-data batch must not be skipped by the sink.

Real services (Apache Kafka, SeaweedFS, Spark, the demo stream, a SQLite sink). The shape of the bug
found with chaos seed 7 (2026-11-23), made deterministic:

- the old run reads one Kafka partition 100 offsets per batch: batches 0 [0,100) and 1 [100,200);
  savepoint at batch 1; then batches 2 [200,300) and 3 [300,400). It stops right after batch 3,
  before any no-data batch: ``spark.sql.streaming.noDataMicroBatches.enabled`` is off for the old
  run, which stands for "stopped for the restore before its next trigger";
- the savepoint is restored and the stream resumed with maxOffsetsPerTrigger 10,000: batch 2 now
  swallows [200,400) (the old 2 and 3), and batch 3 is a no-data batch that ends at 400, where the
  old batch 3 ended, but starts at 400 (not 300) under a higher watermark;
- the event times jump 30 s between offsets 299 and 300, so the re-planned batch 3's watermark
  closes two 10 s windows (x 16 keys = 32 rows) that no batch of the old run ever closed.

With the identity (start, end, watermark) batch 3 is rewritten and the verifier finds every
window; with the old identity (end offsets only) the sink skips it and exactly those 32 window
rows are missing -- the second test pins that, so this test is known to tell the two apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rewind.checkpoints.logs import parse_offsets_file
from rewind.checkpoints.pointer import active_checkpoint
from rewind.checkpoints.savepoints import create_savepoint, restore_savepoint
from rewind.demo.events import make_event
from rewind.embedded.services import PlatformInfo
from rewind.proof.verify import ExactlyOnceReport, verify_stream
from rewind.registry import StreamSpec, load_registry
from rewind.storage import S3Config, S3Storage
from rewind.supervision.observe import running_reason
from tests.harness.registry_templates import demo_stream, write_registry

OLD_LIMIT, NEW_LIMIT = 100, 10_000  # maxOffsetsPerTrigger before and after the restore
WINDOW_S, DELAY_S = 10, 10
KEYS = 16  # make_event's default: every 16 consecutive sequence numbers cover all keys
NO_DATA = "spark.sql.streaming.noDataMicroBatches.enabled"


def event_time(base: datetime, seq: int) -> datetime:
    """100 ms apart from ``base``; from offset 300 on, 30 s further ahead (the watermark jump)."""
    return base + timedelta(milliseconds=100 * seq + (30_000 if seq >= 300 else 0))


def send(bootstrap: str, topic: str, prefix: str, seqs: range, base: datetime) -> list[int]:
    """Demo events to partition 0 with controlled event times; the Kafka timestamp is the event time
    (so nothing is late). Returns the offsets Kafka gave them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    offsets: list[int] = []
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())

    for seq in seqs:
        ev = make_event(prefix, seq, event_time(base, seq), KEYS)
        producer.produce(topic, value=ev.encode(), key=ev.key.encode(), partition=0,
                         timestamp=ms(ev.event_time), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors
    return sorted(offsets)


@contextmanager
def no_data_batches(spark: Any, enabled: bool) -> Iterator[None]:
    before = spark.conf.get(NO_DATA)
    spark.conf.set(NO_DATA, str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.set(NO_DATA, before)


def run_available_now(spark: Any, spec: StreamSpec, bootstrap: str) -> list[int]:
    """Run the stream (build_query) with Trigger.AvailableNow to the end; the batch ids it ran."""
    from rewind.driver.runner import build_query

    query = build_query(spark, spec, bootstrap, available_now=True, checkpoint=active_checkpoint(spec))
    try:
        finished = query.awaitTermination(180)
    finally:
        if query.isActive:
            query.stop()
    assert finished, f"{spec.name}: Trigger.AvailableNow did not finish within 180 s"
    assert query.exception() is None, str(query.exception())
    return [json.loads(p.json)["batchId"] for p in query.recentProgress]


def offsets_of(checkpoint: str | Path, batch: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, the source's offsets) of ``offsets/<batch>``: the demo plan reads the topic once per
    output branch, so the log holds one identical entry per branch."""
    meta, sources = parse_offsets_file((Path(checkpoint) / "offsets" / str(batch)).read_text())
    assert all(s == sources[0] for s in sources), sources
    return meta, sources[0]


def ledger(spec: StreamSpec) -> dict[int, dict[str, Any]]:
    from rewind.driver.runner import open_sink

    sink = open_sink(spec)
    try:
        rows = sink.read_table("rewind_batches")
    finally:
        sink.dispose()
    return {int(r.batch_id): {"rows": json.loads(r.rows_json), "source_offsets": r.source_offsets}
            for r in rows.itertuples() if r.stream == spec.name}


def ms(t: datetime) -> int:
    """Whole milliseconds since the epoch, exactly (no float rounding)."""
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


@dataclass
class Outcome:
    spec: StreamSpec
    topic: str
    base: datetime
    report: ExactlyOnceReport
    ledger: dict[int, dict[str, Any]]
    old_ledger: dict[int, dict[str, Any]]
    windows: pd.DataFrame

    def window_keys(self, starts_s: tuple[int, ...]) -> set[tuple[str, str]]:
        """(window start, key) of every key's window starting ``base + s`` for s in ``starts_s``."""
        return {(str(pd.Timestamp(self.base + timedelta(seconds=s))), f"k{k:03d}") for s in starts_s
                for k in range(KEYS)}


def run_restore_scenario(tmp_path: Path, platform: PlatformInfo, spark: Any, topic: str, name: str,
                         sink: str | None = None) -> Outcome:
    bootstrap = platform.kafka_bootstrap
    entry = dict(partitions="1", window=f"{WINDOW_S} seconds", watermark_delay=f"{DELAY_S} seconds",
                 allowed_lateness="5 seconds", **({"sink": sink} if sink else {}))
    old = load_registry(write_registry(tmp_path / "old.yaml", demo_stream(name, topic, tmp_path, max_offsets=OLD_LIMIT,
                                                                         **entry))).get(name)
    new = load_registry(write_registry(tmp_path / "new.yaml", demo_stream(name, topic, tmp_path, max_offsets=NEW_LIMIT,
                                                                         **entry))).get(name)
    assert (old.checkpoint, old.sink, old.status_dir) == (new.checkpoint, new.sink, new.status_dir)
    store = S3Storage(S3Config.from_platform(platform))
    now = datetime.now(UTC)
    # A window boundary two minutes back: event times in the past, never ahead of the broker's clock.
    base = datetime.fromtimestamp((int(now.timestamp()) // WINDOW_S) * WINDOW_S - 120, UTC)

    # ---- the old run: 100 offsets per batch, savepoint at batch 1, stopped right after batch 3
    assert send(bootstrap, topic, name, range(0, 200), base) == list(range(0, 200))
    with no_data_batches(spark, False):
        assert run_available_now(spark, old, bootstrap) == [0, 1]
        manifest = create_savepoint(old, store)
        assert manifest.batch_id == 1 and manifest.offsets == {topic: {"0": 200}}
        assert send(bootstrap, topic, name, range(200, 400), base) == list(range(200, 400))
        assert run_available_now(spark, old, bootstrap) == [2, 3]
    assert [offsets_of(old.checkpoint, b)[1] for b in (2, 3)] == [{topic: {"0": 300}}, {topic: {"0": 400}}]
    assert not (Path(old.checkpoint) / "offsets" / "4").exists(), "the old run ran no no-data batch"
    old_ledger = ledger(old)
    assert sorted(old_ledger) == [0, 1, 2, 3]
    # Old batch 3 (watermark base+19.9s) closed only the first window; [base+10s, base+30s) stay open.
    assert old_ledger[3]["rows"]["window_results"] == KEYS
    assert sum(r["rows"]["window_results"] for r in old_ledger.values()) == KEYS

    # ---- restore batch 1 and resume with a larger maxOffsetsPerTrigger (no-data batches on)
    restored = restore_savepoint(new, store, manifest.savepoint_id, running=running_reason(new))
    assert active_checkpoint(new) == str(restored.path)
    with no_data_batches(spark, True):
        assert run_available_now(spark, new, bootstrap) == [2, 3]
    (_, end2), (meta3, end3) = offsets_of(restored.path, 2), offsets_of(restored.path, 3)
    assert end2 == end3 == {topic: {"0": 400}}, "batch 2 swallowed the old 2 and 3; 3 is a no-data batch"
    assert end3 == offsets_of(old.checkpoint, 3)[1], "the re-planned batch 3 ends where the old one ended"
    assert meta3["batchWatermarkMs"] == ms(event_time(base, 399)) - DELAY_S * 1000
    assert not (restored.path / "offsets" / "4").exists()

    from rewind.driver.runner import open_sink

    sink = open_sink(new)
    try:
        windows = sink.read_table("window_results")
    finally:
        sink.dispose()
    return Outcome(new, topic, base, verify_stream(new, bootstrap), ledger(new), old_ledger, windows)


@pytest.mark.slow
def test_restore_replanned_no_data_batch_writes_its_windows(  # type: ignore[no-untyped-def]
        tmp_path: Path, platform: PlatformInfo, spark, new_topic) -> None:
    out = run_restore_scenario(tmp_path, platform, spark, new_topic(1, "replan"), "replan_new")
    rep = out.report
    assert rep.ok, str(rep)
    assert rep.kafka_records == rep.distinct_events == rep.sink_events == 400 and rep.sink_dead_letters == 0
    # Every window the final watermark (base+59.9s) closed: base+0, +10, +20 s, each key once, right counts.
    got = {(str(pd.Timestamp(t)), k) for t, k in zip(out.windows["window_start"], out.windows["key"])}
    assert got == out.window_keys((0, 10, 20)) and rep.windows_checked == 3 * KEYS
    assert int(out.windows["event_count"].sum()) == 300
    # The ledger: the re-planned batch 3 was recorded with its new start and watermark.
    topic = out.topic
    assert json.loads(out.ledger[3]["source_offsets"]) == {
        "start": {topic: {"0": 400}}, "end": {topic: {"0": 400}},
        "watermark_ms": ms(event_time(out.base, 399)) - DELAY_S * 1000}
    assert out.ledger[3]["rows"]["window_results"] == 3 * KEYS and out.ledger[3]["rows"]["events"] == 0
    assert json.loads(out.old_ledger[3]["source_offsets"])["start"] == {topic: {"0": 300}}


@pytest.mark.slow
def test_restore_replanned_batch_into_delta(  # type: ignore[no-untyped-def]
        tmp_path: Path, platform: PlatformInfo, spark, new_topic) -> None:
    """The same savepoint restore with the Delta sink written from the executors: the re-planned
    batches are merged again (the ledger row replaced), and every window and record is there once."""
    sink = f'{{url: "delta://{tmp_path}/lake", table_prefix: rd_, write_from: executors}}'
    out = run_restore_scenario(tmp_path, platform, spark, new_topic(1, "replan-delta"), "replan_delta", sink)
    rep = out.report
    assert rep.ok, str(rep)
    assert rep.kafka_records == rep.distinct_events == rep.sink_events == 400 and rep.windows_checked == 3 * KEYS
    assert json.loads(out.ledger[3]["source_offsets"])["start"] == {out.topic: {"0": 400}}
    assert json.loads(out.old_ledger[3]["source_offsets"])["start"] == {out.topic: {"0": 300}}


def end_offsets_only(self: Any, batch_id: int) -> str | None:
    """``BatchWriter.source_offsets`` before the fix: the batch's end offsets only."""
    if self.checkpoint is None:
        return None
    _, sources = parse_offsets_file((Path(self.checkpoint) / "offsets" / str(batch_id)).read_text())
    unique = {json.dumps(s, sort_keys=True) for s in sources}
    return unique.pop() if len(unique) == 1 else json.dumps(sources, sort_keys=True)


@pytest.mark.slow
def test_end_offsets_only_identity_loses_the_windows(  # type: ignore[no-untyped-def]
        tmp_path: Path, platform: PlatformInfo, spark, new_topic, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same scenario under the old identity: the regression test above would fail, naming the
    32 window rows (2 windows x 16 keys) that only the skipped batch 3 would have written."""
    from rewind.driver.runner import BatchWriter

    monkeypatch.setattr(BatchWriter, "source_offsets", end_offsets_only)
    out = run_restore_scenario(tmp_path, platform, spark, new_topic(1, "replan-old"), "replan_old")
    rep = out.report
    topic = out.topic
    assert out.ledger[3]["source_offsets"] == json.dumps({topic: {"0": 400}}), "the old identity was in use"
    assert out.ledger[3] == out.old_ledger[3], "batch 3 was skipped: the ledger still holds the old run's row"
    assert not rep.ok
    groups = [str(m["group"]).split("\x1f") for m in rep.missing_windows]  # a group: window start, key
    lost = {(str(pd.Timestamp(start)), key) for start, key in groups}
    assert lost == out.window_keys((10, 20)) and len(lost) == 32
    # Nothing else is wrong: events are exactly once, and the windows that are there are right.
    assert rep.kafka_records == rep.distinct_events == rep.sink_events == 400
    assert not (rep.missing_events or rep.duplicate_event_rows or rep.unexpected_events or rep.wrong_coordinates
                or rep.missing_dead_letters or rep.unexpected_dead_letters or rep.window_mismatches)
