"""Bounded proofs: a contract stream is proven a range at a time, from a cursor, on real Kafka and a real sink.

The sink is filled the way a correct stream would fill it, straight from the transform's own
``expect()`` (no Spark: this is about which records the proof reads and judges, not about the
stream). Then: the first proof covers everything and moves the cursor; after more records, the
next proof reads only the new ones; a row damaged in the new range fails the proof and leaves the
cursor; a row damaged before the cursor is not read again (a full proof still finds it).
Partition counts, keyless records and duplicate sends vary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rewind.proof.checks import CONTRACT_CHECKS
from rewind.proof.cursor import choose_span, read_cursor

pytestmark = pytest.mark.slow


def test_choose_span_is_pure_and_clips_with_notes() -> None:
    earliest = {("t", 0): 0, ("t", 1): 5}
    ends = {("t", 0): 100, ("t", 1): 50}
    span, notes = choose_span(earliest, ends, since="cursor", cursor={("t", 0): 40, ("t", 1): 2})
    assert span == {("t", 0): (40, 100), ("t", 1): (5, 50)} and "retention" in notes[0]
    span, notes = choose_span(earliest, ends, since="cursor", cursor={("t", 0): 140}, committed={("t", 0): 90})
    assert span[("t", 0)] == (0, 90) and "recreated or truncated" in notes[0]
    span, _ = choose_span(earliest, ends, since="time", cursor={}, at_time={("t", 0): 70, ("t", 1): None})
    assert span == {("t", 0): (70, 100), ("t", 1): (50, 50)}
    assert choose_span(earliest, ends, since="beginning", cursor={("t", 0): 99})[0][("t", 0)] == (0, 100)


def fill_sink_from_expect(spec: Any, bootstrap: str, lower: dict[tuple[str, int], int] | None = None) -> int:
    """Write what a correct stream would: the demo's events and dead letters, from its expect()."""
    from rewind.api.contract import load_transform
    from rewind.driver.runner import open_sink
    from rewind.proof.contract_proof import expected_frame, records_frame
    from rewind.proof.verify import read_records

    transform = load_transform(spec)
    records = read_records(bootstrap, spec.topics, source_options=spec.source.options, lower=lower)
    exp = expected_frame(transform, records_frame(records), spec)
    valid = exp[exp["reason"].isna()].drop_duplicates("event_id")
    dead = exp[exp["reason"].notna()]
    sink = open_sink(spec)
    try:
        sink.write_rows({"events": valid[["event_id", "key", "amount", "event_time", "topic", "partition", "offset"]],
                         "dead_letter": dead[["topic", "partition", "offset", "reason"]]}, replay_id="fill")
    finally:
        sink.dispose()
    return len(records)


