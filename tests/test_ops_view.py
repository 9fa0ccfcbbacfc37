"""rewind.ops.view: what the operator page shows, derived from stored facts (pure, no services)."""

from __future__ import annotations

import json
from pathlib import Path

from rewind.control.status import StreamStatus, append_history, read_history, write_status
from rewind.ops.view import (
    Inputs,
    build_stream_view,
    chart_series,
    default_replay_range,
    derive_state,
    newest_proof,
    read_inputs,
    recovery_view,
    replay_views,
    savepoint_rows,
)
from rewind.paths import status_file, status_path
from rewind.registry import load_registry
from rewind.supervision.health import Thresholds
from tests.harness.registry_templates import demo_stream, write_registry

NOW = 1_800_000_000.0
NO_FAILURES = {"failures": [], "gave_up": None}


def status(**kw: object) -> StreamStatus:
    base = dict(stream="demo", state="running", pid=4242, heartbeat=NOW - 1, started_at=NOW - 600,
                last_batch_id=41, last_batch_at=NOW - 2, end_offsets={"t": {"0": 500, "1": 700}},
                lag={"t/1": 3, "t/0": 5}, total_lag=8, lag_at=NOW - 4)
    base.update(kw)
    return StreamStatus(**base)  # type: ignore[arg-type]


def failure(at: float, cause: str = "process_gone", batch: int | None = 40) -> dict:
    return {"at": at, "cause": cause, "batch_id": batch, "offsets": {}, "detail": "pid gone"}


def test_states() -> None:
    assert derive_state(status(), True, NO_FAILURES, NOW)[:2] == ("running", NOW - 600)
    assert derive_state(None, False, NO_FAILURES, NOW)[0] == "stopped"
    assert derive_state(status(state="stopped", heartbeat=NOW - 50), False, NO_FAILURES, NOW)[:2] == \
        ("stopped", NOW - 50)
    dead = derive_state(status(heartbeat=NOW - 30), False, NO_FAILURES, NOW)
    assert dead[0] == "failed" and "process_gone" in dead[2] and dead[1] == NOW - 30
    hung = derive_state(status(heartbeat=NOW - 500), True, NO_FAILURES, NOW, Thresholds(heartbeat_stale_s=60))
    assert hung[0] == "failed" and "heartbeat_stale" in hung[2]
    # the supervisor recorded the failure: recovering until a new driver commits a batch
    hist = {"failures": [failure(NOW - 20)], "gave_up": None}
    assert derive_state(status(heartbeat=NOW - 25), False, hist, NOW)[:2] == ("recovering", NOW - 20)
    relaunched = status(started_at=NOW - 10, last_batch_at=None, last_batch_id=None, state="running")
    assert derive_state(relaunched, True, hist, NOW)[0] == "recovering"
    assert derive_state(status(started_at=NOW - 10, last_batch_at=NOW - 3), True, hist, NOW)[0] == "running"
    gave_up = {"failures": [failure(NOW - 20)], "gave_up": {"at": NOW - 19, "reason": "crash loop on batch 40"}}
    st = derive_state(status(), False, gave_up, NOW)
    assert st[:2] == ("failed", NOW - 19) and "crash loop" in st[2]


def test_recovery_durations_from_failures_status_and_history() -> None:
    assert recovery_view(NO_FAILURES, status(), []) is None
    hist = {"failures": [failure(NOW - 100, batch=40)], "gave_up": None}
    st = status(started_at=NOW - 95, last_batch_at=NOW - 2, pid=7)
    samples = [{"t": NOW - 96, "batch": 40, "rows": 900, "lag": 1, "pid": 6},
               {"t": NOW - 70, "batch": 41, "rows": 100, "lag": 0, "pid": 7}]
    rec = recovery_view(hist, st, samples)
    assert rec["cause"] == "process_gone" and rec["relaunched_after_s"] == 5.0
    assert rec["first_batch_after_s"] == 30.0 and rec["recovered"]
    # not relaunched yet
    rec = recovery_view(hist, status(started_at=NOW - 900), [])
    assert rec["relaunched_after_s"] is None and not rec["recovered"]


def test_chart_series_rates_and_restarts() -> None:
    samples = [{"t": NOW - 4000, "rows": 0, "lag": 9, "pid": 1},  # outside the hour
               {"t": NOW - 100, "rows": 1000, "lag": 50, "pid": 1},
               {"t": NOW - 90, "rows": 3000, "lag": 20, "pid": 1},
               {"t": NOW - 85, "rows": 3000, "lag": 20, "pid": 1},   # probe sample, no growth yet
               {"t": NOW - 80, "rows": 4000, "lag": 5, "pid": 1},
               {"t": NOW - 70, "rows": 10, "lag": 7, "pid": 2},     # new driver: starts over
               {"t": NOW - 60, "rows": 210, "lag": 0, "pid": 2},
               {"t": NOW - 10, "rows": 210, "lag": 0, "pid": 2}]    # idle 50 s: a zero point
    c = chart_series(samples, NOW)
    assert c["throughput"] == [[NOW - 90, 200.0], [NOW - 80, 100.0], [NOW - 60, 20.0], [NOW - 10, 0.0]]
    assert [v for _, v in c["lag"]] == [50, 20, 20, 5, 7, 0, 0]
    assert chart_series([], NOW) == {"window_s": 3600.0, "from": NOW - 3600, "to": NOW, "throughput": [], "lag": []}


