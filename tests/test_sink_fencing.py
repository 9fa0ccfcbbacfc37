"""Every sink refuses a batch commit of a driver whose lease epoch was taken over, in the commit itself:
SQLite and PostgreSQL (a fence row raised in the batch's transaction), Delta (an app transaction on
the ledger and every table), no services but PostgreSQL."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rewind.api.tables import LEDGER_TABLE, Column, TableSpec
from rewind.sink.errors import SinkFenced

EVENTS = TableSpec("events", (Column("id", "string", nullable=False), Column("v", "bigint")), key=("id",),
                   on_conflict="ignore")


def rows(*ids: str) -> dict[str, list[dict[str, object]]]:
    return {"events": [{"id": i, "v": 1} for i in ids]}


def _sql(url: str, stream: str = "s") -> object:
    from rewind.sink.sql import ExactlyOnceSqlSink

    return ExactlyOnceSqlSink(url, stream, [EVENTS])


def _delta(root: Path, stream: str = "s") -> object:
    from rewind.sink.delta import DeltaSink
    from rewind.sink.delta_target import parse_delta_sink

    return DeltaSink(parse_delta_sink(f"delta://{root}"), stream, [EVENTS])


@pytest.fixture(params=["sqlite", "postgresql", "delta"])
def make_sink(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        return lambda: _sql(f"sqlite:///{tmp_path}/sink.db")
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
        from tests.harness.pg_databases import create_database

        db = create_database(url, f"fence_{abs(hash(tmp_path.name)) % 10**8}")
        return lambda: _sql(db)
    return lambda: _delta(tmp_path / "delta")


def test_a_zombie_commits_nothing_once_a_newer_epoch_fenced_the_sink(make_sink) -> None:  # type: ignore[no-untyped-def]
    zombie, successor = make_sink(), make_sink()
    try:
        zombie.fence(1)
        assert not zombie.write_batch(0, rows("a"), '{"t":{"0":1}}').skipped
        successor.fence(2)  # took the lease: before its first batch
        with pytest.raises(SinkFenced, match="epoch 2 has taken the stream over"):
            zombie.write_batch(1, rows("zombie"), '{"t":{"0":2}}')
        assert not successor.write_batch(1, rows("b"), '{"t":{"0":2}}').skipped
        with pytest.raises(SinkFenced):  # also a batch the new driver has not reached yet
            zombie.write_batch(2, rows("late"), '{"t":{"0":3}}')
        ledger = successor.read_table(LEDGER_TABLE)
        assert ledger["batch_id"].tolist() == [0, 1]
        assert sorted(successor.read_table("events")["id"]) == ["a", "b"]
        with pytest.raises(SinkFenced):  # a fence never goes back
            zombie.fence(1)
        successor.write_rows(rows("replayed"))  # a replay is not a driver: never fenced
    finally:
        zombie.dispose()
        successor.dispose()


def test_an_unfenced_sink_and_other_streams_are_not_affected(tmp_path: Path) -> None:
    a, b = _sql(f"sqlite:///{tmp_path}/x.db", "a"), _sql(f"sqlite:///{tmp_path}/x.db", "b")
    try:
        a.fence(5)
        b.fence(1)
        assert not b.write_batch(0, rows("b0"), None).skipped
        plain = _sql(f"sqlite:///{tmp_path}/x.db", "a")  # a tool or a test writing without a lease
        assert not plain.write_batch(9, rows("p"), None).skipped
        plain.dispose()
    finally:
        a.dispose()
        b.dispose()


HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


def test_a_paused_process_holding_sqlites_write_lock_is_waited_for_then_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver paused inside a transaction keeps SQLite's only write lock: the new driver's fence waits
    (``REWIND_DRIVER_WAIT_S``) and lands once the holder commits; if it never does, the refusal names the
    stopped process and the fix."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    from rewind.sink import dialects
    from rewind.sink.errors import SinkConnectionError

    monkeypatch.setattr(dialects, "SQLITE_BUSY_TIMEOUT_MS", 300)  # SQLite's own wait, 30 s in production
    db = tmp_path / "sink.db"
    sink = _sql(f"sqlite:///{db}")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        sink.create_tables()
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        os.kill(holder.pid, signal.SIGSTOP)
        monkeypatch.setenv("REWIND_DRIVER_WAIT_S", "1")
        with pytest.raises(SinkConnectionError, match=rf"pid {holder.pid} \(python[^,]*, stopped\).*kill -CONT"):
            sink.fence(2)

        def resume() -> None:
            time.sleep(1.5)
            os.kill(holder.pid, signal.SIGCONT)
            assert holder.stdin is not None
            holder.stdin.write("commit\n")
            holder.stdin.flush()

        monkeypatch.setenv("REWIND_DRIVER_WAIT_S", "30")
        threading.Thread(target=resume, daemon=True).start()
        started = time.monotonic()
        sink.fence(2)
        assert time.monotonic() - started >= 1.5
        with pytest.raises(SinkFenced):
            _sql(f"sqlite:///{db}").fence(1)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
        sink.dispose()


def test_a_stream_moved_to_another_control_store_raises_its_epoch_past_the_sinks(tmp_path: Path) -> None:
    """A stream moved between control stores (local -> YARN's S3 store through a savepoint) starts its lease
    epochs again at 1 there; the sink holds the old store's epoch 3. The new driver's lease, still its own,
    is raised to 4 and fences the sink; a driver whose lease is no longer its own raises nothing."""
    from rewind.control.directory import DirectoryStore
    from rewind.control.leases import LeaseKeeper, LeaseLost, acquire, me
    from rewind.driver.runner import fence_sink

    old = _sql(f"sqlite:///{tmp_path}/m.db")
    old.fence(3)  # written under the old store's epochs 1..3
    store = DirectoryStore(tmp_path / "new-store", "s")
    keeper = LeaseKeeper(store, *acquire(store, me(), ttl_s=20, wait_s=0))  # type: ignore[misc]
    assert keeper.epoch == 1
    new = _sql(f"sqlite:///{tmp_path}/m.db")
    try:
        fence_sink(new, keeper)
        assert keeper.epoch == 4 and store.read("lease").doc["epoch"] == 4  # type: ignore[union-attr]
        assert not new.write_batch(0, rows("moved"), None).skipped
        with pytest.raises(SinkFenced):  # the old store's driver is fenced by the raised epoch
            old.write_batch(1, rows("zombie"), None)
        keeper.release()
        other = LeaseKeeper(store, *acquire(store, me(), ttl_s=20, wait_s=0))  # type: ignore[misc]
        assert other.epoch == 5
        with pytest.raises(LeaseLost):  # the first driver's lease was taken over: it cannot raise its epoch
            keeper._fence(other.lease)
            keeper.advance(9, "a test")
    finally:
        old.dispose()
        new.dispose()


def test_the_kafka_sink_is_fenced_through_its_transactional_id(kafka_bootstrap: str) -> None:
    """The new driver's ``fence`` starts its transactional producer before its first batch: the older
    producer of the same transactional id is fenced by the broker, so the zombie's next batch fails
    ("fenced") with nothing of it visible; the new driver's records carry its epoch."""
    import uuid

    from confluent_kafka import Consumer

    from rewind.sink.errors import SinkWriteError
    from rewind.sink.kafka import TransactionalKafkaSink
    from rewind.sink.kafka_target import KafkaSinkTarget

    prefix = f"kf{uuid.uuid4().hex[:8]}."
    zombie, successor = (TransactionalKafkaSink(KafkaSinkTarget(kafka_bootstrap, prefix), "s", [EVENTS])
                         for _ in range(2))
    try:
        zombie.fence(1)
        assert not zombie.write_batch(0, rows("a"), '{"t":{"0":1}}').skipped
        successor.fence(2)
        with pytest.raises(SinkWriteError, match="fenced"):
            zombie.write_batch(1, rows("zombie"), '{"t":{"0":2}}')
        assert not successor.write_batch(1, rows("b"), '{"t":{"0":2}}').skipped
        assert successor.committed_batch_ids() == [0, 1]
        assert sorted(successor.read_table("events")["id"]) == ["a", "b"]
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g{uuid.uuid4().hex}",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe([successor.table_name("events")])
        epochs: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while len(epochs) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                epochs[json.loads(msg.value())["id"]] = dict(msg.headers() or [])["rewind.epoch"].decode()
        consumer.close()
        assert epochs == {"a": "1", "b": "2"}
    finally:
        zombie.dispose()
        successor.dispose()
