"""Spark's real-time mode (issue 38): a stateless stream written row by row, exactly once, through SIGKILLs.

The stream is the one `rewind stream new` writes (parse, validate, dead letters; Spark SQL functions only),
with `trigger: {real_time: "5 seconds"}`. A producer writes all along, one record in 97 malformed; the
driver is SIGKILLed three times while it writes, and relaunched each time. Then every Kafka offset must be
in exactly one of the rows table and the dead-letter table, every row's value the one its record carried.
Refusals (a stateful plan, Python in the plan, an aggregate table, a Delta sink) are checked in fast forms.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rewind.api.contract import load_transform
from rewind.driver.realtime import RealTimeRefused, check_plan, check_stream
from rewind.registry import StreamSpec

ROOT = Path(__file__).resolve().parents[1]


def spec_of(**over: Any) -> StreamSpec:
    entry = {"name": "rt", "topics": ["t"], "transform": "x.y:Z", "sink": {"url": "sqlite:////tmp/rt.db"},
             "checkpoint": "/tmp/rt-ck", "status_dir": "/tmp/rt-st", "trigger": {"real_time": "5 seconds"}, **over}
    return StreamSpec(**entry)


def test_refusals_name_the_cause_in_one_line(spark: Any) -> None:
    from pyspark.sql import functions as F

    from rewind.demo.transform import DemoTransform

    with pytest.raises(RealTimeRefused) as agg:
        check_stream(spec_of(), DemoTransform())  # it declares its window table an aggregate
    assert "aggregate table(s)" in str(agg.value) and "\n" not in str(agg.value)
    with pytest.raises(RealTimeRefused, match=r"delta:// has no real-time path"):
        check_stream(spec_of(sink={"url": "delta:///tmp/rt-delta"}), DemoTransform())

    stream = spark.readStream.format("rate").load()
    with pytest.raises(RealTimeRefused, match=r"stateful operator \(Aggregate\)"):
        check_plan(spec_of(), stream.groupBy("value").count())
    with pytest.raises(RealTimeRefused, match=r"stateful operator \(Deduplicate"):
        check_plan(spec_of(), stream.dropDuplicates(["value"]))
    double = F.udf(lambda v: v * 2, "long")
    with pytest.raises(RealTimeRefused, match=r"runs Python \(PythonUDF in Project"):
        check_plan(spec_of(), stream.select(double("value").alias("v")))
    check_plan(spec_of(), stream.select((F.col("value") * 2).alias("v")).where("v > 3"))  # JVM only: allowed


def test_trigger_is_a_duration_or_real_time() -> None:
    assert spec_of().real_time is not None and spec_of().durations()["trigger"].total_seconds() == 5
    assert spec_of(trigger="2 seconds").real_time is None
    with pytest.raises(ValueError, match=r"real_time: '5 seconds'"):
        spec_of(trigger={"realtime": "5 seconds"})


# --------------------------------------------------------------------------- slow: the real platform

class Producer(threading.Thread):
    """Records {"id", "value", "ts"} at about `rate`/s, one in 97 malformed; remembers each id's value."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 400) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.rate, self.sent, self.values = topic, rate, 0, {}
        self.stop = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.is_set():
            while self.sent < int((time.monotonic() - t0) * self.rate):
                n = self.sent
                if n % 97 == 0:
                    value = b"{not json"
                else:
                    number = n * 1.5 + 0.1
                    self.values[f"r{n}"] = number
                    value = json.dumps({"id": f"r{n}", "value": number, "ts": "2026-11-29T12:00:00.000+00:00"}).encode()
                self.producer.produce(self.topic, key=str(n).encode(), value=value)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(30)


def _written(db: Path, name: str) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        try:
            return sum(int(con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0])
                       for t in (f"{name}_rows", f"{name}_dead_letter"))
        except sqlite3.OperationalError:
            return 0


def _closed_by(db: Path, lease: int) -> bool:
    """Whether a driver of this lease epoch has closed a real-time epoch (its ledger rows)."""
    if not db.exists():
        return False
    with sqlite3.connect(db) as con:
        try:
            return bool(con.execute("SELECT COUNT(*) FROM rewind_rtm_epochs WHERE lease_epoch = ?", (lease,)
                                    ).fetchone()[0])
        except sqlite3.OperationalError:
            return False