def test_replay_defaults_are_a_recent_committed_range() -> None:
    r = default_replay_range({"t": {"1": 700, "0": 500, "2": 10}})
    assert json.loads(r["from"]) == {"t": {"0": 0, "1": 0, "2": 0}}
    assert json.loads(r["to"]) == {"t": {"0": 500, "1": 700, "2": 10}}
    assert json.loads(default_replay_range({"t": {"0": 5000}}, span=1000)["from"]) == {"t": {"0": 4000}}
    assert default_replay_range({}) == {"from": "earliest", "to": "latest"}


def test_savepoints_newest_first_and_replays() -> None:
    rows = savepoint_rows([{"savepoint_id": "a", "created_at": "2026-11-22T01:00:00+00:00", "batch_id": 3,
                            "total_bytes": 10, "file_count": 2, "mode": "online", "offsets": {"t": {"0": 1}}},
                           {"savepoint_id": "b", "created_at": "2026-11-23T01:00:00+00:00", "batch_id": 9,
                            "total_bytes": 20, "file_count": 2, "mode": "stop", "offsets": {}}])
    assert [r["savepoint_id"] for r in rows] == ["b", "a"] and rows[1]["bytes"] == 10
    runs = [{"dag_id": "rewind_replay", "dag_run_id": "r1", "state": "running", "conf": {"stream": "demo",
             "from": "1", "to": "9", "dry_run": False}},
            {"dag_id": "rewind_replay", "dag_run_id": "r2", "state": "success", "conf": {"stream": "demo"}},
            {"dag_id": "rewind_replay", "dag_run_id": "r3", "state": "queued", "conf": {"stream": "other"}}]
    views = replay_views("demo", {"replay_id": "fix-1", "mode": "shadow", "pid": 5}, runs,
                         [{"replay_id": "old", "status": "ok"}])
    assert [(v["source"], v.get("replay_id") or v.get("dag_run_id")) for v in views] == \
        [("lock", "fix-1"), ("dag_run", "r1")]


def test_build_view_end_to_end_from_inputs() -> None:
    inp = Inputs(stream="demo", topics=["t"], status=status(), process_alive=True,
                 proof={"run_id": "r9", "ok": False, "expectations": 23, "failures": [{"name": "no_gaps"}],
                        "counts": {"missing": 2, "kafka_records": 100}, "s3": {"data_docs": "s3://b/dq/x"}},
                 proof_at=NOW - 60,
                 dag_runs=[{"dag_id": "rewind_demo_savepoint", "dag_run_id": "m1", "state": "queued",
                            "run_after": "2026-11-23T12:00:00Z"}])
    v = build_stream_view(inp, NOW).to_json()
    assert v["state"] == "running" and v["last_batch"]["batch_id"] == 41 and v["last_batch"]["age_s"] == 2.0
    assert list(v["lag"]["partitions"]) == ["t/0", "t/1"] and v["lag"]["total"] == 8
    assert v["dq"]["ok"] is False and v["dq"]["failed"] == ["no_gaps"] and v["dq"]["counts"]["missing"] == 2
    assert v["dags"]["savepoint"]["last_run"]["dag_run_id"] == "m1"
    assert set(v["dags"]) == {"supervisor", "savepoint", "dq", "replay", "upgrade"}
    assert v["replay_defaults"]["stream"] == "demo" and v["replay_defaults"]["dry_run"] is True
    assert v["problems"] == []


YARN = {"manager": "yarn", "app_id": "application_1700000000000_0007", "resourcemanager": "http://rm:8088",
        "tracking_url": "http://rm:8088/proxy/application_1700000000000_0007/"}


