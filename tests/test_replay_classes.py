"""A replay's touched aggregate groups: each in exactly one class, the classes summing to the groups
touched, and the report showing the sum. Pure: hand-made frames, no Kafka, no Spark.

The issue: a report said 252 groups touched, 108 written and 108 unchanged; the 36 groups whose
records were all late dead letters (recomputed, no row made, no row held) were in no class.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rewind.api.contract import Aggregate
from rewind.proof.aggregates import group_text, recompute_measures
from rewind.replay.aggregates import (
    ALL_LATE,
    CANNOT_DELETE,
    CLASSES,
    LATER_BATCH,
    LEFT_ALONE,
    OPEN,
    PAST_RETENTION,
    REFUSED,
    REMOVED,
    REWRITTEN,
    UNCHANGED,
    AggregateOutcome,
    Fate,
    GroupFacts,
    classes_text,
    classify,
    decide,
    fate_after,
    fate_before,
    group_fate,
    to_recompute,
)
from rewind.replay.report import ReplayReport, format_report

T0 = pd.Timestamp("2026-11-27T10:00:00Z")
MINUTE = timedelta(minutes=1)
AGG = Aggregate("totals", keys=("merchant",), measures={"total": "sum(amount)", "payments": "count"})
VALUES = ["total", "payments"]


def records(minutes: range, merchants: list[str], per_group: int = 3) -> pd.DataFrame:
    """``per_group`` payments in each (minute, merchant)."""
    rows = [(m, k, j) for m in minutes for k in merchants for j in range(per_group)]
    i = np.arange(len(rows))
    return pd.DataFrame({"payment_id": [f"p{n}" for n in i], "merchant": [k for _, k, _ in rows],
                         "amount": (i * 37 % 500) / 7.0,
                         "event_time": [T0 + pd.Timedelta(minutes=m, seconds=10 * j) for m, _, j in rows],
                         "topic": "t", "partition": i % 4, "offset": i // 4})


def touched_by(frame: pd.DataFrame) -> dict[str, pd.Timestamp | None]:
    """group -> window start, as ``rewind.replay.recompute.touched_groups`` names them."""
    starts = frame["event_time"].dt.floor(pd.Timedelta(MINUTE))
    groups = group_text(frame.assign(window_start=starts), AGG)
    return dict(zip(groups, starts))


def run(touched: dict[str, Any], counted: pd.DataFrame, sink: pd.DataFrame, *, horizon: pd.Timestamp | None,
        retained_from: pd.Timestamp | None = None, last_batch: int | None = 5, can_delete: bool = True,
        agg: Aggregate = AGG, size: timedelta | None = MINUTE) -> Any:
    """What ``recompute_touched`` does between its reads and writes: choose, recompute (over the
    counted records: late dead letters left out), keep the chosen groups' rows, decide."""
    present = set(group_text(sink, agg)) & set(touched)
    todo = to_recompute(touched, present, size=size, horizon=horizon, retained_from=retained_from)
    fresh = recompute_measures(counted, agg, size) if len(counted) else pd.DataFrame()
    fresh = fresh[group_text(fresh, agg).isin(todo).to_numpy()] if len(fresh) and todo else fresh.iloc[:0]
    return decide(touched, present, fresh, sink if todo else sink.iloc[:0], agg, VALUES, size=size,
                  horizon=horizon, retained_from=retained_from, last_batch=last_batch, can_delete=can_delete)


def test_the_issue_all_late_groups_are_counted_and_the_classes_add_up() -> None:
    """252 groups touched: 108 rewritten (the sink held partial totals), 108 unchanged, and the 36
    whose records are all late dead letters: left alone, no row (before: in no class)."""
    merchants = [f"m{k:02d}" for k in range(36)]
    every = records(range(7), merchants)
    late = every["event_time"] >= T0 + pd.Timedelta(minutes=6)  # minute 6: every record behind the watermark
    whole = recompute_measures(every[~late], AGG, MINUTE).assign(batch_id=3)
    sink = whole.copy()
    partial = sink["window_start"] < T0 + pd.Timedelta(minutes=3)
    sink.loc[partial, "total"] = sink.loc[partial, "total"] / 2  # the old partition replay's partial totals
    decision = run(touched_by(every), every[~late], sink, horizon=T0 + pd.Timedelta(minutes=30))
    outcome = AggregateOutcome.of("totals", decision.fates, examples=decision.examples)
    assert (outcome.touched, outcome.rewritten, outcome.unchanged, outcome.removed, outcome.left_alone,
            outcome.refused) == (252, 108, 108, 0, 36, 0)
    assert outcome.left_alone_by == {ALL_LATE: 36} and outcome.classes_sum() == 252
    assert all(g.startswith(pd.Timestamp(T0 + pd.Timedelta(minutes=6)).isoformat())
               for g in outcome.left_alone_examples[ALL_LATE])
    assert len(decision.write) == 108 and not len(decision.unmade) and not len(decision.remove)
    w = outcome.to_json()
    assert (w["written"], w["recomputed"], w["left_open"]) == (108, 216, 0)  # the names earlier readers use
    assert classes_text(w) == ("252 groups touched = 108 rewritten + 108 unchanged + 36 left alone (all records late "
                               "dead letters: no counted record makes it, and it has no row)")


