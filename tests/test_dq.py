"""The Great Expectations proof (rewind/proof/: dq, frames, gx, report, publish).

- Pure: the coverage and window frames over hand-made Kafka records and sink tables, and
  the suite's verdicts on them (no services).
- Real: the demo stream runs (available_now) over events with malformed, late and
  duplicate records on Apache Kafka; the proof passes and stores Data Docs locally and in
  SeaweedFS; a damaged copy of the sink tables (a gap, a duplicate row, a forged event at
  taken coordinates, a wrong window count) fails with the right expectations, counts and
  example rows; `rewind dq` exits 0 / 2.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from rewind.demo.events import make_event, malformed_payload
from rewind.demo.transform import DemoTransform
from rewind.proof.contract_proof import records_frame
from rewind.proof.dq import run_proof
from rewind.proof.frames import build_frames, kafka_frame, normalize_bounds
from rewind.proof.gx import validate_frames
from rewind.proof.publish import local_paths, upload_proof, upload_results, write_proof, write_validation_result
from rewind.proof.report import ProofFailed, ProofResult, format_proof
from rewind.proof.verify import KafkaRecord, recompute_windows

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
WINDOW, DELAY, LATENESS = timedelta(seconds=10), timedelta(seconds=30), timedelta(seconds=20)


# --------------------------------------------------------------------------- pure
def scenario(n: int = 60):
    """Kafka records (every 10th malformed, every 7th event sent twice) and a consistent sink."""
    records, events, dead = [], [], []
    for i in range(n):
        t = T0 + timedelta(seconds=2 * i)
        ms = int(t.timestamp() * 1000)
        p = i % 2
        if i % 10 == 9:
            records.append(KafkaRecord("t", p, i, ms, malformed_payload(i)))
            dead.append({"topic": "t", "partition": p, "offset": i, "reason": "malformed", "batch_id": 0})
            continue
        ev = make_event("p", i, t)
        records.append(KafkaRecord("t", p, i, ms, ev.encode()))
        events.append({"event_id": ev.event_id, "key": ev.key, "amount": ev.amount, "event_time": pd.Timestamp(t),
                       "topic": "t", "partition": p, "offset": i, "batch_id": 0})
        if i % 7 == 0:  # the same bytes again at a later offset: the sink keeps one row
            records.append(KafkaRecord("t", p, 1000 + i, ms, ev.encode()))
    ev_df = pd.DataFrame(events)
    win = recompute_windows(ev_df, WINDOW).assign(batch_id=0)
    return records, ev_df, pd.DataFrame(dead), win


DEMO = DemoTransform()


def frames_of(records, ev, dead, win, **kw):  # type: ignore[no-untyped-def]
    """The suite's frames with the demo's own rules (its expect() and window aggregate): the proof imports neither."""
    kw.setdefault("bounds", None)
    expected = DEMO.expect(records_frame(records), SimpleNamespace(durations=lambda: {"allowed_lateness": LATENESS}))
    return build_frames(kafka_frame(records, expected), ev, dead, win, window=WINDOW, watermark_delay=DELAY,
                        aggregate=DEMO.aggregates[0], **kw)


def states(frames) -> dict:  # type: ignore[no-untyped-def]
    return frames.aggregates["aggregate_state"].value_counts().to_dict()


def test_frames_of_a_consistent_sink() -> None:
    records, ev, dead, win = scenario()
    f = frames_of(records, ev, dead, win)
    landed = f.coverage["landed_in"].value_counts().to_dict()
    assert landed == {"events": len(ev), "dead_letter": len(dead), "duplicate_send": 8}
    dup = f.coverage[f.coverage["landed_in"] == "duplicate_send"].iloc[0]
    assert dup["offset"] >= 1000 and dup["sink_location"] == f"t/{dup['partition']}/{dup['offset'] - 1000}"
    assert (f.events["kafka_event_id"] == f.events["event_id"]).all()
    assert set(f.dead_letter["kafka_verdict"]) == {"dead"}
    assert set(states(f)) == {"match"} and f.counts["windows_checked"] == len(win)
    assert f.counts["missing"] == 0 and f.counts["duplicate_sends"] == 8 and f.counts["records_in_range"] == 68
    assert f.range == {"t": {"0": [0, 1057], "1": [1, 1036]}}


def test_records_behind_the_watermark_are_dead_letters_and_leave_the_windows() -> None:
    """A valid record the stream routed as behind_watermark: landed, not missing; the windows that
    would have counted it are judged without it; a forged behind_watermark (event time after the
    watermark) and a record both event and dead letter are named."""
    records, ev, dead, win = scenario()
    late = ev.iloc[3]
    ev2 = ev[ev["event_id"] != late["event_id"]]
    win2 = recompute_windows(ev2, WINDOW).assign(batch_id=0)
    row = {"topic": late["topic"], "partition": late["partition"], "offset": late["offset"],
           "reason": "behind_watermark", "batch_id": 1, "watermark": pd.Timestamp(T0 + timedelta(hours=1))}
    dead2 = pd.concat([dead.assign(watermark=pd.NaT), pd.DataFrame([row])], ignore_index=True)
    f = frames_of(records, ev2, dead2, win2)
    assert f.counts["missing"] == 0 and f.counts["behind_watermark"] == 1, f.counts
    assert validate_frames(f.frames(), "unit", "r-late", None)[1] == []
    forged = dead2.copy()
    forged.loc[forged.index[-1], "watermark"] = pd.Timestamp(T0 - timedelta(hours=1))
    bad = frames_of(records, ev2, forged, win2)
    assert {x.name for x in validate_frames(bad.frames(), "unit", "r-forged", None)[1]} >= {
        "dead_letters_match_kafka", "no_kafka_record_missing"}
    both = frames_of(records, ev, dead2, win)
    assert "each_kafka_record_lands_once" in {x.name for x in validate_frames(both.frames(), "unit", "r-both", None)[1]}


def test_frames_name_each_defect() -> None:
    records, ev, dead, win = scenario()
    gone = ev.iloc[0]["event_id"]  # seq 0: also sent twice, so two Kafka records lose their event
    broken = pd.concat([ev.iloc[1:], ev.iloc[[3]], ev.iloc[[4]].assign(event_id="forged")], ignore_index=True)
    moved = broken.index[broken["event_id"] == ev.iloc[5]["event_id"]][0]
    broken.loc[moved, "offset"] = 555  # an event at coordinates Kafka has no record at
    bad_win = win.copy()
    bad_win.loc[1, "event_count"] += 1
    closed_first = bad_win.iloc[[0]]
    f = frames_of(records, broken, dead.iloc[1:], bad_win.drop(index=0))
    cov = f.coverage.set_index("offset")["landed_in"]
    assert cov[0] == "missing" and cov[1000] == "missing" and cov[dead.iloc[0]["offset"]] == "missing"
    assert cov[ev.iloc[5]["offset"]] == "wrong_coordinates"
    assert f.counts["missing"] == 3 and f.counts["duplicate_event_rows"] == 1
    assert f.counts["duplicate_coordinate_rows"] == 2  # the repeated row, the forged row
    assert set(f.events.loc[f.events["event_id"] == "forged", "kafka_event_id"]) == {ev.iloc[4]["event_id"]}
    assert f.events.loc[f.events["offset"] == 555, "kafka_verdict"].tolist() == ["absent"]
    w = f.aggregates.set_index("group")["aggregate_state"]
    first = f"{pd.Timestamp(closed_first.iloc[0]['window_start']).tz_convert('UTC').isoformat()}\x1f" \
            f"{closed_first.iloc[0]['key']}"
    assert w[first] == "missing"
    assert (f.aggregates["aggregate_state"] == "mismatch").sum() >= 1
    bad = f.aggregates[f.aggregates["aggregate_state"] == "mismatch"].iloc[0]["disagrees"]
    assert "window_results [" in bad and "event_count: sink" in bad and "recomputed" in bad
    assert gone not in set(f.events["event_id"])


def test_window_horizon_and_batches() -> None:
    records, ev, dead, win = scenario()
    # the stream's watermark is behind the raw horizon: late windows not in the sink are pending, not missing
    early = T0 + timedelta(seconds=20)
    f = frames_of(records, ev, dead, win[pd.to_datetime(win["window_start"], utc=True) + WINDOW <= early],
                  stream_watermark=early)
    assert f.counts["windows_missing"] == 0 and f.counts["windows_pending"] > 0
    # while the stream runs, rows of batches after the proven one are left out
    later = win.assign(batch_id=[0] * (len(win) - 1) + [7])
    f = frames_of(records, ev, dead, later, last_batch=3)
    assert f.counts["windows_checked"] == len(win) - 1


def test_bounds_judge_only_the_range() -> None:
    records, ev, dead, win = scenario()
    bounds = normalize_bounds({"t": {"0": [10, 30], "1": [11, 31]}})
    assert bounds == {("t", 0): (10, 30), ("t", 1): (11, 31)}
    assert normalize_bounds({("t", 0): 5}) == {("t", 0): (0, 5)}
    with pytest.raises(ValueError, match="bad range"):
        normalize_bounds({("t", 0): (5, 2)})
    f = frames_of(records, ev.iloc[:3], dead, win, bounds=bounds)  # sink rows before the range are not judged
    assert f.coverage["offset"].between(10, 30).all() and f.counts["records_in_range"] == 20
    assert f.counts["missing"] == 18 and f.events.empty
    # the range's windows only: those its own events fall in
    assert pd.to_datetime(f.aggregates["window_start"], utc=True).min() >= T0 + timedelta(seconds=20)


def test_empty_sink_and_empty_topic() -> None:
    from rewind.demo.tables import TABLES

    records, _, _, _ = scenario(30)
    empty = {t.name: pd.DataFrame(columns=list(t.column_names)) for t in TABLES}
    f = frames_of(records, empty["events"], empty["dead_letter"], empty["window_results"])
    assert f.counts["missing"] == f.counts["records_in_range"] == len(records) and f.events.empty
    assert f.counts["windows_checked"] == 0 and f.counts["windows_missing"] > 0
    f = frames_of([], empty["events"], empty["dead_letter"], empty["window_results"])
    assert f.counts["records_in_range"] == 0 and f.coverage.empty and f.aggregates.empty and f.range == {}


def test_suite_verdicts_on_hand_made_frames() -> None:
    records, ev, dead, win = scenario()
    ok = frames_of(records, ev, dead, win)
    _, failures, total = validate_frames(ok.frames(), "unit", "r-ok", None)
    assert failures == [] and total >= 20
    broken = pd.concat([ev.iloc[1:], ev.iloc[[3]], ev.iloc[[4]].assign(event_id="forged")], ignore_index=True)
    bad_win = win.copy()
    bad_win.loc[1, "event_count"] += 1
    bad_win.loc[2, "amount_sum"] += 0.5
    f = frames_of(records, broken, pd.concat([dead, dead.iloc[[0]]]), bad_win.drop(index=0))
    _, failures, _ = validate_frames(f.frames(), "unit", "r-bad", None)
    by = {x.name: x for x in failures}
    assert set(by) == {"no_duplicate_event_ids", "no_duplicate_event_coordinates", "events_match_kafka",
                       "no_duplicate_dead_letter_coordinates", "no_kafka_record_missing", "aggregates_reconcile",
                       "closed_aggregates_present"}
    assert by["no_kafka_record_missing"].unexpected_count == 2
    assert {e["event_id"] for e in by["no_kafka_record_missing"].examples} == {ev.iloc[0]["event_id"]}
    assert by["events_match_kafka"].examples[0]["event_id"] == "forged"
    assert by["no_duplicate_event_ids"].examples[0]["event_id"] == ev.iloc[3]["event_id"]


def test_a_failed_proof_is_a_proof_violation_and_still_an_assertion_error() -> None:
    from rewind.errors import EXIT_PROOF_VIOLATION, ProofViolation, exit_code_of

    result = ProofResult("s", "r1", False, {}, {}, 23, [], {"result": "r.json", "data_docs": "d/index.html"})
    with pytest.raises(ProofFailed) as caught:
        result.raise_if_failed()
    assert isinstance(caught.value, ProofViolation) and isinstance(caught.value, AssertionError)
    assert exit_code_of(caught.value) == EXIT_PROOF_VIOLATION and not caught.value.retry
    assert str(caught.value) == format_proof(result) and caught.value.result is result


def test_an_upload_failure_keeps_the_verdict_and_the_local_results(tmp_path: Path) -> None:
    class DeadStore:
        def __init__(self) -> None:
            self.puts: list[str] = []

        def url(self, key: str) -> str:
            return f"s3://b/{key}"

        def write_bytes(self, key: str, data: bytes, content_type: str) -> None:
            self.puts.append(key)
            raise OSError("store unreachable")

    docs = tmp_path / "data_docs"
    docs.mkdir()
    (docs / "index.html").write_text("<html/>")
    result = ProofResult("s", "r1", True, {}, {}, 23, [], local_paths(tmp_path, docs))
    write_validation_result(result, {"s.exactly_once.events": {}})
    store = DeadStore()
    upload_results(store, result, docs)
    write_proof(result)
    upload_proof(store, result)
    assert result.ok and result.s3_error == "OSError: store unreachable" and store.puts == [
        "dq/s/r1/data_docs/index.html"]  # proof.json is not tried after the first failure
    assert result.s3["data_docs"] == "s3://b/dq/s/r1/data_docs/index.html"
    saved = json.loads((tmp_path / "proof.json").read_text())
    assert saved["ok"] is True and saved["s3_error"] == "OSError: store unreachable"
    assert json.loads((tmp_path / "validation_result.json").read_text())["success"] is True
    assert "WARNING: results were not stored in S3: OSError: store unreachable" in format_proof(result)


# --------------------------------------------------------------------------- real services
@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, platform, spark):  # type: ignore[no-untyped-def]
    """The demo stream over 3,000 events (malformed, late, duplicate), run to the end with available_now.

    Events span 3 s of event time and two micro-batches; with 1 s windows and a 1 s watermark delay the
    second batch closes the first second's windows, so some window results exist to reconcile.
    """
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import build_query
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    t0 = time.perf_counter()
    work = tmp_path_factory.mktemp("dq")
    topic = f"dq-{uuid.uuid4().hex[:8]}"
    sent = produce(platform.kafka_bootstrap, ProduceSpec(
        topic=topic, count=3000, rate=1000, partitions=3, id_prefix="dq", malformed_every=50, late_every=70,
        duplicate_every=40))
    same = {"max_offsets": 2000, "checkpoint": f"{work}/checkpoint", "window": "1 second",
            "watermark_delay": "1 second", "allowed_lateness": "500 ms"}
    sink = f"sqlite:///{work}/sink.db"
    write_registry(work / "s.yaml",  # dqbad reads damaged copies of dq's tables (damage_copy), prefixed bad_
                   demo_stream("dq", topic, work, sink=f'{{url: "{sink}", table_prefix: dq_}}', **same),
                   demo_stream("dqbad", topic, work, sink=f'{{url: "{sink}", table_prefix: bad_}}', **same))
    registry = load_registry(work / "s.yaml")
    query = build_query(spark, registry.get("dq"), platform.kafka_bootstrap, available_now=True)
    t1 = time.perf_counter()
    assert query.awaitTermination(180), "the available_now run did not finish"
    print(f"demo_run: produced {sent.sent} records in {sent.seconds:.1f}s, stream (available_now) "
          f"{time.perf_counter() - t1:.1f}s, fixture {time.perf_counter() - t0:.1f}s")
    return {"work": work, "registry": work / "s.yaml", "spec": registry.get("dq"), "bad": registry.get("dqbad"),
            "sent": sent, "topic": topic}


def s3_store(platform):  # type: ignore[no-untyped-def]
    from rewind.storage import S3Config, S3Storage

    return S3Storage(S3Config.from_platform(platform))


def test_proof_passes_and_stores_data_docs(demo_run, platform, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = s3_store(platform)
    started = time.perf_counter()
    result = run_proof(demo_run["spec"], platform.kafka_bootstrap, run_dir=tmp_path / "run", s3=store)
    elapsed = time.perf_counter() - started
    text = format_proof(result)
    print(text, f"\nproof of {result.counts['records_in_range']} records in {elapsed:.2f}s: {result.seconds}")
    assert result.ok, text
    c = result.counts
    assert c["records_in_range"] == demo_run["sent"].sent
    # late events are sent twice too (both copies are dead letters): duplicate sends count valid events only
    assert 0 < c["duplicate_sends"] == c["valid_records"] - c["distinct_events"] <= demo_run["sent"].duplicates
    assert c["expected_dead_letters"] >= demo_run["sent"].malformed + demo_run["sent"].late > 0
    assert c["sink_dead_letters"] == c["expected_dead_letters"]
    assert c["sink_events"] == c["distinct_events"] and c["missing"] == 0
    assert c["windows_checked"] > 0, "no closed windows to reconcile"
    assert "PASS" in text and result.run_id in text
    index = Path(result.local["data_docs"])
    assert index.is_file() and "exactly_once" in index.read_text()
    saved = json.loads(Path(result.local["result"]).read_text())
    assert saved["success"] is True and set(saved["suites"]) == {f"dq.exactly_once.{f}" for f in
                                                                 ("events", "dead_letter", "coverage", "aggregates")}
    assert result.s3_error is None and result.s3["data_docs"].endswith(f"dq/dq/{result.run_id}/data_docs/index.html")
    prefix = f"dq/dq/{result.run_id}/"
    assert b"exactly_once" in store.read_bytes(prefix + "data_docs/index.html")
    assert json.loads(store.read_bytes(prefix + "validation_result.json"))["success"] is True
    assert json.loads(store.read_bytes(prefix + "proof.json"))["ok"] is True


def test_running_stream_is_proven_up_to_its_last_committed_batch(demo_run, platform, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A stream that runs (a live pid, its status) and has committed batch 0 (its checkpoint holds commits/0
    only: the checkpoint is what a proof reads first): only batch 0's range is judged."""
    import shutil

    from rewind.checkpoints.logs import parse_offsets_file
    from rewind.control.status import StreamStatus, write_status
    from rewind.paths import status_file

    full = Path(demo_run["spec"].checkpoint)
    at0 = tmp_path / "checkpoint-at-batch-0"
    for rel in ("metadata", "offsets/0", "commits/0"):
        (at0 / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(full / rel, at0 / rel)
    spec = demo_run["spec"].model_copy(update={"checkpoint": str(at0)})
    _, sources = parse_offsets_file((at0 / "offsets" / "0").read_text())
    path = status_file(spec)
    write_status(path, StreamStatus(stream=spec.name, state="running", pid=os.getpid(), last_batch_id=0,
                                    end_offsets=sources[0]))
    try:
        result = run_proof(spec, platform.kafka_bootstrap, run_dir=tmp_path / "running")
    finally:
        path.unlink()
    assert result.ok, format_proof(result)
    assert result.range == {t: {p: [0, int(o)] for p, o in parts.items()} for t, parts in sources[0].items()}
    assert result.counts["records_in_range"] == sum(int(o) for parts in sources[0].values() for o in parts.values())
    assert result.counts["records_in_range"] < demo_run["sent"].sent and result.counts["watermark_batch"] == 0
    assert any("batch 0" in n for n in result.notes) and not result.s3


def damage_copy(work: Path, drop: int = 3) -> dict:
    """bad_* copies of the sink tables (no primary keys), then a gap, duplicates, a forgery, a wrong window."""
    db = sqlite3.connect(work / "sink.db")
    try:
        for t in ("events", "dead_letter", "window_results"):
            db.execute(f"DROP TABLE IF EXISTS bad_{t}")
            db.execute(f"CREATE TABLE bad_{t} AS SELECT * FROM dq_{t}")
        gone = [r[0] for r in db.execute(f"SELECT event_id FROM bad_events ORDER BY event_id LIMIT {drop}")]
        db.execute(f"DELETE FROM bad_events WHERE event_id IN ({','.join('?' * len(gone))})", gone)
        dup = db.execute("SELECT * FROM bad_events ORDER BY event_id DESC LIMIT 1").fetchone()
        db.execute(f"INSERT INTO bad_events VALUES ({','.join('?' * len(dup))})", dup)
        cols = [r[1] for r in db.execute("PRAGMA table_info(bad_events)")]
        forged = list(db.execute("SELECT * FROM bad_events ORDER BY event_id DESC LIMIT 1 OFFSET 5").fetchone())
        forged[cols.index("event_id")] = "forged-1"
        db.execute(f"INSERT INTO bad_events VALUES ({','.join('?' * len(forged))})", forged)
        win = db.execute("SELECT window_start, key FROM bad_window_results "
                         "ORDER BY window_start, key LIMIT 1").fetchone()
        db.execute("UPDATE bad_window_results SET event_count = event_count + 1 WHERE window_start = ? AND key = ?",
                   win)
        db.commit()
        return {"gone": gone, "dup": dup[0], "win_key": win[1]}
    finally:
        db.close()


def test_proof_fails_with_names_counts_and_examples(demo_run, platform, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    damage = damage_copy(demo_run["work"])
    result = run_proof(demo_run["bad"], platform.kafka_bootstrap, run_dir=tmp_path / "bad", s3=s3_store(platform))
    text = format_proof(result)
    print(text)
    assert not result.ok
    by = {f.name: f for f in result.failures}
    assert set(by) == {"no_duplicate_event_ids", "no_duplicate_event_coordinates", "events_match_kafka",
                       "no_kafka_record_missing", "aggregates_reconcile"}, text
    missing = by["no_kafka_record_missing"]
    assert missing.unexpected_count == result.counts["missing"] >= len(damage["gone"])
    assert {e["event_id"] for e in missing.examples} <= set(damage["gone"]) and len(missing.examples) == min(
        5, missing.unexpected_count)
    assert {e["landed_in"] for e in missing.examples} == {"missing"}
    assert by["no_duplicate_event_ids"].unexpected_count == 2
    assert {e["event_id"] for e in by["no_duplicate_event_ids"].examples} == {damage["dup"]}
    assert by["events_match_kafka"].examples[0]["event_id"] == "forged-1"
    assert by["no_duplicate_event_coordinates"].unexpected_count == 4  # two pairs of rows share coordinates
    assert by["aggregates_reconcile"].examples[0]["group"].endswith(damage["win_key"])
    assert "event_count: sink" in by["aggregates_reconcile"].examples[0]["disagrees"]
    assert result.counts["duplicate_event_rows"] == 1 and result.counts["windows_mismatched"] == 1
    for name in by:
        assert f"FAILED {name}" in text
    assert "e.g. {" in text and "FAIL:" in text.splitlines()[0]
    assert Path(result.local["data_docs"]).is_file() and result.s3_error is None
    with pytest.raises(ProofFailed, match="no_kafka_record_missing"):
        result.raise_if_failed()


def test_cli_exit_codes(demo_run, platform, tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from rewind.cli.main import main
    from rewind.paths import paths_of
    from rewind.registry import load_registry

    for k, v in platform.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("REWIND_HOME", str(tmp_path / "home"))

    def run(*argv: str) -> int:
        return main(["dq", *argv, "--registry", str(demo_run["registry"]), "--bootstrap", platform.kafka_bootstrap])

    assert run("dq", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["s3"]["data_docs"].startswith(f"s3://{platform.bucket}/dq/dq/")
    # the proof run lives where the DAG's and the Rewind page's do: <stream home>/dq/STREAM/RUN
    dq_runs = paths_of(load_registry(demo_run["registry"]).get("dq")).dq_runs
    assert Path(out["local"]["data_docs"]).is_relative_to(dq_runs)
    damage_copy(demo_run["work"])
    assert run("dqbad", "--no-s3", "--run-dir", str(tmp_path / "cli-bad")) == 4  # proof violation
    text = capsys.readouterr().out
    assert "FAILED no_kafka_record_missing" in text and (tmp_path / "cli-bad" / "data_docs" / "index.html").is_file()
