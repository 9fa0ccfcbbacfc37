"""One conformance suite for both Kafka sources, Spark's connector (``kafka``) and Rewind's Python
source (``rewind_kafka``), on the real Apache Kafka broker: DESIGN.md "The two Kafka sources".

Every test runs once per source and checks the data record by record: the (topic, partition,
offset) of every row against what the producer's delivery reports said, and key and value with
it. Streaming tests write through ``foreachBatch`` into a ``Capture`` that keeps every attempt of
every batch, so a test can tell a batch that was re-run after a restart from one that was read
twice, and can check each batch against the offsets Spark logged for it (``offsets/N``).

Where the sources legitimately differ (error text and exception class) the tests assert the
common contract only: the query fails or not, and which records are read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from harness.kafka_records import (
    Coord,
    Delivered,
    DeliveryLog,
    Record,
    delete_before,
    produce,
    produce_transactions,
    transactional_producer,
)

SOURCES = ("kafka", "rewind_kafka")


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> str:
    return request.param


# -- reading --------------------------------------------------------------------------------------


def options(bootstrap: str, topics: str, extra: Mapping[str, Any]) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topics, **{k: str(v) for k, v in extra.items()}}


def stream(spark: Any, source: str, bootstrap: str, topics: str, **extra: Any) -> Any:
    return spark.readStream.format(source).options(**options(bootstrap, topics, extra)).load()


def batch_read(spark: Any, source: str, bootstrap: str, topics: str, **extra: Any) -> dict[Coord, Record]:
    df = spark.read.format(source).options(**options(bootstrap, topics, extra)).load()
    return rows_by_coord(df.select("topic", "partition", "offset", "key", "value").collect())


def rows_by_coord(rows: list[Any]) -> dict[Coord, Record]:
    """Rows keyed by their coordinates; a coordinate read twice is a failure here already."""
    out = {(r.topic, r.partition, r.offset): (r.key, r.value) for r in rows}
    assert len(out) == len(rows), "a record was read twice"
    return out


class Capture:
    """A ``foreachBatch`` sink that keeps every attempt of every batch, in order.

    A batch that is run again after a restart (same id) replaces its earlier output in
    ``final()``, as an idempotent sink would; ``fail_once`` batch ids raise after they were read
    (a crash in the middle of a batch, after its offsets were logged), once each.
    """

    def __init__(self, fail_once: Iterable[int] = (), after_batch: Callable[[int], None] | None = None) -> None:
        self.attempts: list[tuple[int, dict[Coord, Record]]] = []
        self.fail_once = set(fail_once)
        self.after_batch = after_batch
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = rows_by_coord(df.select("topic", "partition", "offset", "key", "value").collect())
        with self.lock:
            self.attempts.append((batch_id, rows))
        if batch_id in self.fail_once:
            self.fail_once.discard(batch_id)
            raise RuntimeError(f"injected failure in batch {batch_id}")
        if self.after_batch is not None:
            self.after_batch(batch_id)

    def final(self) -> dict[int, dict[Coord, Record]]:
        with self.lock:
            return {batch_id: rows for batch_id, rows in self.attempts}

    def ids(self) -> list[int]:
        with self.lock:
            return [batch_id for batch_id, _ in self.attempts]


def start_query(df: Any, checkpoint: Path, capture: Capture, available_now: bool = True) -> Any:
    writer = df.writeStream.foreachBatch(capture).option("checkpointLocation", str(checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def run_available_now(df: Any, checkpoint: Path, capture: Capture, timeout: float = 240) -> None:
    """Run an availableNow query to its end; its failure is raised (StreamingQueryException)."""
    query = start_query(df, checkpoint, capture)
    try:
        assert query.awaitTermination(timeout), "streaming query did not finish"
    finally:
        query.stop()


def offset_log(checkpoint: Path) -> dict[int, tuple[str, dict[str, dict[str, int]]]]:
    """Batch id -> (text, JSON) of the source's offsets in ``offsets/N`` (its third line)."""
    out = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            lines = f.read_text().splitlines()
            assert lines[0] == "v1" and len(lines) == 3, lines
            out[int(f.name)] = (lines[2], json.loads(lines[2]))
    return out


