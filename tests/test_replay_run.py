"""`rewind replay run`: the bounded replay job, its windows, shadow mode, its lock and its report.

- Pure: chunks tile the range, shadow table names, replay ids, batch source options; the sink's
  new read/insert-count helpers (SQLite and PostgreSQL).
- Refusals before any Spark job: bad mode, bad replay id, an empty plan, a replay already
  running (a real lock held by another process), in the library and on the command line.
- Real services and the shared Spark session: the demo stream runs to the end (available_now);
  then lost-data recovery (delete a range's rows, replay, every record is back exactly once and
  the windows equal a recomputation), idempotence (a complete range changes no row), shadow
  mode (main tables unchanged byte for byte, the shadow holds the range, the comparison finds
  what a damaged main lacks), and overlap safety with a live stream and producer (slow).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rewind.driver.source import bounded_options
from rewind.kafka.types import TP
from rewind.proof.verify import recompute_windows, verify_stream
from rewind.registry import load_registry
from rewind.replay.guard import ReplayBusy, acquire_lock, check_replay_id, current_holder, shadow_prefix
from rewind.replay.plan import PartitionPlan, ReplayPlan
from rewind.replay.planner import plan_replay
from rewind.replay.problems import ReplayRefused
from rewind.replay.report import ReplayReport
from rewind.replay.request import ReplayRequest
from rewind.replay.run import run_replay
from rewind.replay.setup import plan_chunks, prepare_replay
from spark_jobs import REPLAY_JOB
from tests.harness.registry_templates import demo_stream, write_registry

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("events", "dead_letter", "window_results")
WINDOW_KEYS = {"window": "1 second", "watermark_delay": "1 second", "allowed_lateness": "500 ms"}


# --------------------------------------------------------------------------- helpers
def plan_of(spec: Any, registry: Any, bootstrap: str, start: str, end: str, partitions: str | None = None
            ) -> ReplayPlan:
    request = ReplayRequest.parse(spec.name, start, end, partitions=partitions, registry=registry)
    return plan_replay(request, registry, bootstrap)


def part_of_each(spec: Any, registry: Any, bootstrap: str, lo: float, hi: float,
                 partitions: tuple[int, ...] | None = None) -> ReplayPlan:
    """A plan over the same fraction ``[lo, hi)`` of each partition (partitions differ in length)."""
    whole = plan_of(spec, registry, bootstrap, "earliest", "latest")
    parts = [p for p in whole.partitions if partitions is None or p.partition in partitions]
    start = {p.topic: {} for p in parts}
    end = {p.topic: {} for p in parts}
    for p in parts:
        start[p.topic][str(p.partition)] = int(p.end * lo)
        end[p.topic][str(p.partition)] = int(p.end * hi)
    return plan_of(spec, registry, bootstrap, json.dumps(start), json.dumps(end))


def db_path(spec: Any) -> Path:
    return Path(spec.sink.url.removeprefix("sqlite:///"))


def snapshot(spec: Any, prefix: str | None = None) -> dict[str, list[tuple]]:
    """Every row of the tables, as stored (raw SQLite values), in a fixed order."""
    prefix = spec.sink.table_prefix if prefix is None else prefix
    db = sqlite3.connect(db_path(spec))
    try:
        return {t: db.execute(f"SELECT * FROM {prefix}{t} ORDER BY 1, 2, 3").fetchall() for t in TABLES}
    finally:
        db.close()


def in_range_sql(ranges: dict[TP, tuple[int, int]], alias: str = "") -> str:
    a = f"{alias}." if alias else ""
    return " OR ".join(f"({a}topic = '{tp.topic}' AND {a}partition = {tp.partition} AND {a}\"offset\" >= {s} "
                       f"AND {a}\"offset\" < {e})" for tp, (s, e) in ranges.items())


def delete_range(spec: Any, ranges: dict[TP, tuple[int, int]]) -> dict[str, int]:
    """Lose the sink rows of a range: its events, its dead letters, the window rows its events are in."""
    p = spec.sink.table_prefix
    db = sqlite3.connect(db_path(spec))
    try:
        cond = in_range_sql(ranges)
        windows = db.execute(
            f"DELETE FROM {p}window_results AS w WHERE EXISTS (SELECT 1 FROM {p}events AS e WHERE e.key = w.key "
            f"AND e.event_time >= w.window_start AND e.event_time < w.window_end AND ({in_range_sql(ranges, 'e')}))"
        ).rowcount
        events = db.execute(f"DELETE FROM {p}events WHERE {cond}").rowcount
        dead = db.execute(f"DELETE FROM {p}dead_letter WHERE {cond}").rowcount
        db.commit()
        return {"events": events, "dead_letter": dead, "window_results": windows}
    finally:
        db.close()


def middle_ranges(plan_json: dict[str, Any]) -> dict[TP, tuple[int, int]]:
    return {TP(p["topic"], p["partition"]): (p["start"], p["end"]) for p in plan_json["partitions"]}


class NoSpark:
    """Stands in for a SparkSession: any use fails the test (refusals must come first)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark was used ({name}) before the input was refused")


