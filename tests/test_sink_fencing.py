"""Every sink refuses a batch commit of a driver whose lease epoch was taken over, in the commit itself:
SQLite and PostgreSQL (a fence row raised in the batch's transaction), Delta (an app transaction on
the ledger and every table), no services but PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewind.sink.errors import SinkFenced
from rewind.sink.schema import LEDGER_TABLE, Column, TableSpec

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
        from rewind.testing.pg_databases import create_database

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