def logged_offsets(checkpoint: Path) -> dict[int, dict[tuple[str, int], int]]:
    return {b: {(t, int(p)): off for t, parts in js.items() for p, off in parts.items()}
            for b, (_, js) in offset_log(checkpoint).items()}


def committed_ids(checkpoint: Path) -> set[int]:
    return {int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit()}


def check_batches(checkpoint: Path, capture: Capture, produced: Delivered,
                  initial: Mapping[tuple[str, int], int], limit: int | None = None) -> dict[int, dict[Coord, Record]]:
    """The invariants of a finished query, batch by batch:

    - every batch in the offset log was committed and written (its last attempt is its output),
      and a batch run more than once (a restart) read the same records every time;
    - a batch's rows are exactly the produced records in ``[offsets/N-1, offsets/N)`` of each
      partition (``initial`` before batch 0), with their keys and values;
    - with ``limit`` (maxOffsetsPerTrigger), no batch spans more offsets than it.
    Returns the final output of each batch.
    """
    logged = logged_offsets(checkpoint)
    final = capture.final()
    for batch_id, rows in capture.attempts:
        assert rows == final[batch_id], f"batch {batch_id} read other records when it ran again"
    assert sorted(logged) == list(range(len(logged))), sorted(logged)
    assert committed_ids(checkpoint) == set(logged)
    assert set(final) == set(logged), (sorted(final), sorted(logged))
    for b in sorted(logged):
        start = dict(initial) if b == 0 else logged[b - 1]
        end = logged[b]
        assert all(end[tp] >= start.get(tp, 0) for tp in end), (b, start, end)
        expected = {c: r for c, r in produced.items()
                    if (c[0], c[1]) in end and start.get((c[0], c[1]), 0) <= c[2] < end[(c[0], c[1])]}
        assert final[b] == expected, f"batch {b}: rows differ from the produced records in {start} -> {end}"
        if limit is not None:
            span = sum(end[tp] - start.get(tp, 0) for tp in end)
            assert 0 < span <= limit, f"batch {b} spans {span} offsets, limit {limit}"
    return final


def union(batches: Mapping[int, Mapping[Coord, Record]]) -> Delivered:
    out: Delivered = {}
    for b in sorted(batches):
        dup = set(out) & set(batches[b])
        assert not dup, f"batch {b} read records again: {sorted(dup)[:5]}"
        out.update(batches[b])
    return out


def tps(topic: str, partitions: int, offset: int = 0) -> dict[tuple[str, int], int]:
    return {(topic, p): offset for p in range(partitions)}


def ends_of(produced: Delivered) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for t, p, o in produced:
        out[(t, p)] = max(out.get((t, p), 0), o + 1)
    return out


# -- columns and the offset log ----------------------------------------------------------------


def test_columns_are_spark_kafka_columns(spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str],
                                         source: str) -> None:
    topic = new_topic(1, "cols")
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    stamp = (int(time.time()) - 60) * 1000 + 123
    p.produce(topic, key=b"k", value=b"v", partition=0, timestamp=stamp,
              headers=[("h", b"1"), ("none", None)])
    p.produce(topic, value=None, partition=0)
    assert p.flush(30) == 0
    df = spark.read.format(source).options(**options(kafka_bootstrap, topic, {})).load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    rows = df.orderBy("offset").collect()
    assert [(r.key, r.value, r.topic, r.partition, r.offset, r.timestampType) for r in rows] == [
        (b"k", b"v", topic, 0, 0, 0), (None, None, topic, 0, 1, 0)]
    assert round(rows[0].timestamp.timestamp() * 1000) == stamp
    with_headers = (spark.read.format(source).options(**options(kafka_bootstrap, topic, {}))
                    .option("includeHeaders", "true").load())
    assert with_headers.schema.fields[-1].name == "headers"
    assert with_headers.schema.fields[-1].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    first = with_headers.orderBy("offset").collect()[0]
    assert [(h.key, h.value) for h in first.headers] == [("h", b"1"), ("none", None)]