def tiny_plan(stream: str, start: int = 0, end: int = 10, records: int = 10) -> ReplayPlan:
    return ReplayPlan(stream, str(start), str(end),
                      [PartitionPlan("t", 0, start, end, records, 0, 100, exact=True)])


# --------------------------------------------------------------------------- pure
def test_chunks_tile_the_range_exactly() -> None:
    ranges = {TP("a", 0): (100, 1100), TP("a", 1): (0, 7), TP("b", 0): (5, 5)}
    chunks = plan_chunks(ranges, 300)
    assert len(chunks) == 4  # 1007 offsets in chunks of at most ~300
    for tp, (s, e) in ranges.items():
        pieces = [c[tp] for c in chunks]
        assert pieces[0][0] == s and pieces[-1][1] == e
        assert all(a[1] == b[0] and a[0] <= a[1] for a, b in zip(pieces, pieces[1:]))  # contiguous, no overlap
    assert max(sum(e - s for s, e in c.values()) for c in chunks) <= 300 + len(ranges)
    assert plan_chunks(ranges, 10_000) == [ranges]
    with pytest.raises(ValueError):
        plan_chunks(ranges, 0)


def test_replay_ids_and_shadow_prefixes() -> None:
    assert check_replay_id("fix-2026_11") == "fix-2026_11"
    for bad in ("../etc", "a/b", "UPPER", "", "-lead", "x" * 64, "a b", "a;drop"):
        with pytest.raises(ReplayRefused, match="not allowed"):
            check_replay_id(bad)
    assert shadow_prefix("demo_", "r1") == "demo_shadow_r1_"
    dashed, underscored = shadow_prefix("demo_", "a-b"), shadow_prefix("demo_", "a_b")
    assert dashed != underscored and "-" not in dashed  # SQL-safe, and ids that map alike stay apart
    long = shadow_prefix("p" * 31, "r" * 63)
    assert len(long) + len("rewind_batches") <= 63 and long.startswith("p" * 31 + "shadow_")


