"""The CI-sized chaos run: `rewind chaos demo` with the default seed, for real.

10,000 events (duplicates, malformed and late records included) into the demo stream under
the in-process supervisor, while the seeded schedule SIGKILLs it 3 times (during a batch, between
the sink's commit and Spark's, at random) and once more before a corruption, restarts the Kafka
broker, cuts S3 in the middle of a savepoint, empties every offsets file while the stream is down
(a restore from the savepoint), replays
an already-processed range beside the live stream, and stops it while a segment arrives as
backlogs skewed across the partitions by more than the watermark delay (a restart after an
outage): the records that end behind the watermark must be ``behind_watermark`` dead letters,
exactly as many per batch as Spark's stateful operators dropped. Everything runs on the harness's
own throwaway services (it restarts the broker, so it cannot share the session's), through
the command line a person would use; the report it stores is what is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Seed 7 at this size still draws every kill moment (random, sink_committed, batch_planned) and a SIGKILL
# followed by a corruption that forces a restore: `rewind chaos demo --plan` with these arguments shows it.
# The plan is the same 8 faults at the same fractions of the events at 10,000 as at 20,000 (each segment
# still flows for SEGMENT_S, at half the rate); what halves is the backlog each restart catches up on, the
# replayed range and the proof's records (2026-11-28: kills 22 s each against 28-43 s, the proof 5.7 s
# against 11.5 s). Each segment flows for 6 s instead of the default 12 (--rate 185 instead of 93 events/s):
# the same plan, the same moments and skew (its backlog is older by event time, not by wall time); alone,
# 166 s against 185 s (2026-11-30).
EVENTS, KILLS, RATE = 10_000, 3, 185
ARGS = ["--seed", os.environ.get("REWIND_CHAOS_SEED", "7"), "--events", str(EVENTS), "--kills", str(KILLS),
        "--rate", str(RATE),
        "--broker-restarts", "1", "--corruptions", "1", "--replays", "1", "--s3-outages", "1", "--skewed-restarts", "1"]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_ci_sized_chaos_run_passes(tmp_path: Path) -> None:
    report_dir = tmp_path / "chaos"
    env = {**os.environ, "REWIND_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    for k in ("REWIND_KAFKA_BOOTSTRAP", "REWIND_REGISTRY", "REWIND_S3_BUCKET", "AWS_ENDPOINT_URL"):
        env.pop(k, None)  # the harness brings its own platform and registry copy
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "rewind.cli", "chaos", "demo", "--registry", str(ROOT / "streams.yaml"),
                          *ARGS, "--report", str(report_dir)], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=1440)
    seconds = time.monotonic() - started
    print(run.stdout)
    print(f"[chaos] exit {run.returncode} after {seconds:.0f}s")
    assert (report_dir / "report.json").exists(), run.stderr[-4000:]
    report = json.loads((report_dir / "report.json").read_text())
    failed = [i for i in report["invariants"] if not i["ok"]]
    assert run.returncode == 0 and report["ok"] and not failed, (failed, run.stderr[-4000:])

    asked = sorted(f["moment"]["asked"] for f in report["facts"]["faults"] if f["kind"] == "kill")
    assert asked == ["batch_planned", "random", "sink_committed"], asked
    by_kind = report["faults_by_kind"]
    assert by_kind["kill"]["count"] >= KILLS and by_kind["broker_restart"]["count"] >= 1
    assert by_kind["corruption"]["count"] >= 1 and by_kind["replay"]["count"] >= 1
    assert by_kind["s3_outage"]["count"] >= 1 and by_kind["sigkills_total"] >= KILLS + 1
    assert by_kind["skewed_restart"]["count"] >= 1
    known = report["facts"]["known"]
    assert known["missing"] == 0 and known["duplicate_rows"] == 0 and known["unexpected"] == 0
    # a known event is in the events table, or every record carrying its id is a behind_watermark dead letter
    assert known["sink_events"] + known["behind_events"] == known["expected_events"] > 0.9 * EVENTS
    assert known["other_dead_letters"] == known["expected_dead_letters"] > 0
    assert known["events_also_dead"] == 0 and known["behind_not_known"] == 0
    late = report["facts"]["late_checks"]
    assert late["lines"] > 0 and late["bad_count"] == 0 and not late["status_mismatches"]
    # the skewed restart really put records behind the watermark (Spark's connector, the demo's source)
    skews = [f["skew"] for f in report["facts"]["faults"] if f["kind"] == "skewed_restart"]
    assert skews and all(s["behind_watermark"] >= s["expected_behind"] > 0 for s in skews), skews
    assert known["behind_watermark"] >= sum(s["behind_watermark"] for s in skews)
    assert report["facts"]["expected"]["duplicate_sends"] > 0  # the duplicates were really sent
    assert report["facts"]["proof"]["ok"] and report["facts"]["verify"]["ok"]
    assert (report_dir / "report.txt").read_text().startswith("rewind chaos demo: PASS")