def test_the_yarn_application_is_shown_while_it_runs_and_after_it_ended() -> None:
    def view(alive: bool, **kw: object) -> dict:
        st = status(spark_ui="http://node7:4041", **kw)
        return build_stream_view(Inputs(stream="demo", topics=["t"], status=st, process_alive=alive), NOW).to_json()

    running = view(True, cluster=YARN)
    assert (running["yarn_app_id"], running["yarn_tracking_url"]) == (YARN["app_id"], YARN["tracking_url"])
    assert running["spark_ui"] == "http://node7:4041"
    ended = view(False, cluster=YARN, heartbeat=NOW - 300)  # YARN ended it: which application it was stays shown
    assert ended["spark_ui"] is None and ended["yarn_app_id"] == YARN["app_id"]
    assert ended["yarn_tracking_url"] == YARN["tracking_url"]
    no_rm = view(True, cluster={**YARN, "resourcemanager": "", "tracking_url": ""})  # no HADOOP_CONF_DIR address
    assert (no_rm["yarn_app_id"], no_rm["yarn_tracking_url"]) == (YARN["app_id"], None)
    odd = view(True, cluster={**YARN, "tracking_url": "javascript:alert(1)"})
    assert odd["yarn_tracking_url"] is None
    for local in (view(True), view(True, cluster={"manager": "standalone", "app_id": "app-1"})):
        assert local["yarn_app_id"] is None and local["yarn_tracking_url"] is None
    assert build_stream_view(Inputs(stream="demo", topics=["t"]), NOW).yarn_app_id is None  # never ran


def test_supervisor_status_shows_the_yarn_application_and_the_resourcemanagers_word() -> None:
    from rewind.cli.supervisor import format_view, observation_view
    from rewind.supervision.cluster_app import AppVerdict
    from rewind.supervision.health import evaluate
    from rewind.supervision.observe import Observation

    said = AppVerdict(True, False, False, f"YARN application {YARN['app_id']} RUNNING, heartbeat 1s ago")
    obs = Observation("demo", NOW, status(cluster=YARN), True, cluster=said)
    v = observation_view(obs, evaluate(obs, Thresholds()))
    assert v["stream"] == "demo" and v["healthy"] and v["last_batch_id"] == 41
    assert (v["yarn_app_id"], v["yarn_tracking_url"]) == (YARN["app_id"], YARN["tracking_url"])
    assert v["yarn_verdict"]["detail"] == said.detail and not v["yarn_verdict"]["ended"]
    assert json.loads(json.dumps(v, default=str))["yarn_app_id"] == YARN["app_id"]  # --json
    text = format_view(v)
    assert f"YARN {YARN['app_id']}, tracking UI {YARN['tracking_url']}" in text
    assert f"ResourceManager: {said.detail}" in text
    local = Observation("demo", NOW, status(), True)
    plain = observation_view(local, evaluate(local, Thresholds()))
    assert plain["yarn_app_id"] is None and plain["yarn_verdict"] is None and "YARN" not in format_view(plain)


def test_history_file_is_additive_and_bounded(tmp_path: Path) -> None:
    sfile = status_path(tmp_path, "demo")
    st = status()
    write_status(sfile, st)
    for i in range(50):
        st.input_rows = i * 10
        append_history(sfile, st, now=NOW - 5000 + i * 100, max_bytes=2000)
    samples = read_history(sfile)
    assert samples and all(s["t"] >= samples[-1]["t"] - 3600 - 2000 for s in samples)
    assert (tmp_path / "demo.history.jsonl").stat().st_size < 4000
    assert read_history(sfile, since=NOW - 200)[-1]["rows"] == 490
    assert json.loads(sfile.read_text())["stream"] == "demo"  # the status file is untouched
    fresh = status_path(tmp_path / "not-yet", "demo")  # a directory that does not exist yet
    append_history(fresh, st, now=NOW)
    assert read_history(fresh)[0]["rows"] == 490 and not fresh.exists()


def test_read_inputs_from_files(tmp_path: Path) -> None:
    reg = write_registry(tmp_path / "streams.yaml", demo_stream("demo", "t", tmp_path))
    spec = load_registry(reg).get("demo")
    sfile = status_file(spec)
    write_status(sfile, status(pid=999_999_999))
    run = Path(spec.status_dir).parent / "dq" / "demo" / "20261123T1-aa"
    run.mkdir(parents=True)
    (run / "proof.json").write_text(json.dumps({"run_id": "20261123T1-aa", "ok": True}))
    inp = read_inputs(spec, store=None, now=NOW)
    assert inp.status and inp.status.last_batch_id == 41 and not inp.process_alive
    assert inp.proof and inp.proof["ok"] and newest_proof(spec)[2] == run
    assert inp.savepoints_error == "no S3 configured" and inp.replay_holder is None
    v = build_stream_view(inp, NOW)
    assert v.state == "failed" and v.dq and v.dq["run_id"] == "20261123T1-aa"
    from rewind.upgrade.history import save_record

    save_record(spec, {"id": "u1", "kind": "upgrade", "mode": "savepoint", "result": "rolled_back", "reason": "crash",
                       "from": {"transform": "a:A", "hash": "h1"}, "to": {"transform": "b:B", "hash": "h2"},
                       "savepoint": {"id": "sp1"}, "started_at": NOW - 60, "finished_at": NOW})
    shown = build_stream_view(read_inputs(spec, store=None, now=NOW), NOW).upgrades
    assert [(u["change"], u["savepoint"], u["result"]) for u in shown] == [("A h1 -> B h2", "sp1", "rolled_back")]