def test_every_class_and_reason_in_one_touched_set() -> None:
    """One touched set holding every class: each group's class asserted, the sum checked, the rows
    written and removed following the classes."""
    m = ["a", "b", "c", "d", "e"]
    every = records(range(6), m)
    # minute 3: b's records all late dead letters; c, d and e have no counted record either, but rows
    late = (every["event_time"].dt.floor("min") == T0 + pd.Timedelta(minutes=3)) & every["merchant"].isin(
        ["b", "c", "d", "e"])
    counted = every[~late]
    whole = recompute_measures(counted, AGG, MINUTE)
    sink = whole[whole["window_start"] < T0 + pd.Timedelta(minutes=4)].assign(batch_id=4)  # the stream wrote 0-3
    sink.loc[(sink["window_start"] == T0 + pd.Timedelta(minutes=2)) & (sink["merchant"] == "a"), "total"] += 1
    sink = sink[~((sink["window_start"] == T0 + pd.Timedelta(minutes=2)) & (sink["merchant"] == "b"))]
    ghost = pd.DataFrame({"window_start": T0 + pd.Timedelta(minutes=3), "merchant": ["c", "d", "e"],
                          "total": 1.0, "payments": 1, "batch_id": pd.array([None, 2, 9], dtype="Int64")})
    open_in_sink = whole[(whole["window_start"] == T0 + pd.Timedelta(minutes=5)) & (whole["merchant"] == "a")]
    sink = pd.concat([sink.astype({"batch_id": "Int64"}), ghost, open_in_sink.assign(batch_id=pd.array([9],
                                                                                                     dtype="Int64"))],
                     ignore_index=True)
    touched = touched_by(every)
    kw = {"horizon": T0 + pd.Timedelta(minutes=4), "retained_from": T0 + pd.Timedelta(minutes=1)}

    def g(minute: int, merchant: str) -> str:
        return str(group_text(pd.DataFrame({"window_start": [T0 + pd.Timedelta(minutes=minute)],
                                            "merchant": [merchant]}), AGG).iloc[0])

    expected = {**{g(0, k): Fate(LEFT_ALONE, PAST_RETENTION) for k in m},   # window before the retained records
                **{g(1, k): Fate(UNCHANGED) for k in m},
                g(2, "a"): Fate(REWRITTEN), g(2, "b"): Fate(REWRITTEN),       # a total off by one; a row missing
                **{g(2, k): Fate(UNCHANGED) for k in "cde"},
                g(3, "a"): Fate(UNCHANGED),
                g(3, "b"): Fate(LEFT_ALONE, ALL_LATE),                          # all late, no row: the lost class
                g(3, "c"): Fate(REMOVED), g(3, "d"): Fate(REMOVED),             # rows of a replay, of batch 2 <= 5
                g(3, "e"): Fate(LEFT_ALONE, LATER_BATCH),                       # row of batch 9 > 5: kept
                **{g(4, k): Fate(LEFT_ALONE, OPEN) for k in m},                 # not closed, not in the sink
                g(5, "a"): Fate(UNCHANGED),                                     # not closed, but in the sink
                **{g(5, k): Fate(LEFT_ALONE, OPEN) for k in "bcde"}}
    decision = run(touched, counted, sink, **kw)
    assert decision.fates == expected
    outcome = AggregateOutcome.of("totals", decision.fates)
    assert outcome.touched == len(touched) == 30 == outcome.classes_sum()
    assert {c: getattr(outcome, c) for c in CLASSES} == {REWRITTEN: 2, UNCHANGED: 10, REMOVED: 2, LEFT_ALONE: 16,
                                                         REFUSED: 0}
    assert outcome.left_alone_by == {OPEN: 9, PAST_RETENTION: 5, ALL_LATE: 1, LATER_BATCH: 1}
    assert set(group_text(decision.write, AGG)) == {g(2, "a"), g(2, "b")} and decision.write["batch_id"].isna().all()
    assert set(group_text(decision.remove, AGG)) == set(group_text(decision.unmade, AGG)) == {g(3, "c"), g(3, "d")}
    text = classes_text(outcome.to_json())
    assert text.startswith("30 groups touched = 2 rewritten + 10 unchanged + 2 removed (no record makes them; "
                           "copies in None) + 9 left alone (left open for the live stream: not closed yet) + 5 left "
                           "alone (records possibly past retention) + 1 left alone (all records late") and \
        "+ 1 left alone (no record makes it, but a batch after the stream's last committed one wrote its row)" in text

    # a sink that cannot delete (Delta): the same rows copied, none deleted, their groups left alone
    kept = run(touched, counted, sink, can_delete=False, **kw)
    assert {k for k, f in kept.fates.items() if f != expected[k]} == {g(3, "c"), g(3, "d")}
    assert kept.fates[g(3, "c")] == Fate(LEFT_ALONE, CANNOT_DELETE) and not len(kept.remove)
    assert len(kept.unmade) == 2 and AggregateOutcome.of("totals", kept.fates).left_alone_by[CANNOT_DELETE] == 2
    # the checkpoint cannot say its last batch: only a replay's rows (batch_id NULL) are removed
    unknown = run(touched, counted, sink, last_batch=None, **kw)
    assert (unknown.fates[g(3, "c")], unknown.fates[g(3, "d")]) == (Fate(REMOVED), Fate(LEFT_ALONE, LATER_BATCH))