def test_stream_logs_offsets_and_reads_every_record_once(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    """Two topics, one keyed round robin, one keyless from an idempotent producer with the
    client's default (sticky) partitioner; a second run on the same checkpoint reads only what
    was produced after the first."""
    keyed = new_topic(3, "keyed")
    sticky = new_topic(4, "sticky")
    produced = produce(kafka_bootstrap, keyed, 600, 3)
    produced |= produce(kafka_bootstrap, sticky, 600, None, keyed=False, idempotent=True, flush_every=50,
                        pause=0.03)
    per_partition = {p: sum(1 for t, q, _ in produced if t == sticky and q == p) for p in range(4)}
    assert sum(1 for n in per_partition.values() if n) >= 2, per_partition  # sticky, but not all in one

    checkpoint = tmp_path / "ck"
    capture = Capture()
    topics = f"{keyed},{sticky}"
    run_available_now(stream(spark, source, kafka_bootstrap, topics, startingOffsets="earliest"), checkpoint, capture)
    log = offset_log(checkpoint)
    assert sorted(log) == [0]
    text, js = log[0]
    assert js == {keyed: {str(p): 200 for p in range(3)},
                  sticky: {str(p): per_partition[p] for p in range(4)}}
    assert all(type(v) is int for parts in js.values() for v in parts.values())
    # Same JSON, not the same text: Spark writes it compact in hash order, PySpark's runner with
    # json.dumps (spaces after ':' and ','), in the source's sorted order.
    assert text.replace(" ", "") in (json.dumps(js, separators=(",", ":")),
                                     json.dumps(dict(reversed(js.items())), separators=(",", ":")))
    initial = tps(keyed, 3) | tps(sticky, 4)
    assert union(check_batches(checkpoint, capture, produced, initial)) == produced

    # More records, then the same query again: only the new ones, in batch 1.
    produced |= produce(kafka_bootstrap, keyed, 90, 3, start=600)
    produced |= produce(kafka_bootstrap, sticky, 50, None, start=600, keyed=False, idempotent=True)
    run_available_now(stream(spark, source, kafka_bootstrap, topics, startingOffsets="earliest"), checkpoint, capture)
    assert sorted(offset_log(checkpoint)) == [0, 1]
    final = check_batches(checkpoint, capture, produced, initial)
    assert len(final[1]) == 140
    assert union(final) == produced
    assert capture.ids() == [0, 1]  # no batch ran twice


# -- restarts: every record exactly once ---------------------------------------------------------


def test_restart_rereads_exactly_the_uncommitted_batch(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    """Stop a running query between (or during) batches, restart it; then drop the commit of the
    last batch (a crash after its offsets were logged) and restart: that batch is planned again
    with the logged offsets, records produced meanwhile go to the next batch, and across all runs
    every record is read exactly once."""
    topic = new_topic(3, "restart")
    produced = produce(kafka_bootstrap, topic, 900, 3)
    checkpoint = tmp_path / "ck"
    limit = 120
    two_done = threading.Event()

    def slowly(batch_id: int) -> None:  # the stop below lands in a batch or between two
        if batch_id >= 1:
            two_done.set()
        time.sleep(0.2)

    capture = Capture(after_batch=slowly)

    def df() -> Any:
        return stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=limit)

    query = start_query(df(), checkpoint, capture, available_now=False)
    try:
        assert two_done.wait(180), "the running query did not get through two batches"
    finally:
        query.stop()
    assert len(offset_log(checkpoint)) >= 2

    run_available_now(df(), checkpoint, capture)
    initial = tps(topic, 3)
    assert union(check_batches(checkpoint, capture, produced, initial, limit)) == produced

    # A crash after offsets/N was written: N not committed. Meanwhile more records arrive.
    logged = offset_log(checkpoint)
    last = max(logged)
    last_rows = capture.final()[last]
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    produced |= produce(kafka_bootstrap, topic, 150, 3, start=900)
    attempts_before = len(capture.attempts)
    run_available_now(df(), checkpoint, capture)
    rerun = capture.attempts[attempts_before]
    assert rerun[0] == last, "the restarted query did not begin with the uncommitted batch"
    assert rerun[1] == last_rows, "the re-planned batch read other records"
    assert offset_log(checkpoint)[last] == logged[last], "the re-planned batch has other offsets"
    final = check_batches(checkpoint, capture, produced, initial, limit)
    assert max(final) > last
    assert union(final) == produced


def test_failed_batch_is_replanned_with_its_logged_offsets(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    """The sink fails in the middle of batch 1 (after its offsets were logged): the query stops
    with the error; restarted, it runs batch 1 again on the same offsets, then goes on."""
    topic = new_topic(2, "crash")
    produced = produce(kafka_bootstrap, topic, 500, 2)
    checkpoint = tmp_path / "ck"
    capture = Capture(fail_once=[1])

    def df() -> Any:
        return stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=200)

    with pytest.raises(Exception, match="injected failure in batch 1"):
        run_available_now(df(), checkpoint, capture)
    assert sorted(offset_log(checkpoint)) == [0, 1] and committed_ids(checkpoint) == {0}
    logged_1 = offset_log(checkpoint)[1]
    first_try = capture.final()[1]

    run_available_now(df(), checkpoint, capture)
    assert capture.ids()[:3] == [0, 1, 1]
    assert capture.attempts[2][1] == first_try
    assert offset_log(checkpoint)[1] == logged_1
    final = check_batches(checkpoint, capture, produced, tps(topic, 2), 200)
    assert union(final) == produced and len(final) == 3


def test_partitions_added_to_a_topic_are_read_from_their_start(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    topic = new_topic(2, "grow")
    produced = produce(kafka_bootstrap, topic, 40, 2)
    checkpoint = tmp_path / "ck"
    capture = Capture()
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest"), checkpoint, capture)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.create_partitions([NewPartitions(topic, 4)]).values():
        fut.result(timeout=30)
    produced |= produce(kafka_bootstrap, topic, 80, 4, start=40)
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest"), checkpoint, capture)
    final = check_batches(checkpoint, capture, produced, tps(topic, 2))
    assert union(final) == produced
    assert set(logged_offsets(checkpoint)[max(final)]) == set(tps(topic, 4))


def test_a_checkpoint_moves_from_one_source_to_the_other(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    """Both sources log the same offsets, so a stream switched from one to the other (same
    checkpoint) goes on where it was: every record once, in both directions."""
    topic = new_topic(3, "switch")
    produced: Delivered = {}
    checkpoint = tmp_path / "ck"
    capture = Capture()
    for n, source in enumerate(["kafka", "rewind_kafka", "kafka"]):
        produced |= produce(kafka_bootstrap, topic, 150, 3, start=150 * n)
        run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest",
                                 maxOffsetsPerTrigger=100), checkpoint, capture)
        final = check_batches(checkpoint, capture, produced, tps(topic, 3), 100)
        assert union(final) == produced, source


# -- maxOffsetsPerTrigger ------------------------------------------------------------------------


@pytest.mark.parametrize("partitions, skewed", [(1, False), (3, True), (7, True)])
def test_max_offsets_per_trigger_bounds_every_batch(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path,
        partitions: int, skewed: bool) -> None:
    """Each batch spans at most ``maxOffsetsPerTrigger`` offsets over all partitions, also when one
    partition holds ten times the backlog of each other one."""
    topic = new_topic(partitions, f"rate{partitions}")
    if skewed:
        # partition 0 gets 10 of every (10 + partitions - 1) records
        cycle = 10 + partitions - 1
        produced = produce(kafka_bootstrap, topic, 100 * cycle, lambda i: 0 if i % cycle < 10 else i % cycle - 9)
        counts = ends_of(produced)
        assert counts[(topic, 0)] == 10 * counts[(topic, 1)]
    else:
        produced = produce(kafka_bootstrap, topic, 700, partitions)
    limit = 97
    checkpoint = tmp_path / "ck"
    capture = Capture()
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest",
                             maxOffsetsPerTrigger=limit), checkpoint, capture)
    final = check_batches(checkpoint, capture, produced, tps(topic, partitions), limit)
    assert len(final) >= -(-len(produced) // limit)
    assert union(final) == produced


# -- where a read starts and ends ----------------------------------------------------------------


def test_stream_starting_positions(spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str,
                                   tmp_path: Path) -> None:
    """earliest, per-partition JSON with -2/-1, startingTimestamp, startingOffsetsByTimestamp; the
    starting position only counts for a new checkpoint."""
    topic = new_topic(3, "start")
    base = int(time.time() * 1000) - 600_000
    produced = produce(kafka_bootstrap, topic, 300, 3, timestamp=lambda i: base + 10 * i)
    # partition p holds i = p, p + 3, ...: offset o of p is record i = 3 * o + p, at base + 10 * i.
    cut = base + 10 * 150  # records i >= 150, i.e. offsets >= 50 in every partition

    cases: dict[str, tuple[dict[str, Any], Callable[[Coord], bool]]] = {
        "earliest": ({"startingOffsets": "earliest"}, lambda c: True),
        "json": ({"startingOffsets": json.dumps({topic: {"0": -2, "1": 40, "2": -1}})},
                 lambda c: c[1] == 0 or (c[1] == 1 and c[2] >= 40)),
        "timestamp": ({"startingTimestamp": cut}, lambda c: c[2] >= 50),
        "by_timestamp": ({"startingOffsetsByTimestamp": json.dumps({topic: {"0": cut, "1": 0, "2": base + 10 * 299}})},
                         lambda c: (c[1] == 0 and c[2] >= 50) or c[1] == 1 or (c[1] == 2 and c[2] >= 99)),
    }
    checkpoints = {name: tmp_path / name for name in cases}
    captures = {name: Capture() for name in cases}
    for name, (opts, wanted) in cases.items():
        run_available_now(stream(spark, source, kafka_bootstrap, topic, **opts), checkpoints[name], captures[name])
        got = union(captures[name].final())
        assert got == {c: r for c, r in produced.items() if wanted(c)}, name

    # A restart keeps the checkpoint's offsets whatever the starting position says.
    more = produce(kafka_bootstrap, topic, 30, 3, start=300, timestamp=lambda i: base + 10 * i)
    for name, (opts, _) in cases.items():
        before = len(captures[name].final())
        run_available_now(stream(spark, source, kafka_bootstrap, topic, **opts), checkpoints[name], captures[name])
        new = {c: r for b, rows in captures[name].final().items() if b >= before for c, r in rows.items()}
        assert new == more, name


def test_stream_starting_latest(spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str,
                                tmp_path: Path) -> None:
    """startingOffsets=latest: records produced before the query started are not read, those
    produced while it runs are, and a restart goes on from the checkpoint."""
    topic = new_topic(3, "latest")
    produce(kafka_bootstrap, topic, 90, 3)
    checkpoint = tmp_path / "ck"
    capture = Capture()
    df = stream(spark, source, kafka_bootstrap, topic, startingOffsets="latest")
    query = start_query(df, checkpoint, capture, available_now=False)
    try:
        query.processAllAvailable()
        assert union(capture.final()) == {}
        after = produce(kafka_bootstrap, topic, 60, 3, start=90)
        query.processAllAvailable()
        assert union(capture.final()) == after
    finally:
        query.stop()
    after |= produce(kafka_bootstrap, topic, 30, 3, start=150)
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="latest"), checkpoint, capture)
    assert union(capture.final()) == after
    check_batches(checkpoint, capture, after, tps(topic, 3, 30))


