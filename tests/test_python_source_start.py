"""A stream on Rewind's Python source started at ``latest`` keeps where it began (``driver.initial_offsets``).

Before: a Python data source cannot see its checkpoint, so each start before the first commit resolved "latest"
again, and the records sent in between were never read; and with no record of the start, every proof counted
the records before it as missing. Now the driver keeps the start in the checkpoint as Spark's connector does
(``sources/0/0``), reads from it at every start, and proofs begin there. Pure rules: tests/test_proof_origin.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from harness.tiny_transform import TRANSFORM

from rewind.driver.initial_offsets import parse_initial_offsets, pinned_options
from rewind.registry import load_registry

pytestmark = pytest.mark.slow


def _send(bootstrap: str, topic: str, prefix: str, n: int, partitions: int = 3) -> list[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    ids = [f"{prefix}-{i}" for i in range(n)]
    for i, rid in enumerate(ids):
        producer.produce(topic, json.dumps({"id": rid, "amount": f"{i}.25"}).encode(), partition=i % partitions)
    assert producer.flush(30) == 0
    return ids


def test_a_python_source_stream_from_latest_reads_from_where_it_began_and_is_proven_from_there(
        tmp_path: Path, platform: Any, new_topic: Callable[..., str], spark: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rewind.driver.runner import build_query
    from rewind.proof.contract_proof import verify_contract_stream
    from rewind.upgrade.steps import stateless_checkpoint

    bootstrap = platform.kafka_bootstrap
    topic = new_topic(3, "pystart")
    _send(bootstrap, topic, "before", 30)
    (tmp_path / "pystart_mod.py").write_text(TRANSFORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REWIND_HOME", str(tmp_path / "home"))
    registry = tmp_path / "streams.yaml"
    registry.write_text(f"streams:\n  ps:\n    topics: [{topic}]\n    transform: pystart_mod:Tiny\n"
                        f"    sink: {{url: \"sqlite:///{tmp_path}/ps.db\"}}\n    checkpoint: {tmp_path}/cp\n"
                        f"    status_dir: {tmp_path}/status\n    source:\n      format: rewind_kafka\n"
                        f"      options: {{startingOffsets: latest}}\n")
    spec = load_registry(registry).get("ps")

    build_query(spark, spec, bootstrap, available_now=True).awaitTermination(180)  # nothing after its start yet
    kept = tmp_path / "cp" / "sources" / "0" / "0"
    assert parse_initial_offsets(kept.read_bytes()) == {(topic, p): 10 for p in range(3)}
    after = _send(bootstrap, topic, "after", 30)
    # what every later driver hands the source, as Spark's connector reads its own file: the kept start, not
    # "latest" resolved again (the end is 20 now; a restart before the first commit re-read from there)
    assert json.loads(pinned_options("ps", "rewind_kafka", {"startingOffsets": "latest"}, f"{tmp_path}/cp")
                      ["startingOffsets"]) == {topic: {"0": 10, "1": 10, "2": 10}}

    build_query(spark, spec, bootstrap, available_now=True).awaitTermination(180)
    with sqlite3.connect(tmp_path / "ps.db") as db:
        assert sorted(r[0] for r in db.execute("select id from rows")) == sorted(after)

    # from its start: the 30 before are not "missing" (before, this proof failed on all of them)
    summary = verify_contract_stream(spec, bootstrap).summary()
    assert summary["ok"] and summary["records_in_range"] == 30, summary
    assert any(f"per partition: {topic}[0] 10," in note for note in summary["notes"]), summary["notes"]
    with sqlite3.connect(tmp_path / "ps.db") as db:  # and still fails on a row lost above it
        db.execute("delete from rows where id = 'after-29'")
    damaged = verify_contract_stream(spec, bootstrap).summary()
    assert not damaged["ok"] and "after-29" in json.dumps(damaged["records_missing"], default=str), damaged

    # An upgrade in stateless mode gives the stream a new checkpoint holding only where to start (the committed
    # offsets, in the connector's file): the Python source starts there too, not at its entry's "latest".
    fresh = stateless_checkpoint(spec, "t1", {topic: {str(p): 20 for p in range(3)}})
    # A fourth partition before that checkpoint's first commit: its start does not name it, and the source
    # refuses a `startingOffsets` that does not name every partition; it starts at its earliest, as the
    # connector reads a partition its kept start does not name.
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its answer: a dropped client cancels
    assert admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30) is None
    time.sleep(0.01)
    later_at = int(time.time() * 1000)  # Kafka stamps a record with its producer's clock: this one's
    time.sleep(0.01)
    later = _send(bootstrap, topic, "later", 40, partitions=4)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "latest"}
    assert json.loads(pinned_options("ps", "rewind_kafka", options, fresh)["startingOffsets"]) == {
        topic: {"0": 20, "1": 20, "2": 20, "3": -2}}
    build_query(spark, spec, bootstrap, available_now=True, checkpoint=fresh).awaitTermination(180)
    with sqlite3.connect(tmp_path / "ps.db") as db:
        assert sorted(r[0] for r in db.execute("select id from rows where id like 'later-%'")) == sorted(later)
        assert db.execute("select count(*) from rows where id like 'after-%'").fetchone()[0] == 29  # none re-read

    # A start naming a partition that is gone (the topic made again with fewer): refused naming it and the
    # setting, or with failOnDataLoss: false started without it.
    gone = stateless_checkpoint(spec, "t2", {topic: {"0": 0, "1": 0, "2": 0, "3": 0, "7": 5}})
    with pytest.raises(ValueError, match=rf"partition\(s\) {topic}\[7\] of its start .* failOnDataLoss: false"):
        pinned_options("ps", "rewind_kafka", options, gone)
    assert json.loads(pinned_options("ps", "rewind_kafka", {**options, "failOnDataLoss": "false"}, gone)
                      ["startingOffsets"]) == {topic: {"0": 0, "1": 0, "2": 0, "3": 0}}

    # A start by time is resolved once and kept as offsets: the first record at or after it in each partition,
    # and a later driver reads the kept offsets, not the time again (the option changed in between on purpose).
    by_time = tmp_path / "by_time"
    by_time.mkdir()
    first = pinned_options("ps", "rewind_kafka", {**options, "startingTimestamp": str(later_at)}, str(by_time))
    assert json.loads(first["startingOffsets"]) == {topic: {"0": 20, "1": 20, "2": 20, "3": 0}}
    assert "startingTimestamp" not in first
    again = pinned_options("ps", "rewind_kafka", {**options, "startingTimestamp": str(int(time.time() * 1000))},
                           str(by_time))
    assert again == first
