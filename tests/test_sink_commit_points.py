"""Every sink, killed for real at each named commit point, then finished by a fresh process: exactly once.

The sink conformance suite of the crash claims, without a Spark driver per scenario. For each sink
kind (SQL on SQLite and PostgreSQL, written from the driver and staged as the executors do; the
transactional Kafka sink; Delta), over an insert-once, a replace and a latest table, and each commit
point of ``rewind.faults`` (before the write,
between pre-commit and commit, after commit), a child process commits batch 0, then writes batch 1
with that point armed and SIGKILLs itself there. The test checks what a reader sees after the death
(nothing of batch 1 before its commit, except Delta's merged tables, whose ledger row is missing;
the whole batch after it), then a fresh process writes batch 1 again, as Spark re-runs the
uncommitted batch: it is skipped exactly when the first one had committed, and afterwards every row
is there once, the ledger holds batches 0 and 1, and no Kafka transaction stays open.

The end-to-end versions (a real driver killed at these points while Kafka records flow) run once per
sink kind: tests/test_exactly_once_crash.py (SQL staged on PostgreSQL, Delta) and
tests/test_spark_cluster.py (Kafka).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import sink_child
from harness.processes import assert_no_open_transaction

from rewind.faults import Fault, arm

POINTS = ["sink.before_write", "sink.pre_committed", "sink.committed"]
KINDS = ["sqlite", "sqlite-staged", pytest.param("postgres-staged", marks=pytest.mark.postgres),
         pytest.param("postgres", marks=pytest.mark.postgres), "kafka", "delta"]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, bool]]:
    """(sink kind for the child, its target, staged?) for the test's ``kind`` parameter."""
    kind: str = request.node.callspec.params["kind"]
    staged = kind.endswith("-staged")
    base = kind.removesuffix("-staged")
    if base == "sqlite":
        yield "sql", f"sqlite:///{tmp_path / 'sink.db'}", staged
    elif base == "postgres":
        from tests.harness.pg_databases import create_database, drop_database

        server = request.getfixturevalue("postgres_url")
        name = f"cp_{uuid.uuid4().hex[:12]}"
        url = create_database(server, name)
        try:
            yield "sql", url, staged
        finally:
            drop_database(server, name)
    elif base == "kafka":
        yield "kafka", f"{request.getfixturevalue('kafka_bootstrap')}/cp{uuid.uuid4().hex[:8]}.", False
    else:
        yield "delta", str(tmp_path / "lake"), False


def run_child(kind: str, where: str, batch: int, staged: bool, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, sink_child.__file__, kind, where, str(batch), *(["--staged"] if staged else [])]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})},
                          start_new_session=True)


def committed_records(bootstrap: str, topic: str) -> list[bytes]:
    """The keys of every record of ``topic`` a read_committed consumer sees (re-sent ones too)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cp-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        keys: list[bytes] = []
        at_end: set[int] = set()
        while len(at_end) < len(parts):  # transaction markers take offsets: the end is the reader's EOF
            msg = consumer.poll(10)
            assert msg is not None, f"{topic}: nothing within 10 s, partitions at their end: {sorted(at_end)}"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
            else:
                keys.append(msg.key())
        return keys
    finally:
        consumer.close()


def visible(kind: str, where: str) -> dict[str, Any]:
    """What a reader of the sink sees: committed batch ids, event offsets, window counts."""
    sink = sink_child.open_sink(kind, where)
    try:
        stock = sink.read_table("stock")
        return {"ledger": sink.committed_batch_ids(), "offsets": sorted(sink.read_table("events")["offset"].tolist()),
                "dead": len(sink.read_table("dead_letter")),
                "windows": dict(zip(*(sink.read_table("window_results")[c] for c in ("user", "count")))),
                "stock": [(r.sku, int(r.qty), int(r.version)) for r in stock.itertuples()]}
    finally:
        sink.dispose()


N = sink_child.ROWS_PER_BATCH


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_killed_at_a_commit_point_is_finished_once_by_the_next(kind: str, point: str, target: Any,
                                                                         tmp_path: Path) -> None:
    sink_kind, where, staged = target
    first = run_child(sink_kind, where, 0, staged)
    assert first.returncode == 0, first.stderr[-3000:]

    marker = tmp_path / "fired.json"
    died = run_child(sink_kind, where, 1, staged, arm(Fault(point, "kill", batch=1, marker=str(marker))))
    assert died.returncode == -signal.SIGKILL, f"the writer did not die at {point}: {died.returncode}\n" \
                                               f"{died.stdout[-2000:]}{died.stderr[-3000:]}"
    assert json.loads(marker.read_text())["batch"] == 1

    after0 = {"offsets": list(range(N)), "dead": 2, "windows": {"a": 10, "b": 10}, "stock": [("s1", 100, 0)]}
    after1 = {"offsets": list(range(2 * N)), "dead": 4, "windows": {"a": 20, "b": 20}, "stock": [("s1", 101, 1)]}
    if sink_kind == "kafka" and point == "sink.pre_committed":
        # batch 1 sits in an open transaction: read_committed readers stop before it (and would wait for the
        # broker to abort it, transaction.timeout.ms, unless a new writer of the same id fences it first)
        with pytest.raises(AssertionError, match="transaction was left open"):
            assert_no_open_transaction(where.split("/")[0], [where.split("/")[1] + "events"])
    elif point == "sink.committed":
        assert visible(sink_kind, where) == {"ledger": [0, 1], **after1}
    elif sink_kind == "delta" and point == "sink.pre_committed":
        # Delta commits table by table: the tables are merged, the ledger row (the batch's commit) is not
        assert visible(sink_kind, where) == {"ledger": [0], **after1}
    else:
        assert visible(sink_kind, where) == {"ledger": [0], **after0}

    rerun = run_child(sink_kind, where, 1, staged)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    result = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert result["skipped"] == (point == "sink.committed"), result
    assert visible(sink_kind, where) == {"ledger": [0, 1], **after1}
    if sink_kind == "kafka":
        bootstrap, prefix = where.split("/", 1)
        assert_no_open_transaction(bootstrap, [f"{prefix}{t}" for t in ("events", "dead_letter", "window_results")])
        keys = Counter(committed_records(bootstrap, f"{prefix}events"))
        assert len(keys) == 2 * N and set(keys.values()) == {1}, \
            f"every event record committed once: {sum(keys.values())} records for {len(keys)} keys"