def test_groups_without_a_window() -> None:
    """An aggregate over the whole history of its keys: every group closed, so every one is
    recomputed (none left open); refused once retention deleted records."""
    forever = Aggregate("totals", keys=("merchant",), window=None, measures={"total": "sum(amount)",
                                                                            "payments": "count"})
    every = records(range(3), ["a", "b", "c", "d"])
    counted = every[every["merchant"] != "d"]  # d: every record a late dead letter
    whole = recompute_measures(counted, forever, None)
    sink = whole[whole["merchant"] != "c"].assign(batch_id=1)
    sink.loc[sink["merchant"] == "b", "payments"] += 1
    touched = {str(k): None for k in group_text(every.drop_duplicates("merchant"), forever)}
    decision = run(touched, counted, sink, horizon=None, agg=forever, size=None)
    assert decision.fates == {"a": Fate(UNCHANGED), "b": Fate(REWRITTEN), "c": Fate(REWRITTEN),
                              "d": Fate(LEFT_ALONE, ALL_LATE)}
    refused = run(touched, counted, sink, horizon=None, agg=forever, size=None, retained_from=T0)
    assert set(refused.fates.values()) == {Fate(REFUSED)} and not len(refused.write)
    outcome = AggregateOutcome.of("totals", refused.fates)
    assert outcome.refused == outcome.touched == 4
    assert classes_text(outcome.to_json()) == ("4 groups touched = 0 rewritten + 0 unchanged + 4 refused (no replay "
                                               "can recompute them whole)")


def test_each_path_of_the_pure_decision() -> None:
    closed = {"size": MINUTE, "horizon": T0 + pd.Timedelta(minutes=5), "retained_from": None, "can_delete": True}
    recomputed = GroupFacts(T0, made=True, differs=True, rows=1, settled=1)
    assert group_fate(recomputed, **closed) == Fate(REWRITTEN)  # type: ignore[arg-type]
    assert group_fate(GroupFacts(T0, made=True), **closed) == Fate(UNCHANGED)  # type: ignore[arg-type]
    assert fate_after(made=True, differs=True, rows=0, settled=0, can_delete=True) == Fate(REWRITTEN)  # missing
    assert fate_after(made=False, differs=False, rows=0, settled=0, can_delete=False) == Fate(LEFT_ALONE, ALL_LATE)
    assert fate_after(made=False, differs=False, rows=2, settled=1, can_delete=True) == Fate(LEFT_ALONE, LATER_BATCH)
    assert fate_after(made=False, differs=False, rows=2, settled=2, can_delete=True) == Fate(REMOVED)
    # a window start the sink could not parse (NaT) is never taken as closed
    assert fate_before(pd.NaT, in_sink=False, size=MINUTE, horizon=T0, retained_from=None) == Fate(LEFT_ALONE, OPEN)
    assert fate_before(pd.NaT, in_sink=True, size=MINUTE, horizon=T0, retained_from=None) is None
    assert fate_before(None, in_sink=True, size=MINUTE, horizon=T0, retained_from=T0) == Fate(LEFT_ALONE,
                                                                                              PAST_RETENTION)
    # no watermark known: nothing is closed but what the sink holds
    assert fate_before(T0, in_sink=False, size=MINUTE, horizon=None, retained_from=None) == Fate(LEFT_ALONE, OPEN)
    assert classify({}, size=MINUTE, horizon=None, retained_from=None, can_delete=True) == {}
    with pytest.raises(ValueError):
        Fate(LEFT_ALONE)
    with pytest.raises(ValueError):
        Fate(REMOVED, OPEN)
    with pytest.raises(ValueError):
        Fate("written")


