"""The chaos harness's pure parts: the seeded schedule, its timeline rules, the known set of
events, the invariants and the report; plus the S3 fault proxy on local sockets. No services."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections import Counter

import pytest

from rewind.chaos_report import ProducerKnobs, expected_records, faults_by_kind, format_text, judge, landing
from rewind.chaos_schedule import (DAMAGES, FAULT_KINDS, KILL_MOMENTS, MIN_SEGMENT_EVENTS, Action, ChaosConfig,
                                   Fault, Schedule, ScheduleError, check_actions, check_timeline, make_schedule)

CI = ChaosConfig(seed=7, events=100_000, kills=10, broker_restarts=1, corruptions=1, replays=1, s3_outages=1)


# --------------------------------------------------------------------------- the schedule
def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    a, b = make_schedule(CI), make_schedule(ChaosConfig(**{**CI.__dict__}))
    assert a.to_json() == b.to_json()
    others = {str(make_schedule(ChaosConfig(**{**CI.__dict__, "seed": s})).to_json()["faults"]) for s in range(8, 16)}
    assert str(a.to_json()["faults"]) not in others and len(others) == 8


@pytest.mark.parametrize("config", [
    CI,
    ChaosConfig(seed=1, events=1_000_000, kills=30, broker_restarts=3, corruptions=4, replays=3, s3_outages=3),
    ChaosConfig(seed=2, events=5_000, kills=2, broker_restarts=0, corruptions=0, replays=0, s3_outages=0),
    ChaosConfig(seed=3, events=2_000, kills=0, broker_restarts=0, corruptions=0, replays=0, s3_outages=0),
    ChaosConfig(seed=4, events=20_000, kills=0, broker_restarts=2, corruptions=3, replays=2, s3_outages=2),
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
                             corruptions=seed % 5, replays=seed % 2, s3_outages=seed % 3)
        assert check_timeline(make_schedule(config)) == [], seed


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
              "replay": {"start_fraction": 0.1, "end_fraction": 0.3}}
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
    from rewind.chaos_report import landing_kind

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
        faults.append(r)
    return {"schedule": sched.to_json(), "schedule_problems": [], "faults": faults,
            "supervisor": {"gave_up": None, "errors": [], "recoveries": [rec] * 3},
            "producer": {"acknowledged": 10_200, "errors": []}, "expected": {"sends": 10_200},
            "kafka": {"records": 10_200, "acknowledged_missing": 0}, "caught_up": {"ok": True, "detail": "at end"},
            "known": {"expected_events": 9800, "sink_events": 9800, "missing": 0, "unexpected": 0,
                      "duplicate_rows": 0, "expected_dead_letters": 150, "sink_dead_letters": 150},
            "proof": {"ok": True, "expectations": 23, "failures": []},
            "verify": {"ok": True, "kafka_records": 10_200, "sink_events": 9800, "windows_checked": 40}}


def test_judge_passes_good_facts() -> None:
    invariants = judge(_good_facts())
    assert all(i["ok"] for i in invariants), [i for i in invariants if not i["ok"]]
    assert len(invariants) == 14


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
    (lambda f: f["known"].update(sink_dead_letters=149), "known_events_exactly_once"),
    (lambda f: f["proof"].update(ok=False, failures=["no_missing_records"]), "dq_proof_passed"),
    (lambda f: f["verify"].update(ok=False), "verify_passed"),
])
def test_each_broken_fact_fails_its_invariant(break_it, name: str) -> None:
    facts = copy.deepcopy(_good_facts())
    break_it(facts)
    failed = [i["name"] for i in judge(facts) if not i["ok"]]
    assert failed == [name], failed


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
    assert "--seed 3 --events 10000 --kills 2" in text
    assert report["faults_by_kind"]["kill"] == {"count": 2, "landed": {"during a batch commit": 2}}


def test_cli_plan_prints_the_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    from rewind.cli import main

    assert main(["chaos", "demo", "--plan", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed 7: 14 faults over 100,000 events") and "every fault makes sense" in out
    assert main(["chaos", "demo", "--plan", "--events", "500"]) == 1


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
    from rewind.fault_proxy import FaultProxy

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

    from rewind.chaos import ChaosOptions, ChaosRefused, ChaosRun
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
