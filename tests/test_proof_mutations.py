"""The mutation matrix of the proofs (issue "A proof no damage passes"): the holes it found, reproduced.

Each case below is a damage to a correct sink that ``rewind verify`` and the DQ proof let pass, in a
few lines without Kafka or Spark, on the stream of ``tests/streams/ledger_stream.py``.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from rewind.api.contract import Identity

ROOT = Path(__file__).resolve().parents[1]
STREAMS = ROOT / "tests" / "streams"
if str(STREAMS) not in sys.path:
    sys.path.insert(0, str(STREAMS))

import ledger_stream as ls  # noqa: E402

WINDOW, DELAY = timedelta(minutes=1), timedelta(seconds=30)
BASE = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- the holes, each in a few lines
# The matrix found these; each was fixed in rewind/proof/ and is reproduced here without Kafka or Spark.
def _two_versions() -> pd.DataFrame:
    """expect()'s frame of two records of account a1 (seq 1 and 2) in one window, at their coordinates."""
    records = [ls.ledger_record(i, BASE) for i in (1, 6)]
    frame = pd.DataFrame({"topic": "t", "partition": 0, "offset": [0, 1], "timestamp": 0, "key": None,
                          "value": [json.dumps(r).encode() for r in records]})
    return pd.concat([frame[["topic", "partition", "offset"]], ls.expect_frame(frame)], axis=1)


def _aggregates_of(tmp_path: Path, rows: list[dict[str, Any]], transform: Any, expected: pd.DataFrame,
                   **kw: Any) -> pd.DataFrame:
    """``prove_aggregates`` (the measures path) over a SQLite sink holding ``rows`` of ``account_totals``."""
    from rewind.proof.aggregate_proof import prove_aggregates
    from rewind.sink.sql import ExactlyOnceSqlSink

    spec = SimpleNamespace(name="repro", durations=lambda: {"window": WINDOW, "watermark_delay": DELAY})
    with ExactlyOnceSqlSink(f"sqlite:///{tmp_path}/s.db", "repro", transform.tables) as sink:
        sink.write_rows({"account_totals": rows})
        return prove_aggregates(spec, transform, "unused:9092", sink, expected=expected, last_batch=0,
                                watermark=BASE + timedelta(hours=1), **kw).frame


def _group(expected: pd.DataFrame, **changes: Any) -> dict[str, Any]:
    start = pd.Timestamp(expected["event_time"].min()).floor("min")
    valid = expected[expected["reason"].isna()]
    return {"window_start": start, "window_end": start + WINDOW, "account": "a1", "payments": len(valid),
            "cents_total": int(valid["cents"].sum()), "fee_total": sum(valid["fee"]), "rate_sum": valid["rate"].sum(),
            "batch_id": 0, **changes}


def test_hole_a_latest_identity_counted_one_record_per_entity(tmp_path: Path) -> None:
    """A ``latest`` stream's aggregate was recomputed from one record per entity (its identity, not its
    identity and version): every total of an entity with two records failed on a correct sink."""
    exp = _two_versions()
    frame = _aggregates_of(tmp_path, [_group(exp)], ls.BalancesLedger(), exp, span=None)
    assert frame["aggregate_state"].tolist() == ["match"], frame[["sink", "recomputed"]].to_dict("records")


def test_hole_a_group_no_record_makes_was_never_judged(tmp_path: Path) -> None:
    """A proof of a span (``verify`` always proves one: below the committed end) judged only the groups
    its records make, so a row of a group no record makes passed; a span holding every record read
    judges every group."""
    exp = _two_versions()
    ghost = _group(exp, account="a9")
    frame = _aggregates_of(tmp_path, [_group(exp), ghost], ls.PaymentsLedger(), exp,
                           span={("t", 0): (0, 2)}, judged=np.ones(len(exp), dtype=bool))
    assert sorted(frame["aggregate_state"]) == ["match", "unexpected"], frame


def test_hole_a_window_end_was_never_compared() -> None:
    """``window_end`` is left out of the value columns (it derives from the start), so any value passed."""
    from rewind.proof.aggregates import judge_groups, recompute_measures

    exp = _two_versions()
    recomputed = recompute_measures(exp, ls.TOTALS_AGGREGATE, WINDOW)
    moved = pd.DataFrame([_group(exp, window_end=_group(exp)["window_end"] + pd.Timedelta(microseconds=1))])
    frame = judge_groups(moved, recomputed, ls.TOTALS_AGGREGATE, values=["payments"], size=WINDOW, closed_until=None)
    assert frame["aggregate_state"].tolist() == ["mismatch"]
    assert "window_end: sink '2026-05-01T12:01:00.000001+00:00', recomputed '2026-05-01T12:01:00+00:00'" \
        in frame["disagrees"].iloc[0]


def test_hole_a_row_past_the_committed_end_was_never_judged() -> None:
    """A proof of a span judged only the rows at its coordinates: a row that batch 0 wrote at an offset past
    what batch 0 read (so no record makes it) passed; a later batch's row there and a replay's stay unjudged."""
    from rewind.proof.contract_frames import build_contract_frames

    exp = _two_versions()
    rows = exp[["id", "topic", "partition", "offset"]].assign(batch_id=0)
    ghost = {"id": "p-ghost", "topic": "t", "partition": 0, "offset": 7, "batch_id": 0}
    later, replayed = {**ghost, "id": "p-later", "batch_id": 1}, {**ghost, "id": "p-replay", "batch_id": None}
    sink = {"payments": pd.concat([rows, pd.DataFrame([ghost, later, replayed])], ignore_index=True),
            "dead_letter": pd.DataFrame(columns=["topic", "partition", "offset", "reason"])}
    frames = build_contract_frames(exp, sink, identity=Identity("payments", ("id",)), keys={"payments": ("id",)},
                                   dead_letter_table="dead_letter", row_scope={("t", 0): (0, 2)}, last_batch=0)
    checks = dict(zip(frames.rows["identity"], frames.rows["row_check"]))
    assert checks == {"p-00001": "ok", "p-00006": "ok", "p-ghost": "unexpected"}, checks