def test_batch_options_drop_the_streams_position_and_pace(tmp_path: Path) -> None:
    reg = load_registry(write_registry(tmp_path / "s.yaml", demo_stream("bo", ["t1", "t2"], tmp_path)))
    opts = bounded_options(reg.get("bo"), "k:9092", ["t2"])
    assert opts["subscribe"] == "t2" and opts["kafka.bootstrap.servers"] == "k:9092"
    assert not {k.lower() for k in opts} & {"startingoffsets", "maxoffsetspertrigger"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sink_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    from tests.harness.pg_databases import create_database

    server = request.getfixturevalue("postgres_url")
    name = f"rr_{uuid.uuid4().hex[:8]}"
    return create_database(server, name)


def test_sink_counts_new_rows_and_reads_by_condition(sink_url: str) -> None:
    from rewind.demo.tables import TABLES as DEMO
    from rewind.sink.sql import ExactlyOnceSqlSink

    sink = ExactlyOnceSqlSink(sink_url, "rr", DEMO, table_prefix="rr_")
    t = pd.Timestamp("2026-11-22T03:00:00Z")
    ev = pd.DataFrame({"event_id": [f"e{i}" for i in range(6)], "key": ["a", "b"] * 3, "amount": [1.0] * 6,
                       "event_time": [t + pd.Timedelta(seconds=i) for i in range(6)], "topic": "t", "partition": 0,
                       "offset": range(6), "kafka_timestamp": t, "batch_id": None})
    inserted: dict[str, int] = {}
    sink.write_rows({"events": ev.iloc[:4]}, inserted=inserted)
    assert inserted == {"events": 4}
    sink.write_rows({"events": ev, "window_results": pd.DataFrame(
        {"window_start": [t], "window_end": [t + pd.Timedelta(seconds=1)], "key": ["a"], "event_count": [1],
         "amount_sum": [1.0], "batch_id": [None]})}, inserted=inserted)
    assert inserted == {"events": 2}  # replace tables are not counted: they always write
    since = (t + pd.Timedelta(seconds=2)).to_pydatetime()
    rows = sink.read_rows("events", lambda tb: (tb.c.key == "a") & (tb.c.event_time >= since),
                          columns=["event_id", "event_time"])
    assert rows["event_id"].tolist() == ["e2", "e4"] and str(rows["event_time"].dtype) == "datetime64[ns, UTC]"
    assert sink.column_max("events", "event_time") == t + pd.Timedelta(seconds=5)
    sink.dispose()


# --------------------------------------------------------------------------- refusals (no Spark)
def test_bad_input_is_refused_before_spark(tmp_path: Path) -> None:
    reg = load_registry(write_registry(tmp_path / "s.yaml", demo_stream("bad", "t", tmp_path)))
    spec = reg.get("bad")
    plan = tiny_plan("bad")
    cases = [({"mode": "sideways"}, "bad_mode", "into-sink"), ({"replay_id": "../../etc"}, "bad_replay_id", "a-z"),
             ({"replay_id": "Fix"}, "bad_replay_id", "a-z")]
    for kwargs, kind, says in cases:
        with pytest.raises(ReplayRefused) as exc:
            run_replay(spec, plan, "127.0.0.1:1", spark=NoSpark(), run_dir=tmp_path / "r", **kwargs)
        assert [p.kind for p in exc.value.problems] == [kind] and says in str(exc.value)
    with pytest.raises(ReplayRefused, match="nothing to replay") as exc:
        run_replay(spec, tiny_plan("bad", 5, 5, 0), "127.0.0.1:1", spark=NoSpark(), run_dir=tmp_path / "r")
    with pytest.raises(ReplayRefused, match="not 'bad'"):
        run_replay(spec, tiny_plan("other"), "127.0.0.1:1", spark=NoSpark(), run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists() and not (tmp_path / "status" / "bad.replay.lock").exists()


def test_cli_refuses_bad_mode_and_id_without_kafka(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rewind.cli.main import main

    reg = write_registry(tmp_path / "s.yaml", demo_stream("bad", "t", tmp_path))
    base = ["replay", "run", "bad", "--from", "0", "--to", "10", "--registry", str(reg), "--bootstrap", "127.0.0.1:1"]
    assert main([*base, "--mode", "sideways"]) == 3
    assert "mode 'sideways' is unknown" in capsys.readouterr().err
    assert main([*base, "--replay-id", "a/../b", "--json"]) == 3
    out = capsys.readouterr()
    assert "is not allowed" in out.err and json.loads(out.out)["problems"][0]["kind"] == "bad_replay_id"


def test_second_replay_of_a_stream_is_refused_naming_the_running_one(tmp_path: Path) -> None:
    reg_path = write_registry(tmp_path / "s.yaml", demo_stream("lk", "t", tmp_path))
    spec = load_registry(reg_path).get("lk")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from rewind.replay.guard import acquire_lock; "
                               f"lock = acquire_lock({spec.status_dir!r}, 'lk', 'first-one', "
                               "{'t': {'0': [0, 10]}}, 'into-sink'); print('held', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ReplayBusy) as exc:
            run_replay(spec, tiny_plan("lk"), "127.0.0.1:1", spark=NoSpark(), run_dir=tmp_path / "r")
        text = str(exc.value)
        assert "'first-one'" in text and f"pid {holder.pid}" in text and "running since 20" in text
        assert "wait for it to finish" in text and exc.value.holder["replay_id"] == "first-one"
        assert not (tmp_path / "r").exists()
        # the dry run says so too, and the CLI refuses with exit 3
        setup = prepare_replay(spec, tiny_plan("lk"), replay_id="second")
        from rewind.replay.run import describe_replay

        assert "'first-one' of this stream is running now" in describe_replay(setup)
    finally:
        holder.kill()
        holder.wait(10)
    # the holder died on this host: its lease is taken at once, nothing stale is left to clean up
    with acquire_lock(spec.status_dir, "lk", "third", None, "shadow"):
        assert (current_holder(spec.status_dir, "lk") or {})["replay_id"] == "third"
        with pytest.raises(ReplayBusy, match="'third'"):
            acquire_lock(spec.status_dir, "lk", "fourth")
    assert current_holder(spec.status_dir, "lk") is None  # released


def test_cli_run_is_refused_while_another_replay_runs(done_stream: dict[str, Any], platform: Any, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from rewind.cli.main import main
    from rewind.control.location import control_store

    spec = done_stream["spec"]
    argv = ["replay", "run", "rr", "--from", "0", "--to", "50", "--registry", str(done_stream["reg_path"]),
            "--bootstrap", platform.kafka_bootstrap, "--no-s3", "--run-dir", str(tmp_path / "r")]
    with acquire_lock(control_store(spec), "rr", "on-call-1", None, "into-sink"):  # where the CLI looks
        assert main(argv) == 3
        err = capsys.readouterr().err
        assert "refused" in err and "'on-call-1'" in err and f"pid {os.getpid()}" in err
        assert main([*argv, "--dry-run"]) == 0  # a dry run takes no lock, and says who holds it
        out = capsys.readouterr().out
        assert "'on-call-1' of this stream is running now" in out and "dry run: nothing was written" in out
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- real services
@pytest.fixture(scope="module")
def done_stream(tmp_path_factory: pytest.TempPathFactory, platform: Any, spark: Any) -> dict[str, Any]:
    """The demo stream over 3,000 events (malformed, late, duplicates) in 3 partitions, run to the end.

    1 s windows with a 1 s watermark delay over ~3 s of event time, 1,000 offsets per batch: the
    later batches close the first windows, the last ones stay open (pending) in the checkpoint.
    """
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import build_query

    work = tmp_path_factory.mktemp("replay")
    topic = f"rr-{uuid.uuid4().hex[:8]}"
    sent = produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=3000, rate=1000, partitions=3,
                                                         id_prefix="rr", malformed_every=50, late_every=70,
                                                         duplicate_every=40))
    reg_path = write_registry(work / "s.yaml", demo_stream("rr", topic, work, **WINDOW_KEYS))
    registry = load_registry(reg_path)
    spec = registry.get("rr")
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
    assert query.awaitTermination(240), "the available_now run did not finish"
    report = verify_stream(spec, platform.kafka_bootstrap)
    assert report.ok, report
    return {"work": work, "registry": registry, "reg_path": reg_path, "spec": spec, "topic": topic, "sent": sent}


def s3_store(platform: Any) -> Any:
    from rewind.storage import S3Config, S3Storage

    return S3Storage(S3Config.from_platform(platform))


def test_replaying_a_complete_range_changes_no_row(done_stream: dict[str, Any], platform: Any, spark: Any,
                                                   tmp_path: Path) -> None:
    spec, reg = done_stream["spec"], done_stream["registry"]
    plan = plan_of(spec, reg, platform.kafka_bootstrap, "earliest", "latest")
    before = snapshot(spec)
    store = s3_store(platform)
    t0 = time.perf_counter()
    report = run_replay(spec, plan, platform.kafka_bootstrap, spark=spark, run_dir=tmp_path / "idem", s3=store,
                        replay_id="idem-1", chunk_offsets=1200, progress=False)
    print(f"idempotent replay of {plan.total_records} records in {time.perf_counter() - t0:.1f}s: "
          f"{report.seconds}")
    assert snapshot(spec) == before, "a replay of data already there changed rows"
    c = report.counts
    assert report.ok and report.proof and report.proof["ok"]
    assert c["records_read"] == plan.total_records == done_stream["sent"].sent and len(report.chunks) == 3
    assert c["written"] == {"events": 0, "dead_letter": 0, "window_results": 0}
    assert c["already_present"] == {"events": c["events_out"], "dead_letter": c["dead_letters_out"]}
    assert c["duplicates_collapsed"] > 0 and c["dead_letters_out"] > 0
    w = report.windows
    assert w["recomputed"] == w["unchanged"] > 0 and w["written"] == 0 and w["left_open"] > 0
    assert "watermark of the stream's committed batch" in w["horizon_source"]
    saved = json.loads((tmp_path / "idem" / "report.json").read_text())
    assert saved["status"] == "ok" and ReplayReport.from_json(saved).counts == report.to_json()["counts"]
    assert json.loads(store.read_bytes("replays/rr/idem-1/report.json"))["replay_id"] == "idem-1"
    assert report.proof["s3"]["data_docs"].endswith("dq/rr/replay-idem-1/data_docs/index.html")


def test_lost_data_is_restored_exactly_once_and_windows_recomputed(done_stream: dict[str, Any], platform: Any,
                                                                    spark: Any, tmp_path: Path) -> None:
    from rewind.replay.report import format_report

    spec, reg, bootstrap = done_stream["spec"], done_stream["registry"], platform.kafka_bootstrap
    plan = part_of_each(spec, reg, bootstrap, 0.2, 0.6)  # the middle of every partition
    ranges = middle_ranges(plan.to_json())
    lost = delete_range(spec, ranges)
    assert lost["events"] > 100 and lost["dead_letter"] > 0 and lost["window_results"] > 0, lost
    damaged = verify_stream(spec, bootstrap)
    assert not damaged.ok and damaged.missing_events
    untouched = {t: [r for r in rows] for t, rows in snapshot(spec).items()}

    # shadow first: main stays as it is, the comparison shows what an into-sink replay would restore
    shadow = run_replay(spec, plan, bootstrap, mode="shadow", spark=spark, run_dir=tmp_path / "sh",
                        replay_id="look-1", progress=False)
    assert snapshot(spec) == untouched
    cmp = shadow.comparison or {}
    assert cmp["events"]["only_in_shadow"] == lost["events"] and cmp["dead_letter"]["only_in_shadow"] == lost[
        "dead_letter"]
    assert cmp["events"]["only_in_main"] == 0 and cmp["events"]["differing"] == 0 and not cmp["identical"]
    assert cmp["windows"]["only_in_shadow"] >= lost["window_results"]
    assert shadow.proof and shadow.proof["ok"], shadow.proof and shadow.proof["text"]

    report = run_replay(spec, plan, bootstrap, spark=spark, run_dir=tmp_path / "fix", replay_id="fix-1",
                        progress=False)
    print(format_report(report))
    c = report.counts
    assert c["written"]["events"] == lost["events"] and c["written"]["dead_letter"] == lost["dead_letter"]
    assert c["already_present"]["events"] == c["events_out"] - lost["events"]
    assert report.windows["written"] == lost["window_results"], report.windows
    assert report.proof and report.proof["ok"] and report.proof["counts"]["missing"] == 0
    after = verify_stream(spec, bootstrap)
    assert after.ok, after  # every record exactly once; every window equals the recomputation
    # window results equal a recomputation from the raw events, not a sum of partial counts
    from rewind.driver.runner import open_sink

    sink = open_sink(spec)
    try:
        events, windows = sink.read_table("events"), sink.read_table("window_results")
    finally:
        sink.dispose()
    expected = recompute_windows(events, spec.durations()["window"]).set_index(["window_start", "key"])
    for row in windows.itertuples():
        want = expected.loc[(pd.Timestamp(row.window_start), row.key)]
        assert int(want["event_count"]) == row.event_count and abs(want["amount_sum"] - row.amount_sum) < 1e-6
    # replay-written windows carry no stream batch id
    assert windows["batch_id"].isna().sum() == lost["window_results"]


def test_shadow_mode_leaves_main_tables_unchanged(done_stream: dict[str, Any], platform: Any, spark: Any,
                                                  tmp_path: Path) -> None:
    spec, reg = done_stream["spec"], done_stream["registry"]
    plan = part_of_each(spec, reg, platform.kafka_bootstrap, 0.0, 0.5, partitions=(0, 2))
    before = snapshot(spec)
    report = run_replay(spec, plan, platform.kafka_bootstrap, mode="shadow", spark=spark, run_dir=tmp_path / "s",
                        replay_id="cmp-2", progress=False)
    assert snapshot(spec) == before
    prefix = shadow_prefix(spec.sink.table_prefix, "cmp-2")
    assert report.sink["tables"]["events"] == f"{prefix}events"
    shadow = snapshot(spec, prefix)
    coords = {(t, p, o) for t, p, o in [(r[4], r[5], r[6]) for r in shadow["events"]] + [r[:3] for r in
                                                                                           shadow["dead_letter"]]}
    ranges = middle_ranges(plan.to_json())
    assert coords and all(ranges[TP(t, p)][0] <= o < ranges[TP(t, p)][1] for t, p, o in coords)
    assert {p for _, p, _ in coords} == {0, 2}
    assert len(shadow["events"]) == report.counts["events_out"] and report.comparison
    assert report.comparison["identical"], report.comparison
    assert report.proof and report.proof["ok"]


@pytest.mark.slow
def test_spark_submit_entry_with_a_plan_file(done_stream: dict[str, Any], platform: Any, tmp_path: Path) -> None:
    """spark_jobs/replay.py in its own process (its own Spark), from `rewind replay plan --json`."""
    env = {**os.environ, **platform.env(), "PYTHONPATH": str(ROOT), "REWIND_HOME": str(tmp_path / "home")}
    base = ["--registry", str(done_stream["reg_path"]), "--bootstrap", platform.kafka_bootstrap]
    plan = subprocess.run([sys.executable, "-m", "rewind.cli", "replay", "plan", "rr", "--from", "10", "--to", "90",
                           "--json", *base], capture_output=True, text=True, env=env, timeout=120)
    assert plan.returncode == 0, plan.stderr
    (tmp_path / "plan.json").write_text(plan.stdout)
    before = snapshot(done_stream["spec"])
    dry = subprocess.run([sys.executable, str(REPLAY_JOB), "rr", "--plan-json",
                          str(tmp_path / "plan.json"), "--dry-run", "--replay-id", "job-1", *base],
                         capture_output=True, text=True, env=env, timeout=120)
    assert dry.returncode == 0 and "dry run: nothing was written" in dry.stdout and "job-1" in dry.stdout, dry
    # a stream's replays live under its home, the parent of its status_dir (rewind.paths), where the page looks
    runs = Path(done_stream["spec"].status_dir).parent / "replays" / "rr"
    assert not (runs / "job-1").exists()
    run = subprocess.run([sys.executable, str(REPLAY_JOB), "rr", "--plan-json",
                          str(tmp_path / "plan.json"), "--replay-id", "job-1", "--json", "--no-progress", *base],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["status"] == "ok" and report["proof"]["ok"] and report["counts"]["records_read"] == 240
    assert Path(report["artifacts"]["report"]) == runs / "job-1" / "report.json"
    assert report["artifacts"]["report_s3"].endswith("replays/rr/job-1/report.json")
    assert "chunk 1/1" in run.stderr and snapshot(done_stream["spec"]) == before


@pytest.mark.slow
def test_overlap_with_a_live_stream_finds_no_duplicates(tmp_path: Path, platform: Any, spark: Any) -> None:
    """Replay what the running stream already wrote while it keeps running and the producer keeps sending."""
    from rewind.control.status import read_status
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.kafka.lookups import true_end_offsets
    from rewind.paths import status_file
    from rewind.runtime.processes import pid_alive, terminate_group
    from rewind.supervision.process_control import launch_stream, stop_stream, wait_caught_up

    bootstrap = platform.kafka_bootstrap
    topic = f"ro-{uuid.uuid4().hex[:8]}"
    reg_path = write_registry(tmp_path / "s.yaml", demo_stream("ro", topic, tmp_path, max_offsets=4000,
                                                               trigger="1 second", **WINDOW_KEYS))
    registry = load_registry(reg_path)
    spec = registry.get("ro")
    produce(bootstrap, ProduceSpec(topic=topic, count=3000, rate=1500, partitions=3, id_prefix="ro",
                                   malformed_every=50, duplicate_every=40))
    stop = threading.Event()
    more = threading.Thread(target=lambda: produce(bootstrap, ProduceSpec(
        topic=topic, count=1_000_000, rate=60, partitions=3, id_prefix="ro", start_seq=3000, malformed_every=50,
        duplicate_every=40), should_stop=stop.is_set), daemon=True)
    log = tmp_path / "stream.log"
    pid = launch_stream(spec, reg_path, bootstrap, log, env={**platform.env(), "PYSPARK_PYTHON": sys.executable})
    try:
        more.start()
        spath = status_file(spec)
        deadline = time.monotonic() + 240
        while True:  # until the stream has committed past the first 3,000 records
            st = read_status(spath)
            done = sum(int(o) for parts in (st.end_offsets if st else {}).values() for o in parts.values())
            if st and st.state == "running" and done >= 3000 and (st.last_batch_id or 0) >= 2:
                break
            assert st is None or st.state != "failed", log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"stream not past 3000 records: {st}\n{log.read_text()[-3000:]}"
            time.sleep(1)
        committed = {tp: int(o) for tp, o in st.end_offsets[topic].items()}
        plan = plan_of(spec, registry, bootstrap, json.dumps({topic: {p: o // 3 for p, o in committed.items()}}),
                       json.dumps({topic: committed}))
        before = {tp.partition: o for tp, o in true_end_offsets(bootstrap, topic).items()}
        batch_before = read_status(spath).last_batch_id
        report = run_replay(spec, plan, bootstrap, spark=spark, run_dir=tmp_path / "ov", replay_id="overlap",
                            progress=False)
        after = {tp.partition: o for tp, o in true_end_offsets(bootstrap, topic).items()}
        st = read_status(spath)
        assert st.state == "running" and more.is_alive(), "stream and producer kept running"
        assert sum(after.values()) > sum(before.values()) and st.last_batch_id > batch_before, (before, after, st)
        proof = report.proof or {}
        assert proof.get("ok"), proof.get("text")
        assert proof["counts"]["duplicate_event_rows"] == 0 and proof["counts"]["duplicate_coordinate_rows"] == 0
        assert report.counts["written"]["events"] == 0  # the stream had written all of it
        stop.set()
        more.join(60)
        wait_caught_up(spec, bootstrap, timeout=300)
        time.sleep(4)  # a few empty triggers: the watermark closes the last windows it can
    finally:
        stop.set()
        try:
            stop_stream(spec, timeout=120)
        finally:
            if pid_alive(pid):  # it never reported running: end the process (and its JVM) we started
                terminate_group(pid, grace=40.0)
    final = verify_stream(spec, bootstrap)
    assert final.ok, final


def test_replay_of_a_complete_range_into_the_kafka_sink_writes_nothing_new(platform: Any, spark: Any,
                                                                          tmp_path: Path) -> None:
    """The replay with the transactional Kafka sink: the stream's output is Kafka topics, which the
    replay reads back (read_committed) to find what is already there; replaying the whole range
    adds no record to them."""
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import build_query, open_sink

    topic = f"rk-{uuid.uuid4().hex[:8]}"
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=1500, rate=1000, partitions=3, id_prefix="rk",
                                                  malformed_every=50, late_every=70, duplicate_every=40))
    url = f"kafka://{platform.kafka_bootstrap}/{topic}-out."
    reg_path = write_registry(tmp_path / "s.yaml", demo_stream("rk", topic, tmp_path, sink_url=url, **WINDOW_KEYS))
    registry = load_registry(reg_path)
    spec = registry.get("rk")
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
    assert query.awaitTermination(240), "the available_now run did not finish"
    assert verify_stream(spec, platform.kafka_bootstrap).ok
    with open_sink(spec) as sink:
        before = {t: len(sink.read_table(t)) for t in ("events", "dead_letter")}
    plan = plan_of(spec, registry, platform.kafka_bootstrap, "earliest", "latest")
    report = run_replay(spec, plan, platform.kafka_bootstrap, spark=spark, run_dir=tmp_path / "idem",
                        replay_id="kidem-1", chunk_offsets=600, progress=False)
    assert report.ok, report.to_json()
    c = report.counts
    assert c["written"] == {"events": 0, "dead_letter": 0, "window_results": 0}, c
    assert c["already_present"] == {"events": before["events"], "dead_letter": before["dead_letter"]}
    with open_sink(spec) as sink:
        assert {t: len(sink.read_table(t)) for t in ("events", "dead_letter")} == before
        assert sink.read_table("events")["event_id"].is_unique


def test_rows_lost_from_a_delta_sink_are_restored_by_a_replay(platform: Any, spark: Any, tmp_path: Path) -> None:
    """The Delta sink: rows deleted from the events table (a DELETE through delta-rs) are found
    missing by verify and written back once by a replay of the whole range; the rows already
    there are counted, not written again."""
    from deltalake import DeltaTable

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import build_query, open_sink

    topic = f"rd-{uuid.uuid4().hex[:8]}"
    produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=1500, rate=1000, partitions=4, id_prefix="rd",
                                                  malformed_every=50, late_every=70, duplicate_every=40,
                                                  keyless=True))
    sink = f'{{url: "delta://{tmp_path}/lake", write_from: executors}}'
    reg_path = write_registry(tmp_path / "s.yaml", demo_stream("rd", topic, tmp_path, sink=sink, **WINDOW_KEYS))
    registry = load_registry(reg_path)
    spec = registry.get("rd")
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
    assert query.awaitTermination(240), "the available_now run did not finish"
    assert verify_stream(spec, platform.kafka_bootstrap).ok
    with open_sink(spec) as out:
        before = len(out.read_table("events"))
        deleted = DeltaTable(out.path("events")).delete("`offset` % 7 = 3")["num_deleted_rows"]
    assert deleted > 50
    damaged = verify_stream(spec, platform.kafka_bootstrap)
    assert not damaged.ok and len(damaged.missing_events) == deleted
    plan = plan_of(spec, registry, platform.kafka_bootstrap, "earliest", "latest")
    report = run_replay(spec, plan, platform.kafka_bootstrap, spark=spark, run_dir=tmp_path / "fix",
                        replay_id="dfix-1", chunk_offsets=700, progress=False)
    assert report.ok, report.to_json()
    assert report.counts["written"]["events"] == deleted
    assert report.counts["already_present"]["events"] == before - deleted
    assert verify_stream(spec, platform.kafka_bootstrap).ok
    with open_sink(spec) as out:
        events = out.read_table("events")
        assert len(events) == before and events["event_id"].is_unique


def test_a_record_sent_twice_across_a_chunk_boundary_is_counted_once(platform: Any, spark: Any,
                                                                      tmp_path: Path) -> None:
    """Copies of one event on both sides of a chunk boundary, on purpose (a producer's retry can put
    them anywhere): each chunk's deduplication sees one copy, so the replay must recognise the later
    one as a repeat of what an earlier chunk output, not count it as a row already present, and
    must not write it as a second row. Two such pairs, one partition, chunks of 100 offsets."""
    from confluent_kafka import Producer

    from rewind.demo.events import make_event
    from rewind.demo.producer import ensure_topic
    from rewind.driver.runner import build_query, open_sink

    topic = f"rsplit-{uuid.uuid4().hex[:8]}"
    ensure_topic(platform.kafka_bootstrap, topic, 1)
    base = pd.Timestamp.now(tz="UTC").to_pydatetime()
    events = [make_event("split", i, base + pd.Timedelta(milliseconds=i)) for i in range(300)]
    # offset -> event sent there: 0..299 in order, with event 50 sent again at offset 150 (chunk 2 of
    # [0,100) [100,200) ...) and event 120 again at offset 250 (chunk 3): 302 records
    order = [*events[:150], events[50], *events[150:250], events[120], *events[250:]]
    producer = Producer({"bootstrap.servers": platform.kafka_bootstrap, "enable.idempotence": True})
    for ev in order:
        producer.produce(topic, value=ev.encode(), key=ev.key.encode(), partition=0)
    assert producer.flush(30) == 0
    reg_path = write_registry(tmp_path / "s.yaml", demo_stream("rsplit", topic, tmp_path, **WINDOW_KEYS))
    registry = load_registry(reg_path)
    spec = registry.get("rsplit")
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True)
    assert query.awaitTermination(240), "the available_now run did not finish"
    assert verify_stream(spec, platform.kafka_bootstrap).ok
    db = sqlite3.connect(db_path(spec))
    try:
        deleted = db.execute(f"DELETE FROM {spec.sink.table_prefix}events WHERE \"offset\" % 7 = 3").rowcount
        db.commit()
    finally:
        db.close()
    assert deleted > 30
    plan = plan_of(spec, registry, platform.kafka_bootstrap, "earliest", "latest")
    assert plan.total_records == len(order) == 302
    report = run_replay(spec, plan, platform.kafka_bootstrap, spark=spark, run_dir=tmp_path / "fix",
                        replay_id="split-1", chunk_offsets=100, progress=False)
    c = report.counts
    print(json.dumps({"counts": c, "chunks": report.chunks}, default=str))
    assert report.ok, report.to_json()
    assert len(report.chunks) == 4
    assert sum(int(ch.get("repeats_of_earlier_chunks", 0)) for ch in report.chunks) == 2, report.chunks
    assert c["events_out"] == 300, c  # each of the 300 events once, whatever chunk its copies fell in
    assert c["duplicates_collapsed"] == 2, c
    assert c["written"]["events"] == deleted
    assert c["already_present"]["events"] == 300 - deleted
    assert verify_stream(spec, platform.kafka_bootstrap).ok
    with open_sink(spec) as out:
        rows = out.read_table("events")
    assert len(rows) == 300 and rows["event_id"].is_unique
