"""`rewind stream upgrade` switches a stream between real-time mode and micro-batches through a savepoint,
and refuses a switch into real-time mode that the mode cannot run before anything stops.

The scaffold's stream (``tests/test_realtime.py``'s ``RealTimeStream``) runs in real-time mode under a
400 records/s producer; the command line upgrades it to micro-batches (``trigger: 1 second``,
``maxOffsetsPerTrigger``) with ``--mode savepoint``, then back. Each switch passes the pre-flight (its
batch runs as a micro-batch on a copy of the newest savepoint), stops with a savepoint, restores it and is
proven on its first batches. Afterwards every Kafka offset is in the sink exactly once and ``rewind verify``
passes; then rows deleted from the sink come back through ``rewind replay run`` (a bounded batch, as for any
stream).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.registry_templates import demo_stream
from tests.test_realtime import Producer, RealTimeStream, _wait


def upgrade(stream: RealTimeStream, trigger: Any, pace: bool) -> str:
    """`rewind stream upgrade NAME --mode savepoint` to the running entry with another trigger; its output."""
    entry = dict(yaml.safe_load((stream.cwd / "streams.yaml").read_text())["streams"][stream.name])
    options = {k: v for k, v in entry["source"]["options"].items() if k != "maxOffsetsPerTrigger"}
    entry["trigger"] = trigger
    entry["source"] = {**entry["source"], "options": {**options, **({"maxOffsetsPerTrigger": "2000"} if pace else {})}}
    new = stream.cwd / "new-entry.yaml"
    new.write_text(yaml.safe_dump({"streams": {stream.name: entry}}))
    done = subprocess.run([sys.executable, "-m", "rewind.cli", "stream", "upgrade", stream.name, "--registry-entry",
                           str(new), "--mode", "savepoint", "--grace", "120"], env=stream.env, cwd=stream.cwd,
                          capture_output=True, text=True, timeout=600)
    said = done.stdout + done.stderr  # the result on stdout, the steps on stderr
    assert done.returncode == 0 and "proven: proven" in said, said[-6000:]
    return said


def committed_epochs(stream: RealTimeStream) -> int:
    return len(list((stream.cwd / "home" / "checkpoints" / stream.name / "commits").glob("[0-9]*")))


def last_commit(stream: RealTimeStream) -> int:
    """The newest commits/N of the stream's active checkpoint (an upgrade restores into a new directory)."""
    from rewind.checkpoints.watermark import last_commit as newest
    from rewind.registry import load_registry

    found = newest(load_registry(stream.cwd / "streams.yaml", env=stream.env).get(stream.name))
    return -1 if found is None else found.batch


@pytest.mark.slow
def test_a_stream_switches_to_micro_batches_and_back_through_savepoints_exactly_once_and_replays(
        tmp_path: Path, platform: Any, new_topic: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from rewind.registry import load_registry
    from rewind.supervision.process_control import stop_stream

    stream = RealTimeStream(tmp_path, platform, new_topic(2), monkeypatch)
    producer = Producer(platform.kafka_bootstrap, stream.topic)
    producer.start()
    driver = stream.launch()
    try:
        _wait(lambda: committed_epochs(stream) >= 2, 240, "two closed epochs", stream.log, driver)
        out = upgrade(stream, "1 second", pace=True)
        assert "switched: savepoint" in out and "preflight_passed" in out, out
        spec = load_registry(tmp_path / "streams.yaml", env=stream.env).get(stream.name)
        assert spec.real_time is None and spec.source.options["maxOffsetsPerTrigger"] == "2000"
        before = stream.written()
        _wait(lambda: stream.written() >= before + 1000, 240, "rows in micro-batches", stream.log)
        upgrade(stream, {"real_time": "5 seconds"}, pace=False)
        spec = load_registry(tmp_path / "streams.yaml", env=stream.env).get(stream.name)
        assert spec.real_time is not None
        before = stream.written()
        _wait(lambda: stream.written() >= before + 1000, 240, "rows in real-time mode again", stream.log)
        target = producer.sent
        producer.stop.set()
        producer.join(30)
        _wait(lambda: stream.written() >= target, 120, "every record written", stream.log)
        # a graceful stop closes the epoch it finds running: it waits for the epoch's commit, then stops
        spec = load_registry(tmp_path / "streams.yaml", env=stream.env).get(stream.name)
        running = last_commit(stream) + 1
        asked = time.monotonic()
        stop_stream(spec, timeout=60)
        assert last_commit(stream) >= running, f"epoch {running} was left open by the stop"
        assert time.monotonic() - asked < 20, "the stop waited past the epoch's close"
    finally:
        producer.stop.set()
        stop_stream(load_registry(tmp_path / "streams.yaml", env=stream.env).get(stream.name), timeout=60)
    stream.check_exactly_once(producer)
    proved = stream.verify()
    assert proved["ok"] is True and proved["landed_missing"] == 0, proved

    # a replay of a real-time stream runs as a bounded batch, as for any stream: rows lost from the sink come back
    with sqlite3.connect(stream.db) as con:
        lost = con.execute(f"DELETE FROM {stream.name}_rows WHERE partition = 0 AND offset < 300").rowcount
    assert lost > 250
    stream.verify(expect_ok=False)
    done = subprocess.run([sys.executable, "-m", "rewind.cli", "replay", "run", stream.name, "--from",
                           json.dumps({stream.topic: {"0": 0}}), "--to", json.dumps({stream.topic: {"0": 300}}),
                           "--no-s3", "--no-progress", "--json"], env=stream.env, cwd=stream.cwd, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stream.check_exactly_once(producer)
    assert stream.verify()["ok"] is True


def test_a_switch_into_real_time_mode_it_cannot_run_is_refused_before_anything_stops(tmp_path: Path) -> None:
    from rewind.upgrade.rules import UpgradeRefused
    from rewind.upgrade.run import UpgradeRequest, prepare

    registry = tmp_path / "streams.yaml"
    registry.write_text("streams:\n" + demo_stream("agg", "agg-events", tmp_path))
    entry = yaml.safe_load(registry.read_text())["streams"]["agg"]
    entry["trigger"] = {"real_time": "5 seconds"}
    entry["source"]["options"].pop("maxOffsetsPerTrigger")
    text = yaml.safe_dump({"streams": {"agg": entry}})
    with pytest.raises(UpgradeRefused, match=r"refused: .*aggregate.* -- nothing was done"):
        prepare(UpgradeRequest("agg", str(registry), text, "new.yaml", "savepoint"))