def _wait(predicate: Any, timeout: float, what: str, log: Path, driver: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if driver is not None and driver.poll() is not None:
            pytest.fail(f"the driver exited ({driver.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)
    pytest.fail(f"{what} not within {timeout:.0f}s; driver log:\n{log.read_text()[-4000:]}")


@pytest.mark.slow
def test_a_real_time_stream_loses_and_repeats_nothing_through_three_sigkills(tmp_path: Path, platform: Any,
                                                                             new_topic: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    name, topic = "rtshop", new_topic(2)
    env = {**os.environ, **platform.env(), "REWIND_HOME": str(tmp_path / "home"),
           "REWIND_REGISTRY": str(tmp_path / "streams.yaml"), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
           "PYSPARK_PYTHON": sys.executable, "REWIND_LAG_PROBE_S": "0"}
    (tmp_path / "streams.yaml").write_text("streams:\n")
    new = subprocess.run([sys.executable, "-m", "rewind.cli", "stream", "new", name, "--dir", str(tmp_path), "--topic",
                          topic, "--partitions", "2"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert new.returncode == 0, new.stderr
    registry = yaml.safe_load((tmp_path / "streams.yaml").read_text())
    entry = registry["streams"][name]
    entry["trigger"] = {"real_time": "5 seconds"}
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RealTimeRefused, match=r"maxOffsetsPerTrigger pace micro-batches"):
        check_stream(StreamSpec(name=name, **entry), load_transform(StreamSpec(name=name, **entry)))
    entry["source"]["options"].pop("maxOffsetsPerTrigger")  # as the refusal says
    (tmp_path / "streams.yaml").write_text(yaml.safe_dump(registry))
    db = tmp_path / "home" / "sink" / f"{name}.db"  # the scaffold's sink: ${REWIND_HOME}/sink/NAME.db
    log = tmp_path / "driver.log"

    def launch() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen([sys.executable, "-m", "rewind.cli", "stream", "run", name], env=env, cwd=tmp_path,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    producer = Producer(platform.kafka_bootstrap, topic)
    producer.start()
    driver = launch()
    try:
        for kill in range(3):
            # an epoch closed by this driver (lease epoch kill + 1), then rows of the next one: killed mid-epoch
            _wait(lambda lease=kill + 1: _closed_by(db, lease), 240, f"an epoch closed by driver {kill + 1}", log,
                  driver)
            before = _written(db, name)
            _wait(lambda before=before: _written(db, name) >= before + 300, 60, f"rows of driver {kill + 1}", log,
                  driver)
            os.killpg(driver.pid, signal.SIGKILL)  # the producer never pauses
            driver.wait(30)
            driver = launch()
        _wait(lambda: _closed_by(db, 4), 240, "an epoch closed by driver 4", log, driver)
        target = producer.sent + 400  # records sent after the last launch are written too
        _wait(lambda: _written(db, name) >= target, 240, "rows after the last launch", log, driver)
        producer.stop.set()
        producer.join(30)
        _wait(lambda: _written(db, name) >= producer.sent, 120, "every record written", log, driver)
        time.sleep(1.0)  # anything written twice would show up now
    finally:
        producer.stop.set()
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGTERM)
            try:
                driver.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": platform.kafka_bootstrap, "group.id": "rt-check"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
    consumer.close()
    with sqlite3.connect(db) as con:
        rows = con.execute(f"SELECT topic, partition, offset, id, value FROM {name}_rows").fetchall()
        dead = con.execute(f"SELECT topic, partition, offset, reason FROM {name}_dead_letter").fetchall()
        ledger = con.execute("SELECT epoch, spark_partition, lease_epoch, rows_written FROM rewind_rtm_epochs"
                             ).fetchall()
    coords = [(t, p, o) for t, p, o, *_ in rows] + [(t, p, o) for t, p, o, _ in dead]
    assert len(coords) == len(set(coords)), "an offset is in the sink twice"
    expected = {(topic, p, o) for p, end in ends.items() for o in range(end)}
    assert sum(ends.values()) == producer.sent
    assert set(coords) == expected, (f"missing {sorted(expected - set(coords))[:10]}, "
                                     f"unexpected {sorted(set(coords) - expected)[:10]}")
    assert {r[3]: r[4] for r in rows} == producer.values  # every value exact (a double, as sent)
    assert len(dead) == len([n for n in range(producer.sent) if n % 97 == 0]) and {d[3] for d in dead} == {"malformed"}
    assert {lease for *_, lease, _ in ledger} == {1, 2, 3, 4}, ledger  # every driver closed epochs under its lease
    print(json.dumps({"records": producer.sent, "rows": len(rows), "dead": len(dead), "ledger_rows": len(ledger)}))