def test_stream_starting_latest_survives_a_run_without_batches(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    """startingOffsets=latest on an availableNow run that finds nothing to read: both sources log
    an empty batch 0 at the latest offsets, so the next run of the same checkpoint reads the
    records produced in between (instead of resolving "latest" anew)."""
    topic = new_topic(2, "latest0")
    produce(kafka_bootstrap, topic, 40, 2)
    checkpoint = tmp_path / "ck"
    capture = Capture()
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="latest"), checkpoint, capture)
    assert union(capture.final()) == {}
    assert logged_offsets(checkpoint)[max(capture.final())] == tps(topic, 2, 20)
    after = produce(kafka_bootstrap, topic, 20, 2, start=40)
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="latest"), checkpoint, capture)
    assert union(capture.final()) == after


def test_batch_read_ranges(spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str) -> None:
    """spark.read: earliest to latest by default; startingOffsets / endingOffsets JSON with -2 / -1;
    startingTimestamp, startingOffsetsByTimestamp, endingOffsetsByTimestamp."""
    topic = new_topic(2, "batch")
    base = int(time.time() * 1000) - 600_000
    produced = produce(kafka_bootstrap, topic, 400, 2, timestamp=lambda i: base + 10 * i)
    # offset o of partition p is record i = 2 * o + p, at base + 10 * i.

    def pick(wanted: Callable[[int, int], bool]) -> Delivered:
        return {c: r for c, r in produced.items() if wanted(c[1], c[2])}

    read = lambda **opts: batch_read(spark, source, kafka_bootstrap, topic, **opts)  # noqa: E731
    assert read() == produced
    assert read(startingOffsets="earliest", endingOffsets="latest") == produced
    assert read(startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
                endingOffsets=json.dumps({topic: {"0": 50, "1": -1}})) == pick(
        lambda p, o: (p == 0 and 10 <= o < 50) or p == 1)
    assert read(endingOffsets=json.dumps({topic: {"0": 0, "1": 3}})) == pick(lambda p, o: p == 1 and o < 3)
    assert read(startingTimestamp=base + 10 * 300) == pick(lambda p, o: o >= 150)
    assert read(startingOffsetsByTimestamp=json.dumps({topic: {"0": base + 10 * 100, "1": 0}})) == pick(
        lambda p, o: p == 1 or o >= 50)
    # Ending by timestamp: up to (not including) the first record at or after it; a timestamp
    # after every record means the end.
    assert read(endingOffsetsByTimestamp=json.dumps({topic: {"0": base + 10 * 100, "1": base + 10 * 1000}})) == pick(
        lambda p, o: p == 1 or o < 50)
    assert read(startingTimestamp=base + 10 * 100, endingOffsetsByTimestamp=json.dumps(
        {topic: {"0": base + 10 * 200, "1": base + 10 * 201}})) == pick(lambda p, o: 50 <= o < 100)
    # No record at or after startingTimestamp: an error, or the end with the "latest" strategy.
    after_all = base + 10 * 1000
    with pytest.raises(Exception):
        read(startingTimestamp=after_all)
    assert read(startingTimestamp=after_all, startingOffsetsByTimestampStrategy="latest") == {}


