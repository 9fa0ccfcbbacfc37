"""Issue 26's decisions, pure: aggregate groups judged by value, what a replay recomputes or refuses,
the smaller contract's routing and schemas, the Kafka sink's settings. No Kafka, no Spark.

Each proof is shown to fail on the damage it claims to catch, on hand-made frames: the partial
totals an old partition-subset replay wrote, a total off by one, a row deleted or duplicated.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rewind.api.contract import Aggregate, Identity
from rewind.api.tables import Column, TableSpec
from rewind.kafka.types import TP
from rewind.proof.aggregates import closing_horizon, counts_of, group_text, judge_groups, recompute_measures

T0 = pd.Timestamp("2026-11-27T10:00:00Z")
MINUTE = timedelta(minutes=1)
AGG = Aggregate("totals", keys=("merchant",), measures={"total": "sum(amount)", "payments": "count"})


def payments(n: int = 600, partitions: int = 4) -> pd.DataFrame:
    """n payments over partitions, 5 merchants, 6 minutes of event time."""
    i = np.arange(n)
    return pd.DataFrame({"payment_id": [f"p{k}" for k in i], "merchant": [f"m{k % 5}" for k in i],
                         "amount": (i * 37 % 500) / 7.0, "event_time": T0 + pd.to_timedelta(i * 600, unit="ms"),
                         "topic": "t", "partition": i % partitions, "offset": i // partitions, "reason": None})


def states(frame: pd.DataFrame) -> dict[str, int]:
    return {k: v for k, v in counts_of(frame).items() if v and k != "aggregates_checked"}


def judge(sink: pd.DataFrame, rows: pd.DataFrame, **kw: object) -> pd.DataFrame:
    kw.setdefault("closed_until", T0 + pd.Timedelta(minutes=5))
    return judge_groups(sink, recompute_measures(rows, AGG, MINUTE), AGG, values=["total", "payments"], size=MINUTE,
                        **kw)  # type: ignore[arg-type]


def test_a_whole_sink_matches_and_each_damage_is_named() -> None:
    rows = payments()
    whole = recompute_measures(rows, AGG, MINUTE).assign(batch_id=1)
    assert len(whole) == 30 and whole["payments"].sum() == 600
    assert states(judge(whole, rows)) == {"aggregates_match": 30}
    off = whole.copy()
    off.loc[3, "total"] += 1
    frame = judge(off, rows)
    assert states(frame) == {"aggregates_match": 29, "aggregates_mismatch": 1}
    bad = frame[frame["aggregate_state"] == "mismatch"].iloc[0]["disagrees"]
    key = f"{pd.Timestamp(off.loc[3, 'window_start']).isoformat()}, {off.loc[3, 'merchant']}"
    sink_total, recomputed = float(off.loc[3, "total"]), float(whole.loc[3, "total"])
    assert bad == f"totals [{key}] total: sink {sink_total!r}, recomputed {recomputed!r}"
    assert states(judge(whole.drop(index=2), rows))["aggregates_missing"] == 1  # closed, so owed
    twice = pd.concat([whole, whole.iloc[[4]]], ignore_index=True)
    assert states(judge(twice, rows))["aggregates_duplicate"] == 2
    stranger = pd.concat([whole, whole.iloc[[5]].assign(merchant="nobody")], ignore_index=True)
    assert states(judge(stranger, rows))["aggregates_unexpected"] == 1


def test_the_totals_an_old_partition_replay_wrote_fail_the_proof() -> None:
    """The issue's replay: partition 3's own sums upserted over whole totals. Every group it touched is a
    mismatch naming both values; the old key-only proof had nothing to compare."""
    rows = payments()
    whole = recompute_measures(rows, AGG, MINUTE).set_index(["window_start", "merchant"])
    partial = recompute_measures(rows[rows["partition"] == 3], AGG, MINUTE).set_index(["window_start", "merchant"])
    after = whole.copy()
    after.loc[partial.index] = partial
    frame = judge(after.reset_index(), rows)
    assert states(frame)["aggregates_mismatch"] == len(partial) > 0
    assert all("recomputed" in d for d in frame.loc[frame["aggregate_state"] == "mismatch", "disagrees"])


def test_open_groups_are_pending_scope_and_later_batches_are_left_out() -> None:
    rows = payments()
    whole = recompute_measures(rows, AGG, MINUTE).assign(batch_id=1)
    early = T0 + pd.Timedelta(minutes=2)
    frame = judge(whole[whole["window_start"] < early], rows, closed_until=early)
    assert states(frame) == {"aggregates_match": 10, "aggregates_pending": 20}
    scope = set(group_text(whole.iloc[:3], AGG))
    assert len(judge(whole.drop(index=[0]), rows, scope=scope)) == 3
    later = whole.assign(batch_id=[1] * 29 + [9])
    later.loc[29, "total"] += 5
    assert "aggregates_mismatch" not in states(judge(later, rows, last_batch=3))
    assert closing_horizon(None, T0, timedelta(seconds=20)) == T0 - pd.Timedelta(seconds=20)
    assert closing_horizon(T0.to_pydatetime(), T0 + pd.Timedelta(hours=1), timedelta(0)) == T0
    assert closing_horizon(None, None, timedelta(0)) is None


def test_what_a_replay_recomputes_leaves_open_or_leaves_alone() -> None:
    from rewind.replay.aggregates import LEFT_ALONE, OPEN, PAST_RETENTION, REFUSED, Fate, fate_before, to_recompute

    starts = {f"g{m}": T0 + pd.Timedelta(minutes=m) for m in range(6)}
    kw = {"size": MINUTE, "horizon": T0 + pd.Timedelta(minutes=3), "retained_from": T0 + pd.Timedelta(minutes=1)}
    assert to_recompute(starts, {"g5"}, **kw) == {"g1", "g2", "g5"}  # type: ignore[arg-type]
    fates = {g: fate_before(s, in_sink=g == "g5", **kw) for g, s in starts.items()}  # type: ignore[arg-type]
    assert fates == {"g0": Fate(LEFT_ALONE, PAST_RETENTION), "g1": None, "g2": None, "g3": Fate(LEFT_ALONE, OPEN),
                     "g4": Fate(LEFT_ALONE, OPEN), "g5": None}
    assert to_recompute({"k": None}, set(), size=None, horizon=None, retained_from=None) == {"k"}
    assert fate_before(None, in_sink=True, size=None, horizon=None, retained_from=T0) == Fate(REFUSED)


def test_a_replay_is_refused_when_it_could_not_keep_an_aggregate_whole() -> None:
    from rewind.replay.aggregates import refusals
    from rewind.replay.problems import ReplayRefused

    key = ("window_start", "merchant")
    totals = TableSpec("totals", (Column("window_start", "timestamp", False), Column("merchant", "string", False),
                                  Column("total", "double")), key, "replace")
    assert refusals([totals], [AGG], {TP("t", 0): 0}) == []
    undeclared = refusals([totals], [], {TP("t", 0): 0})
    assert [p.kind for p in undeclared] == ["aggregate_undeclared"]
    assert "'totals' is on_conflict 'replace' but not declared an aggregate" in undeclared[0].message
    forever = Aggregate("totals", keys=("merchant",), window=None)
    assert refusals([totals], [forever], {TP("t", 0): 0, TP("t", 1): 0}) == []
    cut = refusals([totals], [forever], {TP("t", 0): 0, TP("t", 1): 120})
    assert [p.kind for p in cut] == ["aggregate_unbounded"] and "t[1] below offset 120" in cut[0].message
    text = str(ReplayRefused(cut))
    assert text.startswith("replay refused: aggregate table 'totals' has no window") and "\n" not in text


def test_changed_rows_writes_only_what_differs() -> None:
    from rewind.replay.aggregates import changed_rows

    fresh = recompute_measures(payments(), AGG, MINUTE).assign(batch_id=None)
    now = fresh.iloc[1:].copy()
    now.loc[now.index[0], "payments"] += 1
    out, examples = changed_rows(fresh, now, AGG, ["total", "payments"])
    assert len(out) == 2 and out["batch_id"].isna().all()
    assert examples[0]["before"] is None and examples[1]["before"]["payments"] > examples[1]["after"]["payments"]


def test_rows_no_record_makes_are_the_ones_removed() -> None:
    """A recomputed group with no row in the recomputation (only late records made it) is removed;
    a row a batch past the stream's last committed one wrote is not, nor a group not recomputed."""
    from rewind.replay.aggregates import LATER_BATCH, LEFT_ALONE, REMOVED, Fate, fate_after, sink_rows

    fresh = recompute_measures(payments(), AGG, MINUTE)
    ghost = fresh.iloc[:3].assign(window_start=T0 - pd.Timedelta(minutes=3))  # a minute no record holds
    now = pd.concat([fresh, ghost], ignore_index=True).assign(batch_id=pd.array([*[4] * len(fresh), None, 2, 9],
                                                                               dtype="Int64"))
    made = set(group_text(fresh, AGG))
    ghosts = list(group_text(ghost, AGG))

    def fates(last_batch: int | None) -> list[Fate]:
        held, settled = sink_rows(now, AGG, last_batch=last_batch)
        assert all(held[g] == 1 for g in group_text(now, AGG))
        return [fate_after(made=g in made, differs=False, rows=held[g], settled=settled.get(g, 0), can_delete=True)
                for g in ghosts]

    # batch 9 is past the committed batch 5: it may hold more
    assert fates(5) == [Fate(REMOVED), Fate(REMOVED), Fate(LEFT_ALONE, LATER_BATCH)]
    assert fates(None) == [Fate(REMOVED), Fate(LEFT_ALONE, LATER_BATCH), Fate(LEFT_ALONE, LATER_BATCH)]
    assert sink_rows(now.drop(columns=["batch_id"]), AGG, last_batch=None)[1] == sink_rows(now, AGG, last_batch=99)[0]
    assert sink_rows(now.iloc[:0], AGG, last_batch=5) == ({}, {})


