"""The pure decisions of a table's Asset events (``rewind.assets.ranges``): which range next, the claim, and
what a claim found after a restart becomes. The end-to-end proof on a real Airflow is
``tests/test_stream_assets.py``."""

from __future__ import annotations

import json

import pytest

from rewind.assets.ranges import (
    GRACE_S,
    Cursor,
    LedgerBatch,
    Target,
    claim,
    ledger_batch,
    next_range,
    next_replay,
    resolution,
    settle,
)

T = Target("s", "w", "sqlite:///x.db/s_w", interval_s=60.0)


def batch(i: int, rows: int = 2) -> LedgerBatch:
    return LedgerBatch(i, {"w": rows, "events": 10}, {"t": {"0": i * 10}}, {"t": {"0": i * 10 + 10}}, 1000 * i)


def test_a_ledger_row_reads_its_identity() -> None:
    row = {"batch_id": 4, "rows_json": json.dumps({"w": 3}), "committed_at": "2026-11-29",
           "source_offsets": json.dumps({"start": {"t": {"0": 5}}, "end": {"t": {"0": 9}}, "watermark_ms": 77})}
    assert ledger_batch(row) == LedgerBatch(4, {"w": 3}, {"t": {"0": 5}}, {"t": {"0": 9}}, 77, "2026-11-29")
    assert ledger_batch({"batch_id": 1, "rows_json": None, "source_offsets": "not json"}).end is None


def test_the_first_range_takes_every_committed_batch_and_sums_its_rows() -> None:
    p = next_range(T, Cursor(), [batch(2), batch(0), batch(1)], now=100.0)
    assert p is not None
    assert (p["batches"], p["batch_ids"], p["seq"], p["event_id"]) == ([0, 2], [0, 1, 2], 1, "s/w/1")
    assert (p["start_offsets"], p["end_offsets"], p["watermark_ms"]) == ({"t": {"0": 0}}, {"t": {"0": 30}}, 2000)
    assert (p["table_rows"], p["rows"]) == (6, {"w": 6, "events": 30})


def test_the_next_range_starts_where_the_last_one_ended_and_waits_for_the_interval() -> None:
    first = next_range(T, Cursor(), [batch(0), batch(1)], now=100.0)
    assert first is not None
    cursor = settle(claim(Cursor(), first, "me", now=100.0))
    assert (cursor.through_batch, cursor.seq, cursor.pending, cursor.emitted_at) == (1, 1, None, 100.0)
    ledger = [batch(0), batch(1), batch(2), batch(3)]
    assert next_range(T, cursor, ledger, now=159.9) is None  # at most one event per interval
    second = next_range(T, cursor, ledger, now=160.0)
    assert second is not None
    assert second["batches"] == [2, 3] and second["start_offsets"] == first["end_offsets"]
    assert next_range(T, cursor, [batch(0), batch(1)], now=500.0) is None  # nothing new


def test_nothing_new_is_claimed_while_a_claim_is_open() -> None:
    p = next_range(T, Cursor(), [batch(0)], now=1000.0)
    assert p is not None
    open_claim = claim(Cursor(), p, "me", now=0.0)
    assert next_range(T, open_claim, [batch(0), batch(1)], now=1e6) is None
    assert next_replay(T, open_claim, [{"replay_id": "r1"}]) is None


@pytest.mark.parametrize(("found", "age", "expected"), [
    (True, 0.0, "settle"), (True, 999.0, "settle"),
    (False, 0.0, "wait"), (False, GRACE_S - 0.1, "wait"), (False, GRACE_S, "resend"),
    (None, 999.0, "wait"),  # Airflow could not be asked: never resend on a guess
])
def test_a_claim_is_settled_only_when_airflow_holds_it_and_resent_only_when_it_surely_does_not(
        found: bool | None, age: float, expected: str) -> None:
    p = next_range(T, Cursor(), [batch(0)], now=1000.0)
    assert p is not None
    assert resolution(claim(Cursor(), p, "me", now=10.0), found, now=10.0 + age) == expected
    assert resolution(Cursor(), found, now=0.0) == "none"


def test_a_replay_is_announced_once_by_its_id_and_only_for_tables_it_rewrote() -> None:
    replays = [{"replay_id": "r1", "run_id": "run", "start_offsets": {"t": {"0": 0}}, "end_offsets": {"t": {"0": 5}},
                "rows": {"w": 4}, "tables": ["w", "events"]}, {"replay_id": "r2", "tables": ["events"]}]
    p = next_replay(T, Cursor(seq=3), replays)
    assert p is not None
    assert (p["kind"], p["replay_id"], p["seq"], p["table_rows"], p["run_id"]) == ("replay", "r1", 4, 4, "run")
    cursor = settle(claim(Cursor(seq=3), p, "me", now=0.0))
    assert cursor.replays == ("r1",) and cursor.seq == 4 and cursor.through_batch == -1
    assert next_replay(T, cursor, replays) is None  # r2 rewrote no row of this table


def test_the_cursor_survives_its_document() -> None:
    p = next_range(T, Cursor(), [batch(0)], now=1000.0)
    assert p is not None
    c = claim(Cursor(replays=("r",)), p, "me", now=5.0)
    assert Cursor.of(json.loads(json.dumps(c.doc()))) == c