# -- transactions ------------------------------------------------------------------------------


def test_read_committed_reads_exactly_the_committed_records(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    """Committed and aborted transactions interleaved with plain records: markers and aborted
    records take offsets, so data offsets have gaps and batch ranges end on them. With
    read_committed a stream (rate-limited, so its ranges end anywhere) and a batch read see the
    committed and plain records only; with read_uncommitted, the aborted ones too."""
    topic = new_topic(3, "txn")
    producer = transactional_producer(kafka_bootstrap, topic)
    tx = produce_transactions(kafka_bootstrap, topic, 3, [(True, 7), (False, 5), (True, 1), (False, 1), (True, 9)],
                              producer=producer)
    plain = produce(kafka_bootstrap, topic, 30, 3)
    produce_transactions(kafka_bootstrap, topic, 3, [(False, 4), (True, 6), (True, 2), (False, 3)], tx, producer)
    committed = tx.committed | plain
    for tp, end in ends_of(committed | tx.aborted).items():  # gaps: 9 markers, aborted records
        assert end - sum(1 for c in committed if c[:2] == tp) == 8 + 13, tp

    committed_opt = {"kafka.isolation.level": "read_committed"}
    assert batch_read(spark, source, kafka_bootstrap, topic, **committed_opt) == committed
    assert batch_read(spark, source, kafka_bootstrap, topic,
                      **{"kafka.isolation.level": "read_uncommitted"}) == committed | tx.aborted

    checkpoint = tmp_path / "ck"
    capture = Capture()
    df = stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=29,
                **committed_opt)
    run_available_now(df, checkpoint, capture)
    final = check_batches(checkpoint, capture, committed, tps(topic, 3), 29)
    assert union(final) == committed
    # The stream ends at the log's end, past the trailing abort markers.
    log_end = {tp: end + 1 for tp, end in ends_of(committed | tx.aborted).items()}
    assert logged_offsets(checkpoint)[max(final)] == log_end

    # An open transaction: read_committed stops before it; once it commits, the next run reads it.
    producer.begin_transaction()
    pending = DeliveryLog()
    for p in range(3):
        producer.produce(topic, value=b"open", partition=p, on_delivery=pending)
    producer.flush(30)
    late = produce(kafka_bootstrap, topic, 6, 3, start=30)
    batches_before = len(final)
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest", **committed_opt),
                      checkpoint, capture)
    assert union({b: r for b, r in capture.final().items() if b >= batches_before}) == {}
    producer.commit_transaction(30)
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest", **committed_opt),
                      checkpoint, capture)
    committed |= pending.records | late
    assert union(capture.final()) == committed
    check_batches(checkpoint, capture, committed, tps(topic, 3))


