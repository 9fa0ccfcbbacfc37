"""A stream's committed batches as consumer-group offsets (``rewind.kafka.group_offsets``), on the embedded Kafka.

The Kafka sink commits them inside the batch's transaction: a committed batch moves the group, an aborted
one does not. Other sinks commit them with the AdminClient after the batch. That Kafka's own
``kafka-consumer-groups`` tool then shows the stream's lag is test_operations' (a running stream).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from harness.sink_data import TABLES, events

from rewind.kafka.group_offsets import GroupOffsets, consumer_group, end_offsets, read_group, topic_partitions
from rewind.sink.errors import SinkWriteError
from rewind.sink.kafka import TransactionalKafkaSink
from rewind.sink.kafka_target import KafkaSinkTarget
from rewind.sink.kafka_txn import Record


def group_becomes(bootstrap: str, group: str, expected: dict[str, dict[str, int]], timeout: float = 15.0) -> None:
    """The group's offsets reach ``expected``. Why a wait: the transaction's commit returns once its coordinator
    has decided, and it writes the markers that make the offsets stable a moment later; listing every partition
    of a group omits a partition whose only commit is still pending (require_stable answers for the partitions
    it names), so right after the first commit the group can read empty (CI 2026-11-29: {} once in 1,431)."""
    deadline = time.monotonic() + timeout
    while (found := read_group(bootstrap, group)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert found == expected


def identity(end: Any) -> str:
    return json.dumps({"start": None, "end": end, "watermark_ms": 0})


def test_end_offsets_of_a_batch_identity() -> None:
    assert end_offsets(identity({"t": {"0": 5, "1": 7}})) == {"t": {"0": 5, "1": 7}}
    assert end_offsets(identity([{"a": {"0": 1}}, {"b": {"2": 3}}])) == {"a": {"0": 1}, "b": {"2": 3}}
    assert end_offsets(None) == {} and end_offsets("garbage") == {} and end_offsets(identity({"t": "x"})) == {}
    assert consumer_group("demo") == "rewind-demo"
    assert [(tp.topic, tp.partition, tp.offset) for tp in topic_partitions({"t": {"10": 1, "2": 4}})] == [
        ("t", 2, 4), ("t", 10, 1)]


def test_the_kafka_sink_commits_the_group_offsets_in_the_batch_transaction(kafka_bootstrap: str,
                                                                          new_topic: Any) -> None:
    source = new_topic(partitions=2, prefix="src")
    stream = f"grp{uuid.uuid4().hex[:6]}"
    sink = TransactionalKafkaSink(KafkaSinkTarget(kafka_bootstrap, f"{stream}."), stream, TABLES,
                                  dead_letter_table="dead_letter")
    try:
        assert read_group(kafka_bootstrap, consumer_group(stream)) == {}
        sink.write_batch(0, {"events": events(0, 10, batch_id=0)}, identity({source: {"0": 6, "1": 4}}))
        group_becomes(kafka_bootstrap, consumer_group(stream), {source: {"0": 6, "1": 4}})
        sink.write_batch(1, {"events": events(10, 20, batch_id=1)}, identity({source: {"0": 9, "1": 11}}))
        group_becomes(kafka_bootstrap, consumer_group(stream), {source: {"0": 9, "1": 11}})

        # both or neither: a transaction that aborts after the offsets were sent leaves the group where it was
        writer = sink._start_writing()
        offsets, meta = sink._group_offsets(identity({source: {"0": 50, "1": 50}}))

        def crash() -> None:
            raise SinkWriteError("the driver died before the commit")

        with pytest.raises(SinkWriteError):
            writer.run([Record(sink.table_name("events"), b"k", b"{}", [])], "doomed", before_commit=crash,
                       offsets=offsets, group_metadata=meta)
        assert read_group(kafka_bootstrap, consumer_group(stream)) == {source: {"0": 9, "1": 11}}
    finally:
        sink.dispose()


def test_other_sinks_commit_with_the_admin_client(kafka_bootstrap: str, new_topic: Any) -> None:
    source = new_topic(partitions=3, prefix="src")
    group = consumer_group(f"adm{uuid.uuid4().hex[:6]}")
    committer = GroupOffsets(kafka_bootstrap, {}, group)
    assert committer.commit({source: {"0": 3, "1": 0, "2": 8}})
    assert read_group(kafka_bootstrap, group) == {source: {"0": 3, "1": 0, "2": 8}}
    assert not committer.commit({source: {"0": 3, "1": 0, "2": 8}})  # unchanged (an idle progress): not sent again
    assert committer.commit({source: {"0": 4, "1": 0, "2": 8}})
    assert read_group(kafka_bootstrap, group)[source]["0"] == 4


def test_a_submit_is_sent_when_flush_returns(kafka_bootstrap: str, new_topic: Any) -> None:
    """A stopping driver flushes: its group then ends where its last batch did, not one behind."""
    source = new_topic(partitions=2, prefix="src")
    group = consumer_group(f"fl{uuid.uuid4().hex[:6]}")
    committer = GroupOffsets(kafka_bootstrap, {}, group)
    assert committer.flush(1)  # nothing submitted: nothing to wait for
    for end in range(1, 6):
        committer.submit({source: {"0": end, "1": 2 * end}})
    assert committer.flush(30)
    assert read_group(kafka_bootstrap, group) == {source: {"0": 5, "1": 10}}