def test_counts_that_do_not_add_up_are_refused_and_shown() -> None:
    outcome = AggregateOutcome("totals", touched=252, rewritten=108, unchanged=108)
    with pytest.raises(ValueError, match="252 groups touched, but the classes sum to 216"):
        outcome.check()
    with pytest.raises(ValueError, match="classes sum"):
        AggregateOutcome("totals", touched=1, left_alone=1, left_alone_by={OPEN: 2}).check()
    assert classes_text(outcome.to_json()).endswith("(THE CLASSES SUM TO 216, NOT 252)")


def report_with(aggregates: dict[str, Any]) -> ReplayReport:
    return ReplayReport("r1", "pay", "into-sink", "ok", "2026-11-27T10:00:00+00:00",
                        {"partitions": [{"topic": "t", "partition": 2, "start": 0, "end": 100}]},
                        {"url": "sqlite:///x.db", "tables": {"totals": "pay_totals"}}, aggregates=aggregates)


def test_format_report_prints_the_sum_and_reads_older_reports() -> None:
    fates = {f"g{i}": Fate(REWRITTEN) for i in range(108)} | {f"u{i}": Fate(UNCHANGED) for i in range(108)} | \
        {f"l{i}": Fate(LEFT_ALONE, ALL_LATE) for i in range(36)}
    outcome = AggregateOutcome.of("totals", fates, horizon="2026-11-27T10:30:00+00:00",
                                  horizon_source="watermark of the stream's committed batch 7")
    text = format_report(ReplayReport.from_json(report_with({"totals": outcome.to_json()}).to_json()))
    line = next(x for x in text.splitlines() if x.startswith("aggregates totals:"))
    assert line == ("aggregates totals: 252 groups touched = 108 rewritten + 108 unchanged + 36 left alone (all "
                    "records late dead letters: no counted record makes it, and it has no row); closed groups "
                    "recomputed from all their records (every partition, the whole window) (closed up to "
                    "2026-11-27T10:30:00+00:00: watermark of the stream's committed batch 7)")
    old = {"touched": 252, "recomputed": 216, "written": 108, "unchanged": 108, "left_open": 0, "left_alone": 0,
           "removed": 0, "unsupported_left": 0, "horizon": None, "horizon_source": ""}
    old_line = next(x for x in format_report(report_with({"totals": old})).splitlines() if x.startswith("aggregates"))
    assert "252 groups touched by the range, 216 recomputed from all their records" in old_line


def test_the_groups_a_chunk_touches_are_the_same_with_one_row_per_group() -> None:
    """``distinct_groups`` keeps one row per group before each is turned into text: the set of groups is
    the one every row gives, keys of mixed types (1, 1.0, "1", None) and windows alike."""
    from types import SimpleNamespace

    import pandas as pd

    from rewind.proof.aggregates import group_text
    from rewind.replay.recompute import distinct_groups

    agg = SimpleNamespace(window="window_start", keys=("k",))
    starts = pd.to_datetime(["2026-11-29T00:00:00Z", "2026-11-29T00:00:05Z"] * 6, utc=True)
    frame = pd.DataFrame({"window_start": starts, "k": [1, 1.0, "1", None, 1, "1"] * 2, "n": range(12)})
    every_row = set(group_text(frame, agg))
    fewer = distinct_groups(frame, agg)
    assert len(fewer) < len(frame) and set(group_text(fewer, agg)) == every_row
    windowless = SimpleNamespace(window=None, keys=("k",))
    assert set(group_text(distinct_groups(frame, windowless), windowless)) == set(group_text(frame, windowless))