@pytest.mark.parametrize("partitions, keyless", [(1, False), (5, True)])
def test_each_proof_reads_only_what_came_after_the_last(tmp_path: Path, platform: Any, new_topic: Any,
                                                        partitions: int, keyless: bool) -> None:
    import sqlalchemy as sa

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import open_sink
    from rewind.proof.contract_proof import verify_contract_stream
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    topic = new_topic(partitions=partitions, prefix="bounded")
    spec = load_registry(write_registry(tmp_path / "r.yaml", demo_stream("b", topic, tmp_path, dq_suite="contract"))
                         ).get("b")
    kw = dict(topic=topic, partitions=partitions, malformed_every=13, duplicate_every=9, keyless=keyless)
    first = produce(platform.kafka_bootstrap, ProduceSpec(count=1500, **kw)).sent
    fill_sink_from_expect(spec, platform.kafka_bootstrap)

    one = verify_contract_stream(spec, platform.kafka_bootstrap, since="cursor", run_id="one")
    assert one.ok, one
    assert one.counts["records_in_range"] == first
    cursor = read_cursor(spec)
    assert sum(cursor.values()) >= first

    second = produce(platform.kafka_bootstrap, ProduceSpec(count=700, start_seq=5000, **kw)).sent
    fill_sink_from_expect(spec, platform.kafka_bootstrap, lower=cursor)
    two = verify_contract_stream(spec, platform.kafka_bootstrap, since="cursor", run_id="two")
    assert two.ok, two
    assert two.counts["records_in_range"] == second  # only the new records were read
    starts = {int(p): r[0] for p, r in two.range.get(topic, {}).items()}
    assert starts and all(starts[p] == cursor[(topic, p)] for p in starts)  # each partition from the cursor on

    third = produce(platform.kafka_bootstrap, ProduceSpec(count=300, start_seq=9000, **kw)).sent
    assert third
    moved = read_cursor(spec)
    fill_sink_from_expect(spec, platform.kafka_bootstrap, lower=moved)
    sink = open_sink(spec)
    try:
        table = sink.table_name("events")
        with sink._engine.begin() as conn:  # damage one new row and one old row
            new_row = conn.execute(sa.text(f"SELECT event_id FROM {table} WHERE event_id LIKE 'evt-0000090%' LIMIT 1")
                                   ).scalar_one()
            conn.execute(sa.text(f"UPDATE {table} SET amount = amount + 1 WHERE event_id = :e"), {"e": new_row})
            conn.execute(sa.text(f"DELETE FROM {table} WHERE event_id < 'evt-000000100'"))
    finally:
        sink.dispose()
    three = verify_contract_stream(spec, platform.kafka_bootstrap, since="cursor", run_id="three")
    assert not three.ok and three.problems["rows_value_mismatch"] == 1, three
    assert three.problems["records_missing"] == 0  # the deleted old rows are before the cursor: not read
    assert read_cursor(spec) == moved  # a failed proof does not move the cursor
    full = verify_contract_stream(spec, platform.kafka_bootstrap)
    assert full.problems["records_missing"] > 0 and full.problems["rows_value_mismatch"] == 1
    assert isinstance(full.examples["rows_value_mismatch"][0]["disagrees"], str)
    pd.testing.assert_index_equal(pd.Index([new_row]), pd.Index([full.examples["rows_value_mismatch"][0]["identity"]]))


def test_the_dq_proof_of_a_contract_stream_proves_since_its_cursor(tmp_path: Path, platform: Any,
                                                                   new_topic: Any) -> None:
    """The hourly DQ run of a contract stream: Great Expectations over the two frames, the last span only."""
    import sqlalchemy as sa

    from rewind.control.status import StreamStatus, write_status
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import open_sink
    from rewind.paths import status_file
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    topic = new_topic(partitions=3, prefix="dqc")
    spec = load_registry(write_registry(tmp_path / "r.yaml", demo_stream("q", topic, tmp_path, dq_suite="contract"))
                         ).get("q")
    sent = produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=900, malformed_every=11, keyless=True)).sent
    fill_sink_from_expect(spec, platform.kafka_bootstrap)
    # as a stream that committed a batch leaves it (before its first batch a proof has nothing to prove)
    write_status(status_file(spec), StreamStatus(stream=spec.name, state="stopped",
                                                                       last_batch_id=0))
    first = run_proof(spec, platform.kafka_bootstrap, run_dir=tmp_path / "one")
    assert first.ok, format_proof(first)
    assert first.counts["records_in_range"] == sent and first.expectations == len(CONTRACT_CHECKS)  # aggregates too
    assert Path(first.local["data_docs"]).exists() if "data_docs" in first.local else True
    again = run_proof(spec, platform.kafka_bootstrap, run_dir=tmp_path / "two")
    assert again.ok and again.counts["records_in_range"] == 0  # nothing new since the last passed proof

    more = produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=400, start_seq=3000,
                                                         malformed_every=11, keyless=True)).sent
    fill_sink_from_expect(spec, platform.kafka_bootstrap, lower=read_cursor(spec))
    sink = open_sink(spec)
    try:
        with sink._engine.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {sink.table_name('events')} WHERE event_id = 'evt-000003007'"))
    finally:
        sink.dispose()
    bad = run_proof(spec, platform.kafka_bootstrap, run_dir=tmp_path / "three")
    assert not bad.ok and bad.counts["records_in_range"] == more
    assert [f.name for f in bad.failures] == ["no_kafka_record_missing"]
    assert "evt-000003007" in json.dumps(bad.failures[0].examples, default=str)
