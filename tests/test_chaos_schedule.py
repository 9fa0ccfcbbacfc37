"""The chaos harness's pure parts: the seeded schedule, its timeline rules, the known set of
events, the invariants and the report; plus the S3 fault proxy on local sockets. No services."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from rewind.chaos.backlog import LAG_SPAN_DELAYS, LEAD_SPAN_DELAYS, skew_backlog
from rewind.chaos.judge import judge
from rewind.chaos.known_set import ProducerKnobs, backlog_behind, compare_known, expected_records
from rewind.chaos.report import faults_by_kind, format_text, landing
from rewind.chaos.schedule import (
    DAMAGES,
    FAULT_KINDS,
    KILL_MOMENTS,
    MIN_SEGMENT_EVENTS,
    Action,
    ChaosConfig,
    Fault,
    Schedule,
    ScheduleError,
    make_schedule,
)
from rewind.chaos.timeline import check_actions, check_timeline
from rewind.demo.producer import ProduceSpec, plan_record

CI = ChaosConfig(seed=7, events=100_000, kills=10, broker_restarts=1, corruptions=1, replays=1, s3_outages=1,
                 skewed_restarts=1)
LONG = ChaosConfig(seed=7, events=1_000_000, kills=25, broker_restarts=3, corruptions=4, replays=3, s3_outages=3,
                   skewed_restarts=3)


# --------------------------------------------------------------------------- the schedule
def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    a, b = make_schedule(CI), make_schedule(ChaosConfig(**{**CI.__dict__}))
    assert a.to_json() == b.to_json()
    others = {str(make_schedule(ChaosConfig(**{**CI.__dict__, "seed": s})).to_json()["faults"]) for s in range(8, 16)}
    assert str(a.to_json()["faults"]) not in others and len(others) == 8


@pytest.mark.parametrize("config", [
    CI,
    LONG,
    ChaosConfig(seed=1, events=1_000_000, kills=30, broker_restarts=3, corruptions=4, replays=3, s3_outages=3),
    ChaosConfig(seed=2, events=5_000, kills=2, broker_restarts=0, corruptions=0, replays=0, s3_outages=0,
                skewed_restarts=0),
    ChaosConfig(seed=3, events=2_000, kills=0, broker_restarts=0, corruptions=0, replays=0, s3_outages=0,
                skewed_restarts=0),
    ChaosConfig(seed=4, events=20_000, kills=0, broker_restarts=2, corruptions=3, replays=2, s3_outages=2),
    ChaosConfig(seed=5, events=20_000, kills=0, broker_restarts=0, corruptions=0, replays=0, s3_outages=0,
                skewed_restarts=4),
])
def test_counts_are_honoured_and_events_advance(config: ChaosConfig) -> None:
    s = make_schedule(config)
    assert s.counts() == config.counts
    assert [f.index for f in s.faults] == list(range(1, config.faults + 1))
    starts = [s.first_release] + [f.releases for f in s.faults]
    assert starts[-1] == config.events
    assert all(b - a >= MIN_SEGMENT_EVENTS // 2 for a, b in zip([0] + starts, starts)), starts
    assert [f.starts_after for f in s.faults] == starts[:-1]
    assert check_timeline(s) == []


def test_kill_moments_and_damages_cycle_through_every_kind() -> None:
    s = make_schedule(ChaosConfig(seed=11, events=100_000, kills=10, corruptions=4))
    moments = Counter(f.params["moment"] for f in s.faults if f.kind == "kill")
    assert set(moments) == set(KILL_MOMENTS) and max(moments.values()) - min(moments.values()) <= 1, moments
    assert {f.params["damage"] for f in s.faults if f.kind == "corruption"} == set(DAMAGES)
    ci = make_schedule(CI)
    assert sum(1 for f in ci.faults if f.kind == "kill" and f.params["moment"] == "sink_committed") >= 3


def test_every_seed_gives_a_timeline_that_makes_sense() -> None:
    for seed in range(200):
        config = ChaosConfig(seed=seed, events=50_000, kills=seed % 7, broker_restarts=seed % 3,
                             corruptions=seed % 5, replays=seed % 2, s3_outages=seed % 3, skewed_restarts=seed % 4)
        assert check_timeline(make_schedule(config)) == [], seed


# --------------------------------------------------------------------------- the skewed restart
def test_skewed_restarts_are_scheduled_with_their_params() -> None:
    s = make_schedule(LONG)
    skews = [f for f in s.faults if f.kind == "skewed_restart"]
    assert len(skews) == 3 == s.counts()["skewed_restart"]
    for f in skews:
        p = f.params
        assert p["lagging_partition"] == 0 and 0.6 <= p["lagging_share"] <= 0.8
        assert 1.25 <= p["skew_delays"] <= 2.0 and 0.3 <= p["behind_share"] <= 0.7
        assert not f.releases_at_start  # its segment is the backlog its produce_backlog action writes
        assert "skewed backlogs" in f.describe() and "watermark delays older" in f.describe()
    assert all(f.releases_at_start for f in s.faults if f.kind != "skewed_restart")
    assert len({str(f.params) for f in skews}) == 3  # each draws its own
    assert "--skewed-restarts" in str(pytest.raises(ScheduleError, make_schedule,
                                                    ChaosConfig(skewed_restarts=-1)).value)


def test_skewed_restart_seeds_reproduce_and_zero_leaves_old_schedules_alone() -> None:
    a = make_schedule(LONG).to_json()
    assert a == make_schedule(ChaosConfig(**LONG.__dict__)).to_json()
    others = {str(make_schedule(ChaosConfig(**{**LONG.__dict__, "seed": s})).to_json()["faults"]) for s in (8, 9, 10)}
    assert str(a["faults"]) not in others and len(others) == 3
    # without skewed restarts a seed draws exactly what it drew before the fault kind existed
    # (the seed-7 CI schedule of the previous release, before skewed restarts existed)
    before = make_schedule(ChaosConfig(seed=7, events=100_000, kills=10, skewed_restarts=0))
    assert [f.kind for f in before.faults] == ["kill", "s3_outage", "replay", "kill", "kill", "kill", "corruption",
                                               "kill", "kill", "kill", "broker_restart", "kill", "kill", "kill"]
    assert before.faults[0].describe() == "#1 after 7,076 events: SIGKILL the stream (sink_committed)"
    assert before.faults[3].describe() == "#4 after 27,243 events: SIGKILL the stream (random, after 2.47s)"


def test_skewed_restart_stops_writes_the_backlog_while_down_and_held_then_catches_up() -> None:
    f = Fault(1, "skewed_restart", 0, 1000, {"lagging_partition": 0, "lagging_share": 0.7, "skew_delays": 1.5,
                                              "behind_share": 0.5})
    names = [a.name for a in f.actions()]
    assert names == ["await_batches", "hold_supervisor", "stop", "produce_backlog", "release_supervisor",
                     "await_recovery", "await_caught_up"]
    assert f.actions()[0].args == {"at_least": 2}  # a watermark exists to be behind
    assert f.actions()[3].args == f.params
    assert check_actions(f.actions()) == []


@pytest.mark.parametrize("actions,problem", [
    ([Action("stop"), Action("await_recovery")], "without holding the supervisor"),
    ([Action("hold_supervisor"), Action("produce_backlog"), Action("release_supervisor")],
     "while the stream runs"),
    ([Action("hold_supervisor"), Action("stop"), Action("release_supervisor"), Action("produce_backlog"),
      Action("await_recovery"), Action("await_caught_up")], "without holding the supervisor (it may relaunch"),
    ([Action("broker_stop"), Action("hold_supervisor"), Action("stop"), Action("produce_backlog"),
      Action("release_supervisor"), Action("broker_start"), Action("await_recovery"), Action("await_caught_up")],
     "while the broker is down"),
    ([Action("hold_supervisor"), Action("stop"), Action("produce_backlog"), Action("release_supervisor"),
      Action("await_recovery")], "ends with"),  # never caught up: the next fault would meet a half-read backlog
    ([Action("await_caught_up")], "without a backlog"),
    ([Action("hold_supervisor"), Action("stop"), Action("produce_backlog"), Action("await_caught_up")],
     "supervisor held"),
    ([Action("hold_supervisor"), Action("stop"), Action("stop")], "already down"),
])
def test_skewed_restart_nonsense_is_refused(actions: list[Action], problem: str) -> None:
    problems = check_actions(actions)
    assert any(problem in p for p in problems), problems


def test_a_backlog_left_half_read_overlaps_the_next_fault() -> None:
    s = make_schedule(ChaosConfig(seed=2, events=10_000, kills=1, broker_restarts=0, corruptions=0, replays=0,
                                  s3_outages=0, skewed_restarts=1))
    skew = next(f for f in s.faults if f.kind == "skewed_restart")
    broken = Fault(skew.index, "replay", skew.starts_after, skew.releases, {"start_fraction": 0.1,
                                                                            "end_fraction": 0.2})
    assert check_timeline(s) == []
    faults = tuple(broken if f is skew else f for f in s.faults)
    assert any("fault counts" in p for p in check_timeline(Schedule(s.config, s.first_release, faults)))

    class HalfRead(Fault):
        def actions(self) -> list[Action]:
            return super().actions()[:-1]  # no await_caught_up

    faults = tuple(HalfRead(f.index, f.kind, f.starts_after, f.releases, f.params) if f is skew else f
                   for f in s.faults)
    assert any("leaves" in p and "backlog=True" in p for p in check_timeline(Schedule(s.config, s.first_release,
                                                                                       faults)))


def test_skew_backlog_puts_partition_0_behind_by_more_than_the_delay() -> None:
    params = {"lagging_partition": 0, "lagging_share": 0.7, "skew_delays": 1.5, "behind_share": 0.4}
    wm, delay = 1_800_000_000_000, 30_000
    plan = skew_backlog(params, 1000, 6000, 3, wm, delay)
    placed = [plan.place(seq) for seq in range(1000, 6000)]
    by_part = Counter(p for p, _ in placed)
    assert by_part[0] == 3500 and by_part[1] + by_part[2] == 1500 and abs(by_part[1] - by_part[2]) <= 1
    lag = [t for p, t in placed if p == 0]
    lead = [t for p, t in placed if p != 0]
    assert lag == sorted(lag) and min(lag) == plan.lag_from_ms and max(lag) == plan.lag_to_ms
    assert plan.lag_to_ms - plan.lag_from_ms == LAG_SPAN_DELAYS * delay
    assert plan.lead_to_ms - plan.lead_from_ms == LEAD_SPAN_DELAYS * delay
    assert min(lead) - max(lag) == 1.5 * delay > delay  # skewed by more than the watermark delay
    assert plan.newest_ms == max(lead)
    # the lagging range straddles the watermark the stream stopped at: 40 % of it is behind already
    behind = sum(1 for t in lag if t <= wm)
    assert abs(behind / len(lag) - 0.4) < 0.01 and max(lag) > wm and min(lead) > wm
    with pytest.raises(ValueError):
        plan.place(6000)
    assert plan == skew_backlog(params, 1000, 6000, 3, wm, delay)  # pure
    with pytest.raises(ScheduleError, match="at least 2 partitions"):
        skew_backlog(params, 0, 1000, 1, wm, delay)
    with pytest.raises(ScheduleError, match="more than 1 watermark delay"):
        skew_backlog({**params, "skew_delays": 0.9}, 0, 1000, 3, wm, delay)


def test_backlog_behind_counts_the_valid_records_at_or_behind_the_watermark() -> None:
    knobs = ProducerKnobs(malformed_every=10, late_every=7, duplicate_every=5)
    params = {"lagging_partition": 0, "lagging_share": 0.5, "skew_delays": 2.0, "behind_share": 0.5}
    plan = skew_backlog(params, 0, 200, 3, 100_000, 30_000)
    # the producer's own plan is the reference: valid events (and their re-sends) placed at or before the watermark
    spec = ProduceSpec(topic="-", count=200, malformed_every=10, late_every=7, duplicate_every=5)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    want = 0
    for seq in range(200):
        kinds = [k for k, _, _ in plan_record(spec, seq, now)]
        if plan.place(seq)[1] <= 100_000 and kinds[0] == "event":
            want += len(kinds)
    assert backlog_behind(plan, knobs) == want > 0
    # none behind: only the record exactly at the watermark (Spark's "<=") counts
    assert backlog_behind(skew_backlog({**params, "behind_share": 0.0}, 0, 200, 3, 100_000, 30_000), knobs) <= 2


def test_corruption_happens_only_while_down_and_held() -> None:
    for damage, expected in DAMAGES.items():
        f = Fault(1, "corruption", 0, 1000, {"damage": damage, "delay_s": 1.0, "pick": 0.5})
        names = [a.name for a in f.actions()]
        assert names[0] == "await_batches" and f.actions()[0].args == {"at_least": 2}  # something to roll back to
        kill, corrupt = names.index("sigkill"), names.index("corrupt")
        assert names.index("hold_supervisor") < kill < corrupt < names.index("release_supervisor") \
            < names.index("await_recovery"), names
        if expected == "restored":  # a savepoint to restore exists before the damage
            assert names.index("savepoint") < kill
        else:
            assert "savepoint" not in names


@pytest.mark.parametrize("actions,problem", [
    ([Action("corrupt", {"damage": "garbage_commit"})], "running stream"),
    ([Action("sigkill"), Action("corrupt", {"damage": "garbage_commit"}), Action("await_recovery")],
     "without holding the supervisor"),
    ([Action("hold_supervisor"), Action("sigkill"), Action("corrupt", {"damage": "no_complete_batch"}),
      Action("release_supervisor"), Action("await_recovery")], "before any savepoint"),
    ([Action("sigkill"), Action("sigkill")], "already down"),
    ([Action("broker_stop"), Action("replay"), Action("broker_start")], "replays while"),
    ([Action("hold_supervisor"), Action("sigkill"), Action("await_recovery")], "deadlock"),
    ([Action("savepoint_cut"), Action("savepoint")], "while S3 is down"),
    ([Action("broker_stop")], "ends with"),
    ([Action("await_recovery")], "stream that is up"),
    ([Action("explode")], "unknown action"),
])
def test_nonsense_is_refused(actions: list[Action], problem: str) -> None:
    problems = check_actions(actions)
    assert any(problem in p for p in problems), problems


def test_every_fault_kind_alone_leaves_everything_up() -> None:
    params = {"kill": {"moment": "random", "delay_s": 1.0}, "broker_restart": {"down_s": 1.0},
              "s3_outage": {"cut_fraction": 0.5, "outage_s": 3.0},
              "corruption": {"damage": "truncate_offsets", "delay_s": 1.0, "pick": 0.1},
              "replay": {"start_fraction": 0.1, "end_fraction": 0.3},
              "skewed_restart": {"lagging_partition": 0, "lagging_share": 0.7, "skew_delays": 1.5,
                                 "behind_share": 0.5}}
    for kind in FAULT_KINDS:
        assert check_actions(Fault(1, kind, 0, 10, params[kind]).actions()) == [], kind


def test_timeline_flags_bad_event_bounds() -> None:
    s = make_schedule(ChaosConfig(seed=1, events=10_000, kills=3, broker_restarts=0, corruptions=0, replays=0,
                                  s3_outages=0))
    broken = Schedule(s.config, s.first_release, (s.faults[0], s.faults[2], s.faults[1]))
    problems = check_timeline(broken)
    assert any("starts after" in p for p in problems), problems


def test_too_few_events_or_negative_counts_are_refused() -> None:
    with pytest.raises(ScheduleError, match="at least"):
        make_schedule(ChaosConfig(events=1000, kills=10))
    with pytest.raises(ScheduleError, match="--kills must be >= 0"):
        make_schedule(ChaosConfig(kills=-1))


def test_describe_names_what_happens() -> None:
    text = "\n".join(f.describe() for f in make_schedule(CI).faults)
    assert "SIGKILL the stream (sink_committed)" in text and "restart the Kafka broker" in text
    assert "S3 unavailable" in text and "replay [" in text and "while down (expect:" in text
    assert "skewed backlogs" in text


# --------------------------------------------------------------------------- known set, landing
def test_expected_records_follow_the_producer_plan() -> None:
    knobs = ProducerKnobs(malformed_every=10, late_every=7, duplicate_every=5)
    e = expected_records(1000, knobs)
    assert e.malformed == 100  # seq % 10 == 9
    assert len(e.event_ids) + e.malformed + e.late == 1000
    # duplicates: every 5th non-malformed seq; a late one's re-send is a dead letter too
    assert e.sends == 1000 + e.duplicate_sends
    late_dups = sum(1 for s in range(1000) if s % 10 != 9 and s % 7 == 6 and s % 5 == 4)
    assert e.dead_letters == e.malformed + e.late + late_dups
    assert "chaos-000000000" in e.event_ids and "chaos-000000009" not in e.event_ids


@pytest.mark.parametrize("pos,where", [
    ({"planned": None, "committed": None, "sink_ledger": None}, "before the first batch"),
    ({"planned": 7, "committed": 7, "sink_ledger": 7}, "between batches"),
    ({"planned": 8, "committed": 7, "sink_ledger": 8}, "during the commit of batch 8"),
    ({"planned": 8, "committed": 7, "sink_ledger": 7}, "during batch 8"),
    ({"planned": 0, "committed": None, "sink_ledger": None}, "during batch 0"),
])
def test_landing(pos: dict, where: str) -> None:
    from rewind.chaos.report import landing_kind

    assert landing(pos).startswith(where)
    assert landing_kind(landing(pos)) in ("during a batch commit", "during a batch", "between batches",
                                          "before the first batch")


# --------------------------------------------------------------------------- invariants and report
def _good_facts() -> dict:
    sched = make_schedule(ChaosConfig(seed=3, events=10_000, kills=2, broker_restarts=1, corruptions=1, replays=1,
                                      s3_outages=1))
    rec = {"cause": "process_gone", "checkpoint_action": "none", "detect_s": 1.2, "relaunch_s": 6.0,
           "running_s": 12.0, "progress_s": 20.0}
    faults = []
    for f in sched.faults:
        r = {"index": f.index, "kind": f.kind, "params": f.params, "injected": True, "error": None}
        if f.kind in ("kill", "corruption"):
            r["kill"] = {"pid": 100 + f.index, "at": 1.0, "landed": "during the commit of batch 8 (in the sink, ...)"}
            r["recovery"] = dict(rec)
        if f.kind == "corruption":
            r["corruption"] = {"damage": f.params["damage"], "expected": DAMAGES[f.params["damage"]], "batch": 4,
                               "files": ["offsets/4"]}
            r["recovery"]["checkpoint_action"] = DAMAGES[f.params["damage"]]
        if f.kind == "replay":
            r["replay"] = {"ok": True, "exit_code": 0, "records_read": 500, "proof_ok": True, "replay_id": "chaos-1"}
        if f.kind == "s3_outage":
            r["s3"] = {"ok": True, "summary": "cut, retried, complete"}
        if f.kind == "broker_restart":
            r["broker"] = {"down_s": 1.5}
        if f.kind == "skewed_restart":
            r["stop"] = {"pid": 300 + f.index, "at": 1.0, "graceful": True}
            r["recovery"] = {**rec, "cause": "stopped"}
            r["skew"] = {"records": 1400, "by_partition": {"0": 1000, "1": 200, "2": 200}, "outage_s": 31.0,
                         "lagging_partition": 0, "skew_s": 45.0, "watermark": "2026-01-01T00:00:00.000+00:00",
                         "caught_up_s": 40.2, "behind_watermark": 120, "expected_behind": 118}
        faults.append(r)
    return {"schedule": sched.to_json(), "schedule_problems": [], "faults": faults,
            "supervisor": {"gave_up": None, "errors": [], "recoveries": [rec] * 3},
            "producer": {"acknowledged": 10_200, "errors": []}, "expected": {"sends": 10_200},
            "kafka": {"records": 10_200, "acknowledged_missing": 0}, "caught_up": {"ok": True, "detail": "at end"},
            "known": {"expected_events": 9800, "sink_events": 9700, "missing": 0, "unexpected": 0,
                      "duplicate_rows": 0, "expected_dead_letters": 150, "sink_dead_letters": 270,
                      "other_dead_letters": 150, "behind_watermark": 120, "behind_events": 100, "behind_not_known": 0,
                      "events_also_dead": 0},
            "late_checks": {"path": "/x/demo.late.jsonl", "lines": 60, "batches": 55, "bad_count": 0, "bad": [],
                            "routed": 120, "status_mismatches": []},
            "source": {"format": "kafka"},
            "proof": {"ok": True, "expectations": 23, "failures": []},
            "verify": {"ok": True, "kafka_records": 10_200, "sink_events": 9800, "windows_checked": 40}}


def test_judge_passes_good_facts() -> None:
    invariants = judge(_good_facts())
    assert all(i["ok"] for i in invariants), [i for i in invariants if not i["ok"]]
    assert len(invariants) == 17 and not any(i.get("warn") for i in invariants)
    behind = next(i for i in invariants if i["name"] == "records_behind_watermark")
    assert "the 1 skewed restart(s) put 120 there" in behind["detail"]


@pytest.mark.parametrize("break_it,name", [
    (lambda f: f.update(harness_error="RuntimeError: boom"), "harness_completed"),
    (lambda f: f["schedule_problems"].append("x"), "schedule_valid"),
    (lambda f: f["faults"][0].update(error="boom"), "every_fault_injected"),
    (lambda f: f["faults"].pop(), "every_fault_injected"),
    (lambda f: f["supervisor"].update(gave_up="crash loop"), "supervisor_never_gave_up"),
    (lambda f: [x.update(recovery=None) for x in f["faults"] if x["kind"] == "kill"], "every_kill_recovered"),
    (lambda f: [x["recovery"].update(checkpoint_action="none") for x in f["faults"] if x["kind"] == "corruption"],
     "corruptions_repaired_or_restored"),
    (lambda f: [x["replay"].update(ok=False) for x in f["faults"] if x["kind"] == "replay"], "replays_proven"),
    (lambda f: [x["s3"].update(ok=False) for x in f["faults"] if x["kind"] == "s3_outage"],
     "interrupted_savepoints_invisible"),
    (lambda f: f["producer"]["errors"].append("timed out"), "producer_delivered_all"),
    (lambda f: f["kafka"].update(acknowledged_missing=3), "kafka_kept_acknowledged_records"),
    (lambda f: f["caught_up"].update(ok=False), "stream_caught_up"),
    (lambda f: f["known"].update(missing=1), "known_events_exactly_once"),
    (lambda f: f["known"].update(duplicate_rows=2), "known_events_exactly_once"),
    (lambda f: f["known"].update(other_dead_letters=149), "known_events_exactly_once"),
    (lambda f: f["known"].update(behind_not_known=2), "known_events_exactly_once"),
    (lambda f: f["late_checks"].update(bad_count=1, bad=[{"batch": 7, "routed": 3, "dropped": [0]}]),
     "late_checks_ok"),
    (lambda f: f["late_checks"].update(lines=0), "late_checks_ok"),
    (lambda f: f["late_checks"].update(status_mismatches=[{"batch": 7}]), "late_checks_ok"),
    (lambda f: f.pop("late_checks"), "late_checks_ok"),
    (lambda f: f["known"].update(events_also_dead=1), "no_record_both_event_and_dead_letter"),
    (lambda f: f["known"].pop("events_also_dead"), "no_record_both_event_and_dead_letter"),
    (lambda f: f["proof"].update(ok=False, failures=["no_missing_records"]), "dq_proof_passed"),
    (lambda f: f["verify"].update(ok=False), "verify_passed"),
])
def test_each_broken_fact_fails_its_invariant(break_it, name: str) -> None:
    facts = copy.deepcopy(_good_facts())
    break_it(facts)
    failed = [i["name"] for i in judge(facts) if not i["ok"]]
    assert failed == [name], failed


@pytest.mark.parametrize("fmt,warn", [("kafka", True), ("rewind_kafka", False)])
def test_no_record_behind_the_watermark_warns_but_does_not_fail(fmt: str, warn: bool) -> None:
    facts = copy.deepcopy(_good_facts())
    facts["source"] = {"format": fmt}
    for f in facts["faults"]:
        if f["kind"] == "skewed_restart":
            f["skew"]["behind_watermark"] = 0
    invariants = judge(facts)
    assert all(i["ok"] for i in invariants)
    behind = next(i for i in invariants if i["name"] == "records_behind_watermark")
    assert bool(behind.get("warn")) is warn
    assert ("proved nothing" in behind["detail"]) is warn and ("alignment" in behind["detail"]) is not warn
    report = {"stream": "demo", "ok": True, "invariants": invariants, "schedule": facts["schedule"],
              "faults_by_kind": faults_by_kind(facts["faults"]), "seconds": {"total": 1.0}, "facts": facts}
    text = format_text(report)
    assert ("warn records_behind_watermark" in text and "\nnote: " in text) is warn


def test_compare_known_counts_an_event_whose_every_record_is_behind_the_watermark() -> None:
    knobs = ProducerKnobs(malformed_every=0, late_every=0, duplicate_every=0)
    expected = expected_records(6, knobs)  # chaos-000000000 .. chaos-000000005
    ids = {("t", 0, i): f"chaos-{i:09d}" for i in range(6)}
    ids[("t", 1, 0)] = "chaos-000000004"  # a duplicate send of 4, elsewhere
    ids[("t", 1, 1)] = "chaos-000000005"  # ... and of 5
    events = [(f"chaos-{i:09d}", ("t", 0, i)) for i in (0, 1, 2)]
    dead = [(("t", 0, 3), "behind_watermark"), (("t", 0, 4), "behind_watermark"), (("t", 1, 0), "behind_watermark"),
            (("t", 0, 5), "behind_watermark"), (("t", 2, 9), "malformed JSON: x")]
    k = compare_known(expected, ids, events, dead)
    # 3 and 4 (both its records) are accounted for as behind; 5's re-send at (t,1,1) is neither: missing
    assert k["behind_events"] == 2 and k["missing"] == 1 and k["missing_examples"] == ["chaos-000000005"]
    assert k["missing_partly_behind"] == 1 and k["behind_watermark"] == 4 and k["other_dead_letters"] == 1
    assert k["sink_events"] == 3 and k["unexpected"] == 0 and k["behind_not_known"] == 0
    assert k["events_also_dead"] == 0
    k = compare_known(expected, ids, events + [("chaos-000000005", ("t", 1, 1))],
                      dead + [(("t", 0, 0), "behind_watermark"), (("t", 7, 7), "behind_watermark")])
    assert k["missing"] == 0 and k["events_also_dead"] == 1 and k["events_also_dead_examples"] == [["t", 0, 0]]
    assert k["behind_not_known"] == 1 and k["behind_not_known_examples"] == [["t", 7, 7]]


def test_report_text_says_what_happened() -> None:
    facts = _good_facts()
    invariants = judge(facts)
    report = {"stream": "demo", "ok": True, "invariants": invariants, "schedule": facts["schedule"],
              "faults_by_kind": faults_by_kind(facts["faults"]), "recovery_durations": {
                  "detect_s": {"median": 1.2, "max": 2.0}, "relaunch_s": None, "progress_s": {"median": 20.0,
                                                                                                "max": 31.0}},
              "seconds": {"total": 300.0}, "facts": facts, "paths": {"report_json": "/x/report.json"}}
    text = format_text(report)
    assert text.startswith("rewind chaos demo: PASS (seed 3, 10,000 events")
    assert "SIGKILLs 3" in text and "during the commit" in text and "ok   dq_proof_passed" in text
    assert "--seed 3 --events 10000 --kills 2" in text and "--skewed-restarts 1" in text
    assert report["faults_by_kind"]["kill"] == {"count": 2, "landed": {"during a batch commit": 2}}
    assert report["faults_by_kind"]["skewed_restart"] == {"count": 1, "behind_watermark": 120}
    assert "stopped pid" in text and "120 records behind the watermark (at least 118 expected)" in text
    assert "270 dead letters (150 malformed/late, expected 150; 120 behind_watermark" in text
    assert "ok   late_checks_ok" in text and "ok   no_record_both_event_and_dead_letter" in text


def test_cli_plan_prints_the_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    from rewind.cli.main import main

    assert main(["chaos", "demo", "--plan", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed 7: 15 faults over 100,000 events") and "every fault makes sense" in out
    assert "skewed backlogs" in out
    assert main(["chaos", "demo", "--plan", "--events", "500"]) == 3  # refused: too few events


# --------------------------------------------------------------------------- the S3 fault proxy
@pytest.fixture
def echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return

            def echo(c: socket.socket = c) -> None:
                try:
                    while data := c.recv(65536):
                        c.sendall(data)
                except OSError:
                    pass
                finally:
                    c.close()
            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def _roundtrip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = c.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            got += chunk
        return got


def test_fault_proxy_forwards_then_cuts_mid_stream_then_recovers(echo_server: int) -> None:
    from rewind.chaos.fault_proxy import FaultProxy

    with FaultProxy("127.0.0.1", echo_server) as proxy:
        assert _roundtrip(proxy.port, b"hello" * 1000) == b"hello" * 1000
        proxy.arm(cut_after_bytes=10_000, outage_s=1.0)
        c = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        c.sendall(b"x" * 4000)
        assert len(c.recv(65536)) > 0  # below the threshold: forwarded
        with pytest.raises(OSError):
            for _ in range(50):  # crossing it resets the connection
                c.sendall(b"y" * 4000)
                if not c.recv(65536):
                    raise ConnectionResetError("closed by the cut")
        c.close()
        assert proxy.down and len(proxy.cuts) == 1 and proxy.cuts[0].after_bytes >= 10_000
        with pytest.raises(OSError):  # new connections fail during the outage
            _roundtrip(proxy.port, b"during")
        time.sleep(proxy.seconds_down_left() + 0.1)
        assert not proxy.down and _roundtrip(proxy.port, b"after") == b"after"


# --------------------------------------------------------------------------- the registry copy
def test_registry_copy_moves_every_location_and_keeps_the_settings(tmp_path, monkeypatch) -> None:
    from pathlib import Path

    from rewind.chaos.harness import ChaosOptions, ChaosRefused, ChaosRun
    from rewind.registry import load_registry

    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("REWIND_HOME", str(tmp_path / "real-home"))
    real = load_registry(root / "streams.yaml").get("demo")
    run = ChaosRun(ChaosOptions("demo", str(root / "streams.yaml"), report_dir=tmp_path / "chaos"))
    run.write_registry()
    copy_ = run.spec
    for loc in (copy_.checkpoint, copy_.status_dir, copy_.sink.url.removeprefix("sqlite:///")):
        assert loc.startswith(str(tmp_path / "chaos" / "home")), loc
    assert copy_.source.options["startingOffsets"] == "earliest"
    same = ("topics", "partitions", "transform", "trigger", "window", "watermark_delay", "allowed_lateness",
            "restart", "supervision", "dq_suite")
    assert {k: getattr(copy_, k) for k in same} == {k: getattr(real, k) for k in same}
    assert copy_.source.options["maxOffsetsPerTrigger"] == real.source.options["maxOffsetsPerTrigger"]
    assert not (tmp_path / "real-home").exists(), "the real stream's home was touched"

    other = tmp_path / "other.yaml"
    other.write_text((root / "streams.yaml").read_text().replace("dq_suite: exactly_once", "dq_suite: custom"))
    with pytest.raises(ChaosRefused, match="exactly_once"):
        ChaosRun(ChaosOptions("demo", str(other), report_dir=tmp_path / "c2")).write_registry()
    # left at the default suite, but not the demo's tables: the proof would be the contract one, not the harness's
    mine = tmp_path / "mine.yaml"
    mine.write_text((root / "streams.yaml").read_text().replace(
        "transform: rewind.demo.transform:DemoTransform", "transform: rewind.inventory.transform:InventoryTransform")
        .replace("    dq_suite: exactly_once\n", ""))
    with pytest.raises(ChaosRefused, match="'contract'"):
        ChaosRun(ChaosOptions("demo", str(mine), report_dir=tmp_path / "c3")).write_registry()