def test_default_isolation_level_is_the_java_clients(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str) -> None:
    """Without kafka.isolation.level both sources read like the Java client (read_uncommitted):
    switching the source does not change which records a stream reads."""
    topic = new_topic(1, "iso")
    tx = produce_transactions(kafka_bootstrap, topic, 1, [(True, 3), (False, 4), (True, 2)])
    assert batch_read(spark, source, kafka_bootstrap, topic) == tx.committed | tx.aborted


# -- data loss -----------------------------------------------------------------------------------


def test_fail_on_data_loss_after_records_were_deleted(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    """Two queries read a topic to its end. Retention deleting records already read is no loss.
    Then more records arrive and a prefix of them is deleted before the queries run again:
    failOnDataLoss=true fails the query (a data-loss error) and commits nothing more; false goes
    on from the earliest offset and reads all that is left."""
    topic = new_topic(2, "loss")
    produced = produce(kafka_bootstrap, topic, 200, 2)
    queries = {"true": (tmp_path / "strict", Capture()), "false": (tmp_path / "lenient", Capture())}

    def df(fail: str) -> Any:
        return stream(spark, source, kafka_bootstrap, topic, startingOffsets="earliest", failOnDataLoss=fail)

    for fail, (ck, capture) in queries.items():
        run_available_now(df(fail), ck, capture)
        assert union(capture.final()) == produced
    first = dict(produced)

    ck, capture = queries["true"]
    delete_before(kafka_bootstrap, topic, {0: 100, 1: 60})  # read already: no loss
    produced |= produce(kafka_bootstrap, topic, 20, 2, start=200)
    run_available_now(df("true"), ck, capture)
    assert union(capture.final()) == produced and committed_ids(ck) == {0, 1}

    more = produce(kafka_bootstrap, topic, 200, 2, start=220)
    delete_before(kafka_bootstrap, topic, {0: 160, 1: 130})  # partition 0 loses 50 unread, 1 loses 20
    left = {c: r for c, r in more.items() if c[2] >= (160 if c[1] == 0 else 130)}

    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(df("true"), ck, capture)
    assert committed_ids(ck) == {0, 1}
    assert not set(union(capture.final())) & (set(more) - set(left)), "deleted records were read"

    ck, capture = queries["false"]
    run_available_now(df("false"), ck, capture)
    assert union(capture.final()) == first | left  # it did not run in between: those 20 are gone too

    # Batch reads: a start below the earliest retained offset.
    below = json.dumps({topic: {"0": 100, "1": -2}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        batch_read(spark, source, kafka_bootstrap, topic, startingOffsets=below)
    assert batch_read(spark, source, kafka_bootstrap, topic, startingOffsets=below, failOnDataLoss="false") == left
    assert batch_read(spark, source, kafka_bootstrap, topic) == left


def test_start_beyond_the_end_of_a_partition(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], source: str, tmp_path: Path) -> None:
    """A start beyond a partition's end is what a checkpoint sees after its topic was truncated or
    recreated. failOnDataLoss=true: the stream fails. false: it goes on from the partition's end
    (the records below it are skipped, so a truncated partition is not read twice), reading what
    comes next. A batch read fails either way."""
    topic = new_topic(1, "beyond")
    produce(kafka_bootstrap, topic, 10, 1)
    beyond = json.dumps({topic: {"0": 500}})
    with pytest.raises(Exception):
        run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets=beyond), tmp_path / "strict",
                          Capture())
    for fail in ("true", "false"):
        with pytest.raises(Exception):
            batch_read(spark, source, kafka_bootstrap, topic, startingOffsets=beyond, failOnDataLoss=fail)

    checkpoint, capture = tmp_path / "lenient", Capture()
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets=beyond, failOnDataLoss="false"),
                      checkpoint, capture)
    assert union(capture.final()) == {}
    assert logged_offsets(checkpoint)[max(capture.final())] == {(topic, 0): 10}
    after = produce(kafka_bootstrap, topic, 5, 1, start=10)
    run_available_now(stream(spark, source, kafka_bootstrap, topic, startingOffsets=beyond, failOnDataLoss="false"),
                      checkpoint, capture)
    assert union(capture.final()) == after