def test_default_split_routes_by_kind_and_columns_come_from_the_schema() -> None:
    from rewind.api.routing import route_by_kind
    from rewind.driver.outputs import columns_from_schema, output_table

    declared = output_table("pay", key=("payment_id",))
    assert not declared.resolved
    table = columns_from_schema(declared, [("payment_id", "string"), ("amount", "double"), ("n", "long"),
                                           ("event_time", "timestamp"), ("partition", "integer")], "stream s")
    assert [(c.name, c.type, c.nullable) for c in table.columns] == [
        ("payment_id", "string", False), ("amount", "double", True), ("n", "bigint", True),
        ("event_time", "timestamp", True), ("partition", "int", True), ("batch_id", "bigint", True)]
    with pytest.raises(ValueError, match="table 'pay': column 'flag' is a Spark boolean"):
        columns_from_schema(declared, [("payment_id", "string"), ("flag", "boolean")], "stream s")
    with pytest.raises(ValueError, match="outputs no column 'payment_id'"):
        columns_from_schema(declared, [("id", "string")], "stream s")
    dead = TableSpec("dead_letter", (Column("topic", "string", False), Column("partition", "int", False),
                                     Column("offset", "bigint", False), Column("reason", "string")),
                     ("topic", "partition", "offset"), "ignore")
    frame = pd.DataFrame({"kind": ["pay", "dead_letter", "late_candidate", "other"],
                          "payment_id": ["a", None, "b", "c"], "amount": [1.0, None, 2.0, 3.0], "topic": "t",
                          "partition": [0, 0, 1, 1], "offset": [0, 1, 0, 1],
                          "reason": [None, "malformed", "behind_watermark", None]})
    out = route_by_kind(frame, [table, dead], 7)
    assert out["pay"]["payment_id"].tolist() == ["a"] and list(out["pay"].columns) == [*table.column_names]
    assert out["dead_letter"]["reason"].tolist() == ["malformed", "behind_watermark"]
    assert set(out["dead_letter"]["batch_id"]) == {7}
    assert route_by_kind(frame, [table, dead], None, kinds={"other": "pay"})["pay"]["payment_id"].tolist() == ["a", "c"]


