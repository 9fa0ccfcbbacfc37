"""Nothing silently dropped: records behind the watermark land in the dead-letter table, exactly as
many as Spark's state operators drop, and aligned admission keeps partitions together.

Real Kafka, real stream processes (spark_jobs/stream.py), both sources. The partitions carry event
times skewed by far more than the watermark delay (Kafka timestamps set to match), as after an
outage or under a sticky partitioner's bursts: without late routing, Spark's deduplication drops
the lagging partition's records with nothing but a count, and ``verify`` reports them missing.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from harness.processes import StreamProcess, wait_for

from rewind.control.status import read_status
from rewind.demo.events import make_event
from rewind.driver.late_routing import BEHIND_WATERMARK, late_events_watermark_ms
from rewind.driver.runner import open_sink
from rewind.kafka.lookups import true_end_offsets
from rewind.paths import late_checks_path, status_file
from rewind.proof.verify import verify_stream
from rewind.registry import load_registry
from tests.harness.registry_templates import demo_stream, write_registry

pytestmark = pytest.mark.slow


def produce_at(bootstrap: str, topic: str, plan: dict[int, tuple[datetime, int, float]], prefix: str,
               keyless: bool = False) -> int:
    """Per partition: ``count`` events from ``start``, ``step`` seconds apart, Kafka timestamp = event time.

    ``keyless``: no partition given either (an idempotent producer's sticky partitioner spreads them),
    which is the shape a new user's producer has."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    n = 0
    for partition, (start, count, step) in sorted(plan.items()):
        for i in range(count):
            t = start + timedelta(seconds=i * step)
            ev = make_event(f"{prefix}-p{partition}", i, t)
            where: dict[str, Any] = {} if keyless else {"partition": partition}
            while True:
                try:
                    producer.produce(topic, value=ev.encode(), key=None if keyless else ev.key.encode(),
                                     timestamp=int(t.timestamp() * 1000), **where)
                    break
                except BufferError:
                    producer.poll(0.05)
            n += 1
    assert producer.flush(60) == 0
    return n


def registry(tmp_path: Path, name: str, topic: str, source: str, extra_options: str = "") -> Any:
    home = tmp_path / "home"
    entry = demo_stream(name, topic, home, partitions="4", trigger="1 second", window="5 seconds",
                        watermark_delay="30 seconds", allowed_lateness="20 seconds",
                        source=f"{{format: {source}, options: {{startingOffsets: earliest, maxOffsetsPerTrigger: 1500"
                               f"{extra_options}}}}}")
    path = write_registry(tmp_path / "streams.yaml", entry)
    return path, load_registry(path).get(name)


def run_until_caught_up(stream: StreamProcess, spec: Any, bootstrap: str, topic: str, timeout: float = 300) -> None:
    ends = {str(tp.partition): off for tp, off in true_end_offsets(bootstrap, topic).items()}
    spath = status_file(spec)
    stream.start()
    wait_for(lambda: (st := read_status(spath)) is not None and st.state == "running"
             and {p: int(o) for p, o in st.end_offsets.get(topic, {}).items()} == ends
             and st.last_batch_at is not None and time.time() - st.last_batch_at > 4, timeout,
             f"catch-up to {ends}", stream)
    stream.stop()


def late_checks(spec: Any) -> dict[int, dict[str, Any]]:
    """batch id -> the stream's own check of that batch (the last one, if a batch ran twice)."""
    path = late_checks_path(status_file(spec))
    out: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        row = json.loads(line)
        out[row["batch"]] = row
    return out


def assert_dead_letters_are_what_spark_dropped(spec: Any) -> int:
    """Per batch: behind_watermark rows in the sink == routed == what Spark's operators dropped."""
    checks = late_checks(spec)
    assert checks, "the stream recorded no late checks"
    bad = {b: c for b, c in checks.items() if not c["ok"]}
    assert not bad, f"routed != dropped by the watermark: {bad}"
    sink = open_sink(spec)
    try:
        dead = sink.read_table("dead_letter")
    finally:
        sink.dispose()
    late = dead[dead["reason"] == BEHIND_WATERMARK]
    per_batch = Counter(int(b) for b in late["batch_id"])
    for batch, n in per_batch.items():
        assert batch in checks, f"batch {batch} wrote {n} behind_watermark dead letters but has no check"
        assert checks[batch]["routed"] == n and n in checks[batch]["dropped"], (batch, n, checks[batch])
    for batch, c in checks.items():
        assert per_batch.get(batch, 0) == c["routed"] or c["routed"] == 0 or batch not in per_batch, (batch, c)
    # every such row carries the watermark it was behind (verify checks its event time against it)
    assert late["watermark"].notna().all()
    return len(late)


def test_skewed_partitions_lose_nothing_across_a_restart(tmp_path: Path, platform: Any, new_topic: Any) -> None:
    """Partition 0 holds events 6 minutes older than the other three (more than the 30 s watermark
    delay); the stream reads all four side by side on Rewind's Python source, is SIGKILLed mid-way
    and restarted. (Spark's connector routes late records the same way under SIGKILLs in the chaos
    run's skewed restart, tests/test_chaos.py; this is also the Python source's SIGKILL proof.)"""
    source = "rewind_kafka"
    topic = new_topic(4, "skew")
    now = datetime.now(UTC)
    produced = produce_at(platform.kafka_bootstrap, topic, {
        0: (now - timedelta(minutes=6), 3000, 0.05),
        1: (now - timedelta(seconds=40), 2000, 0.01), 2: (now - timedelta(seconds=40), 2000, 0.01),
        3: (now - timedelta(seconds=40), 2000, 0.01)}, f"skew-{source}")
    produced += produce_at(platform.kafka_bootstrap, topic, {9: (now - timedelta(seconds=30), 1500, 0.01)},
                           f"keyless-{source}", keyless=True)
    path, spec = registry(tmp_path, f"skew_{source}", topic, source)
    stream = StreamProcess(path, spec.name, platform.kafka_bootstrap, tmp_path, env=platform.env())
    spath = status_file(spec)
    stream.start()
    wait_for(lambda: (st := read_status(spath)) is not None and (st.last_batch_id or -1) >= 3, 240,
             "4 batches", stream)
    stream.kill()
    run_until_caught_up(stream, spec, platform.kafka_bootstrap, topic)
    report = verify_stream(spec, platform.kafka_bootstrap)
    print(json.dumps({"source": source, "records": report.kafka_records, "events": report.sink_events,
                      "behind_watermark": report.behind_watermark, "ok": report.ok}))
    assert report.ok, str(report)
    assert report.kafka_records == produced
    assert report.behind_watermark > 0, "the skew did not put records behind the watermark: the test proves nothing"
    assert assert_dead_letters_are_what_spark_dropped(spec) == report.behind_watermark
    st = read_status(spath)
    assert st is not None and st.late_mismatches == []


@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
def test_catch_up_after_an_outage_with_unequal_backlogs(tmp_path: Path, platform: Any, new_topic: Any,
                                                        aligned: bool) -> None:
    """The stream is stopped while four partitions receive backlogs of unequal length spanning
    80 s of event time (more than the 30 s watermark delay), then restarted on the Python source.
    Aligned admission (maxDriftMs 5 s): no record behind the watermark. Unaligned: every record the
    watermark passed is a dead letter with its reason, none is missing."""
    topic = new_topic(4, "catchup")
    now = datetime.now(UTC)
    before = now - timedelta(minutes=5)
    produced = produce_at(platform.kafka_bootstrap, topic, {p: (before, 200, 0.05) for p in range(4)}, "warm")
    options = ", eventTimeAlignment.maxDriftMs: 5000, eventTimeAlignment.idleTimeoutMs: 60000" if aligned else ""
    path, spec = registry(tmp_path, f"catchup_{'on' if aligned else 'off'}", topic, "rewind_kafka", options)
    stream = StreamProcess(path, spec.name, platform.kafka_bootstrap, tmp_path, env=platform.env())
    run_until_caught_up(stream, spec, platform.kafka_bootstrap, topic)  # then the outage
    start = before + timedelta(seconds=20)
    produced += produce_at(platform.kafka_bootstrap, topic, {
        0: (start, 4000, 0.02), 1: (start + timedelta(seconds=30), 2500, 0.02),
        2: (start + timedelta(seconds=60), 1000, 0.02), 3: (start + timedelta(seconds=75), 200, 0.025)}, "backlog")
    run_until_caught_up(stream, spec, platform.kafka_bootstrap, topic, timeout=420)
    report = verify_stream(spec, platform.kafka_bootstrap)
    print(json.dumps({"aligned": aligned, "records": report.kafka_records, "events": report.sink_events,
                      "behind_watermark": report.behind_watermark, "ok": report.ok}))
    assert report.ok, str(report)
    assert report.kafka_records == produced
    routed = assert_dead_letters_are_what_spark_dropped(spec)
    if aligned:
        assert routed == 0, f"{routed} records behind the watermark despite aligned admission"
    else:
        assert routed > 0, "unaligned catch-up put no record behind the watermark: the test proves nothing"


def test_late_events_watermark_is_the_previous_batch_s(tmp_path: Path) -> None:
    """Spark judges lateness in batch N by the watermark of batch N-1 (offsets/N-1)."""
    from rewind.driver.late_routing import WatermarkUnknown

    offsets = tmp_path / "offsets"
    offsets.mkdir()
    for n, wm in ((0, 0), (1, 5_000), (2, 9_000)):
        (offsets / str(n)).write_text(f'v1\n{{"batchWatermarkMs":{wm},"batchTimestampMs":1}}\n{{"t":{{"0":{n}}}}}\n')
    assert [late_events_watermark_ms(tmp_path, n) for n in (0, 1, 2, 3)] == [0, 0, 5_000, 9_000]
    with pytest.raises(WatermarkUnknown, match="offsets/4"):
        late_events_watermark_ms(tmp_path, 5)