def test_a_sink_refuses_tables_without_columns() -> None:
    from rewind.driver.outputs import output_table
    from rewind.sink.errors import SinkRefused
    from rewind.sink.sql import ExactlyOnceSqlSink

    with pytest.raises(SinkRefused, match=r"tables \['pay'\] have no columns yet"):
        ExactlyOnceSqlSink("sqlite:///:memory:", "s", [output_table("pay", key=("id",))])


def test_the_proof_from_build_ignores_which_copy_a_batch_kept() -> None:
    """Without expect(), the sink is held to build()'s rows: a deduplicated row's Kafka coordinates may be
    another copy's, its values may not."""
    from rewind.proof.contract_frames import build_contract_frames

    built = payments(40).drop(columns=["reason"]).assign(reason=None)
    sink = built.drop(columns=["reason"]).copy()
    sink.loc[5, ["partition", "offset"]] = [3, 999]  # the stream kept the other copy of p5
    ident = Identity("pay", ("payment_id",))
    keys = {"pay": ("payment_id",), "dead_letter": ("topic", "partition", "offset")}
    skip = ("topic", "partition", "offset", "kafka_timestamp")

    def problems(rows: pd.DataFrame) -> dict[str, int]:
        f = build_contract_frames(built, {"pay": rows}, identity=ident, keys=keys, dead_letter_table="dead_letter",
                                  not_reconciled=skip)
        got = {**f.coverage["landed_in"].value_counts().to_dict(), **f.rows["row_check"].value_counts().to_dict()}
        return {k: v for k, v in got.items() if k not in ("row", "ok")}

    assert problems(sink) == {}
    altered = sink.copy()
    altered.loc[7, "amount"] += 1
    assert problems(altered) == {"value_mismatch": 1}
    assert problems(sink.drop(index=8)) == {"missing": 1}
    assert problems(pd.concat([sink, sink.iloc[[9]]], ignore_index=True)) == {"duplicate_key": 2}


def test_kafka_sink_settings_the_producer_would_refuse_are_refused_at_load(tmp_path: Path) -> None:
    from rewind.registry import RegistryError, load_registry
    from rewind.sink.kafka import LEDGER_TOPIC_CONFIG
    from rewind.sink.kafka_ledger import LedgerEntry
    from tests.harness.registry_templates import demo_stream, write_registry

    for option in ("kafka.request.required.acks: '1'", "kafka.acks: '1'"):
        sink = f'{{url: "kafka://127.0.0.1:9092/out.", options: {{{option}}}}}'
        reg = write_registry(tmp_path / "r.yaml", demo_stream("k", "t", tmp_path, sink=sink))
        with pytest.raises(RegistryError, match="transactions need acks=all"):
            load_registry(reg)
    assert LEDGER_TOPIC_CONFIG == {"cleanup.policy": "compact", "retention.ms": "-1"}
    a = LedgerEntry("s", 3, pd.Timestamp.now(tz="UTC").to_pydatetime(), {}, None)
    assert a.key() == b"s/3" and a.key() != LedgerEntry("s", 4, a.committed_at, {}, None).key()
