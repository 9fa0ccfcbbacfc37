"""Spark's real-time mode (issue 38): a stateless stream written row by row, exactly once, through SIGKILLs.

The stream is the one `rewind stream new` writes (parse, validate, dead letters; Spark SQL functions only),
with `trigger: {real_time: "5 seconds"}`. A producer writes all along, one record in 97 malformed; the
driver is SIGKILLed three times while it writes, and relaunched each time. Then every Kafka offset must be
in exactly one of the rows table and the dead-letter table, every row's value the one its record carried.
The same stream is then switched to micro-batches and back by `rewind stream upgrade` (through savepoints),
stopped gracefully, proven, damaged and repaired by a replay. Refusals (a stateful plan, Python in the plan, an
aggregate table, a Delta sink, a switch into real-time mode it cannot run) are checked in fast forms; more source
partitions than task slots (one would never be read) stops the driver and is refused at its relaunch.
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
    """Records {"id", "value", "ts"} at about `rate`/s, one in 97 malformed; remembers each id's value. With
    `big_every`, one valid record in that many has an id of `big_size` characters (its ids in `big`)."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 400, big_every: int = 0, big_size: int = 3000) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.rate, self.sent, self.values = topic, rate, 0, {}
        self.big_every, self.big_size, self.big = big_every, big_size, set()
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
                    ident = f"r{n}"
                    if self.big_every and n % self.big_every == self.big_every // 2:
                        ident = f"r{n}-" + "x" * self.big_size
                        self.big.add(ident)
                    self.values[ident] = number
                    value = json.dumps({"id": ident, "value": number, "ts": "2026-11-29T12:00:00.000+00:00"}).encode()
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


class RealTimeStream:
    """The scaffold's stream (`rewind stream new`) switched to real-time mode as the refusal asks, and its driver
    processes (`launch`), each in a session of its own, logging to one file."""

    def __init__(self, tmp_path: Path, platform: Any, topic: str, monkeypatch: pytest.MonkeyPatch,
                 **env: str) -> None:
        self.name, self.topic, self.platform, self.cwd = "rtshop", topic, platform, tmp_path
        self.env = {**os.environ, **platform.env(), "REWIND_HOME": str(tmp_path / "home"),
                    "REWIND_REGISTRY": str(tmp_path / "streams.yaml"), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
                    "PYSPARK_PYTHON": sys.executable, "REWIND_LAG_PROBE_S": "0", **env}
        (tmp_path / "streams.yaml").write_text("streams:\n")
        new = subprocess.run([sys.executable, "-m", "rewind.cli", "stream", "new", self.name, "--dir", str(tmp_path),
                              "--topic", topic, "--partitions", "2"], env=self.env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        assert new.returncode == 0, new.stderr
        registry = yaml.safe_load((tmp_path / "streams.yaml").read_text())
        entry = registry["streams"][self.name]
        entry["trigger"] = {"real_time": "5 seconds"}
        monkeypatch.syspath_prepend(str(tmp_path))
        with pytest.raises(RealTimeRefused, match=r"maxOffsetsPerTrigger pace micro-batches"):
            check_stream(StreamSpec(name=self.name, **entry), load_transform(StreamSpec(name=self.name, **entry)))
        entry["source"]["options"].pop("maxOffsetsPerTrigger")  # as the refusal says
        (tmp_path / "streams.yaml").write_text(yaml.safe_dump(registry))
        self.db = tmp_path / "home" / "sink" / f"{self.name}.db"  # the scaffold's: ${REWIND_HOME}/sink/NAME.db
        self.log = tmp_path / "driver.log"

    def launch(self, log: Path | None = None) -> subprocess.Popen[bytes]:
        with open(log or self.log, "ab") as out:
            return subprocess.Popen([sys.executable, "-m", "rewind.cli", "stream", "run", self.name], env=self.env,
                                    cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def written(self) -> int:
        return _written(self.db, self.name)

    def finish(self, producer: Producer, driver: subprocess.Popen[bytes]) -> None:
        """Stop the producer, wait until its every record is written, stop the driver gracefully."""
        try:
            target = producer.sent + 400  # records sent after the last launch are written too
            _wait(lambda: self.written() >= target, 240, "rows after the last launch", self.log, driver)
            producer.stop.set()
            producer.join(30)
            _wait(lambda: self.written() >= producer.sent, 120, "every record written", self.log, driver)
            time.sleep(1.0)  # anything written twice would show up now
        finally:
            producer.stop.set()
            stop(driver)

    def verify(self, expect_ok: bool = True) -> dict[str, Any]:
        """`rewind verify NAME --json`: its summary (exit 0 when it passes, else not)."""
        done = subprocess.run([sys.executable, "-m", "rewind.cli", "verify", self.name, "--json"], env=self.env,
                              cwd=self.cwd, capture_output=True, text=True, timeout=300)
        assert (done.returncode == 0) == expect_ok, done.stdout[-3000:] + done.stderr[-3000:]
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    def check_exactly_once(self, producer: Producer) -> dict[str, Any]:
        """Every Kafka offset in exactly one of rows and dead letters, every value as sent; the ledger rows."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.platform.kafka_bootstrap, "group.id": "rt-check"})
        ends = {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1] for p in (0, 1)}
        consumer.close()
        with sqlite3.connect(self.db) as con:
            rows = con.execute(f"SELECT topic, partition, offset, id, value FROM {self.name}_rows").fetchall()
            dead = con.execute(f"SELECT topic, partition, offset, reason FROM {self.name}_dead_letter").fetchall()
            ledger = con.execute("SELECT epoch, spark_partition, lease_epoch, rows_written, committed_at "
                                 "FROM rewind_rtm_epochs").fetchall()
        coords = [(t, p, o) for t, p, o, *_ in rows] + [(t, p, o) for t, p, o, _ in dead]
        assert len(coords) == len(set(coords)), "an offset is in the sink twice"
        expected = {(self.topic, p, o) for p, end in ends.items() for o in range(end)}
        assert sum(ends.values()) == producer.sent
        assert set(coords) == expected, (f"missing {sorted(expected - set(coords))[:10]}, "
                                         f"unexpected {sorted(set(coords) - expected)[:10]}")
        assert {r[3]: r[4] for r in rows} == producer.values  # every value exact (a double, as sent)
        assert len(dead) == len([n for n in range(producer.sent) if n % 97 == 0])
        assert {d[3] for d in dead} == {"malformed"}
        print(json.dumps({"records": producer.sent, "rows": len(rows), "dead": len(dead), "ledger_rows": len(ledger)}))
        return {"ledger": ledger}


def stop(driver: Any) -> None:
    """A graceful stop, as `rewind stream stop` asks it: SIGTERM to the driver alone (its JVM stops with it)."""
    if driver.poll() is None:
        os.kill(driver.pid, signal.SIGTERM)
        try:
            driver.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(os.getpgid(driver.pid), signal.SIGKILL)


@pytest.mark.slow
def test_a_real_time_stream_loses_and_repeats_nothing_through_three_sigkills_and_two_switches(
        tmp_path: Path, platform: Any, new_topic: Any, monkeypatch: pytest.MonkeyPatch,
        airflow_env: dict[str, str]) -> None:
    """Three SIGKILLs mid-epoch under a continuous producer, the first seen and healed by the stream's
    supervisor DAG (its launch, watch, diagnosis, checkpoint recovery, relaunch and proof, as for any stream);
    then `rewind stream upgrade --mode savepoint` switches the stream to micro-batches (``trigger: 1 second``,
    ``maxOffsetsPerTrigger``) and back, each switch through the pre-flight (its batch run as a micro-batch on a
    copy of the newest savepoint), a savepoint, a restore and the proof of its first batches; a graceful stop
    closes the epoch it finds running. Every Kafka offset is then in exactly one of rows and dead letters,
    `rewind verify` passes, fails on one row lost, and rows lost from the sink come back through
    `rewind replay run` (a bounded batch, as for any stream)."""
    from rewind.registry import load_registry
    from rewind.supervision.process_control import stop_stream

    stream = RealTimeStream(tmp_path, platform, new_topic(2), monkeypatch)
    producer = Producer(platform.kafka_bootstrap, stream.topic)
    producer.start()

    def spec() -> StreamSpec:
        return load_registry(tmp_path / "streams.yaml", env=stream.env).get(stream.name)

    driver: Any = None
    try:
        driver = supervised_first_kill(stream, spec(), monkeypatch)
        for kill in range(1, 3):
            # an epoch closed by this driver (lease epoch kill + 1), then rows of the next one: killed mid-epoch
            _wait(lambda lease=kill + 1: _closed_by(stream.db, lease), 240, f"an epoch closed by driver {kill + 1}",
                  stream.log, driver)
            before = stream.written()
            _wait(lambda before=before: stream.written() >= before + 300, 60, f"rows of driver {kill + 1}",
                  stream.log, driver)
            os.killpg(os.getpgid(driver.pid), signal.SIGKILL)  # the producer never pauses
            driver.wait(30)
            driver = stream.launch()
        _wait(lambda: _closed_by(stream.db, 4), 240, "an epoch closed by driver 4", stream.log, driver)

        out = upgrade(stream, "1 second", pace=True)  # stops driver 4 with a savepoint, launches its successor
        assert "switched: savepoint" in out and "preflight_passed" in out, out
        assert spec().real_time is None and spec().source.options["maxOffsetsPerTrigger"] == "2000"
        before = stream.written()
        _wait(lambda: stream.written() >= before + 1000, 240, "rows in micro-batches", stream.log)
        upgrade(stream, {"real_time": "5 seconds"}, pace=False)
        assert spec().real_time is not None
        before = stream.written()
        _wait(lambda: stream.written() >= before + 1000, 240, "rows in real-time mode again", stream.log)
        producer.stop.set()
        producer.join(30)
        _wait(lambda: stream.written() >= producer.sent, 120, "every record written", stream.log)
        time.sleep(1.0)  # anything written twice would show up now
        # a graceful stop closes the epoch it finds running: it waits for the epoch's commit, then stops
        running = last_commit(stream) + 1
        asked = time.monotonic()
        stop_stream(spec(), timeout=60)
        assert last_commit(stream) >= running, f"epoch {running} was left open by the stop"
        assert time.monotonic() - asked < 20, "the stop waited past the epoch's close"
    finally:
        producer.stop.set()
        if driver is not None:
            stop(driver)
        stop_stream(spec(), timeout=60)
    ledger = stream.check_exactly_once(producer)["ledger"]
    assert {1, 2, 3, 4} <= {row[2] for row in ledger}, ledger  # every killed driver closed epochs under its lease
    # the proof works unchanged, bounded by the last closed epoch; and it fails when one row is lost
    proved = stream.verify()
    assert proved["ok"] is True and proved["records_in_range"] >= 10_000, proved
    assert proved["rows_ok"] == proved["records_in_range"] and proved["landed_missing"] == 0, proved
    with sqlite3.connect(stream.db) as con:
        lost = con.execute(f"DELETE FROM {stream.name}_rows WHERE id = (SELECT id FROM {stream.name}_rows WHERE "
                           "partition = 1 AND offset < 1000 ORDER BY offset DESC LIMIT 1)").rowcount
    assert lost == 1
    damaged = stream.verify(expect_ok=False)
    assert damaged["ok"] is False and damaged["records_missing"]["count"] == 1, damaged
    # a replay of a real-time stream runs as a bounded batch, as for any stream: rows lost from the sink come back
    with sqlite3.connect(stream.db) as con:
        lost = con.execute(f"DELETE FROM {stream.name}_rows WHERE partition = 0 AND offset < 300").rowcount
    assert lost > 250
    done = subprocess.run([sys.executable, "-m", "rewind.cli", "replay", "run", stream.name, "--from",
                           json.dumps({stream.topic: {"0": 0, "1": 0}}),
                           "--to", json.dumps({stream.topic: {"0": 300, "1": 1000}}),
                           "--no-s3", "--no-progress", "--json"], env=stream.env, cwd=stream.cwd, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stream.check_exactly_once(producer)
    assert stream.verify()["ok"] is True


class Adopted:
    """A driver the test did not start itself (the supervisor did), with what the test asks of a Popen."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        from rewind.runtime.processes import pid_alive

        if self.returncode is None and not pid_alive(self.pid):
            self.returncode = -1  # not its parent: the code is unknown, the process gone
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.1)
        return -1


def supervised_first_kill(stream: RealTimeStream, spec: StreamSpec, monkeypatch: pytest.MonkeyPatch) -> Adopted:
    """The stream's supervisor DAG (``dag.test()``: the tasks, trigger and launch Airflow runs) launches driver 1;
    it is SIGKILLed mid-epoch (after an epoch closed and 300 rows more) while the watch looks; the supervisor
    records the death, recovers the checkpoint, relaunches and proves. Driver 2, which it launched."""
    from rewind.control.status import read_status
    from rewind.paths import status_file
    from rewind.supervision.failures import read_failures
    from rewind_airflow.dags.factory import build_dags
    from tests.harness.dag_runs import states, watching

    for k, v in {**{k: v for k, v in stream.env.items() if os.environ.get(k) != v},
                 "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                 "AIRFLOW_CONN_REWIND_KAFKA": json.dumps({"conn_type": "generic",
                                                          "extra": {"bootstrap": stream.platform.kafka_bootstrap}})
                 }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(stream.cwd)
    dag = build_dags(str(stream.cwd / "streams.yaml"))[f"rewind_{stream.name}_supervisor"]
    log = Path(stream.env["REWIND_HOME"]) / "logs" / f"stream-{stream.name}.log"
    killed: dict[str, Any] = {}

    def killer() -> None:
        try:
            deadline = time.monotonic() + 300
            while not (_closed_by(stream.db, 1) and watching(dag.dag_id)):
                assert time.monotonic() < deadline, "driver 1 closed no epoch under a watching supervisor"
                time.sleep(0.2)
            before = stream.written()
            while stream.written() < before + 300:
                assert time.monotonic() < deadline, "driver 1 wrote no rows after its first epoch"
                time.sleep(0.1)
            st = read_status(status_file(spec))
            assert st is not None and st.state == "running"
            killed.update(pid=st.pid, at=time.time())
            os.killpg(os.getpgid(st.pid), signal.SIGKILL)  # spark-submit's group: the driver is its child
        except BaseException as exc:  # noqa: BLE001 - reported below
            killed["error"] = repr(exc)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    run = dag.test(run_conf={"chain": False, "watch_s": 300})
    thread.join(10)
    tasks = states(run)
    text = log.read_text() if log.exists() else "(no driver log)"
    assert "error" not in killed and "pid" in killed, f"{killed}; tasks {tasks}; driver log:\n{text[-3000:]}"
    assert (tasks["relaunch"], tasks["prove"]) == ("success", "success"), f"{tasks}; driver log:\n{text[-3000:]}"
    failures = read_failures(spec)["failures"]
    assert failures and failures[-1]["cause"] == "process_gone" and failures[-1]["at"] >= killed["at"], failures
    st = read_status(status_file(spec))
    assert st is not None and st.pid != killed["pid"] and st.state == "running", st
    return Adopted(st.pid)


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


def last_commit(stream: RealTimeStream) -> int:
    """The newest commits/N of the stream's active checkpoint (an upgrade restores into a new directory)."""
    from rewind.checkpoints.watermark import last_commit as newest
    from rewind.registry import load_registry

    found = newest(load_registry(stream.cwd / "streams.yaml", env=stream.env).get(stream.name))
    return -1 if found is None else found.batch


def test_a_switch_into_real_time_mode_it_cannot_run_is_refused_before_anything_stops(tmp_path: Path) -> None:
    from rewind.upgrade.rules import UpgradeRefused
    from rewind.upgrade.run import UpgradeRequest, prepare
    from tests.harness.registry_templates import demo_stream

    registry = tmp_path / "streams.yaml"
    registry.write_text("streams:\n" + demo_stream("agg", "agg-events", tmp_path))
    entry = yaml.safe_load(registry.read_text())["streams"]["agg"]
    entry["trigger"] = {"real_time": "5 seconds"}
    entry["source"]["options"].pop("maxOffsetsPerTrigger")
    text = yaml.safe_dump({"streams": {"agg": entry}})
    with pytest.raises(UpgradeRefused, match=r"refused: .*aggregate.* -- nothing was done"):
        prepare(UpgradeRequest("agg", str(registry), text, "new.yaml", "savepoint"))


@pytest.mark.slow
def test_a_partition_past_the_task_slots_stops_the_driver_and_refuses_its_relaunch(
        tmp_path: Path, platform: Any, new_topic: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the driver's local[2] a third partition would never be read (Spark says nothing). Added to the topic
    of a running stream: the driver's next look-up of the topic stops it, exit 3, one line naming the master to
    give. Relaunched on 3 partitions: refused the same way before it closes an epoch or writes a row."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    stream = RealTimeStream(tmp_path, platform, new_topic(2), monkeypatch, REWIND_LAG_PROBE_S="1")
    producer = Producer(platform.kafka_bootstrap, stream.topic, rate=100)
    producer.start()
    driver = stream.launch()
    try:
        _wait(lambda: stream.written() >= 100, 240, "rows from 2 partitions", stream.log, driver)
        admin = AdminClient({"bootstrap.servers": platform.kafka_bootstrap})
        assert admin.create_partitions([NewPartitions(stream.topic, 3)])[stream.topic].result(30) is None
        added = time.monotonic()
        assert driver.wait(120) == 3, stream.log.read_text()[-3000:]
        stopped_after = time.monotonic() - added
    finally:
        producer.stop.set()
        stop(driver)
    said = [line for line in stream.log.read_text().splitlines() if line.startswith("refused:")]
    assert len(said) == 1 and "has 3 Kafka partitions" in said[0] and "local[3]" in said[0], said
    assert "gained partitions while it ran" in said[0], said
    written, epochs = stream.written(), _epochs(stream.db)
    relaunch = stream.launch(tmp_path / "relaunch.log")
    assert relaunch.wait(180) == 3, (tmp_path / "relaunch.log").read_text()[-3000:]
    again = [line for line in (tmp_path / "relaunch.log").read_text().splitlines() if line.startswith("refused:")]
    assert len(again) == 1 and "has 3 Kafka partitions" in again[0] and "gained" not in again[0], again
    assert (stream.written(), _epochs(stream.db)) == (written, epochs)  # the relaunch wrote nothing
    print(json.dumps({"stopped_after_s": round(stopped_after, 1), "written": written, "epochs": epochs}))


def _epochs(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return int(con.execute("SELECT COUNT(*) FROM rewind_rtm_epochs").fetchone()[0])


@pytest.mark.slow
def test_a_paused_real_time_driver_is_fenced_when_it_resumes(tmp_path: Path, platform: Any, new_topic: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver paused mid-epoch past its lease (a long GC, a frozen VM) while another takes over: when it
    resumes, its writers' next transactions are refused by the fence and it exits; it closes no epoch more."""
    ttl = 8.0
    stream = RealTimeStream(tmp_path, platform, new_topic(2), monkeypatch, REWIND_LEASE_TTL_S=str(ttl),
                            REWIND_DRIVER_WAIT_S="180")
    producer = Producer(platform.kafka_bootstrap, stream.topic)
    producer.start()
    zombie = stream.launch(tmp_path / "zombie.log")
    successor = None
    try:
        _wait(lambda: _closed_by(stream.db, 1), 240, "an epoch closed by the first driver", tmp_path / "zombie.log",
              zombie)
        before = stream.written()
        _wait(lambda: stream.written() >= before + 300, 60, "rows of the first driver", tmp_path / "zombie.log", zombie)
        for attempt in range(20):  # mid-epoch, rows in its writers' buffers, preferably between two transactions:
            os.killpg(zombie.pid, signal.SIGSTOP)  # paused inside one, it keeps SQLite's only write lock
            deadline = time.monotonic() + 5  # delivered asynchronously, and a child forked meanwhile escapes it:
            while not (stopped := _group_stopped(zombie.pid)) and time.monotonic() < deadline:
                time.sleep(0.05)  # every process stopped before the lock is looked at, or another try
            holds_lock = _write_locked(stream.db) if stopped else True
            if not holds_lock or attempt == 19:
                break
            os.killpg(zombie.pid, signal.SIGCONT)
            time.sleep(0.013)
        assert stopped, f"the paused driver's processes: {_group_states(zombie.pid)}"
        paused_at = time.monotonic()
        successor = stream.launch()
        if holds_lock:  # the successor cannot even fence: it waits, naming the stopped holder, until it resumes
            _wait(lambda: "is locked by another writer" in stream.log.read_text(), 240,
                  "the successor's wait for the paused driver's write lock", stream.log, successor)
            assert "stopped" in stream.log.read_text()
        else:
            _wait(lambda: _closed_by(stream.db, 2), 240, "an epoch closed by the successor", stream.log, successor)
        assert time.monotonic() - paused_at >= ttl, "the successor took over before the lease lapsed"
        os.killpg(zombie.pid, signal.SIGCONT)
        resumed_at = time.time()
        _wait(lambda: _closed_by(stream.db, 2), 240, "an epoch closed by the successor", stream.log, successor)
        code = zombie.wait(120)
        text = (tmp_path / "zombie.log").read_text()
        assert code != 0, text[-3000:]
        assert "this driver is fenced" in text or "fenced: epoch 1 was taken over by epoch 2" in text, text[-3000:]
        stream.finish(producer, successor)
    finally:
        producer.stop.set()
        for driver in (zombie, successor):
            if driver is not None and driver.poll() is None:
                os.killpg(driver.pid, signal.SIGCONT)
                stop(driver)
    ledger = stream.check_exactly_once(producer)["ledger"]
    zombie_closed = [_utc_seconds(row[4]) for row in ledger if row[2] == 1]
    successor_first = min(_utc_seconds(row[4]) for row in ledger if row[2] == 2)
    assert zombie_closed and max(zombie_closed) < successor_first, ledger  # nothing closed once fenced
    if not holds_lock:  # and, when the successor could work while it slept, nothing once it resumed
        assert max(zombie_closed) < resumed_at, ledger


def _group_stopped(pgid: int) -> bool:
    """Whether every live process of process group ``pgid`` has stopped (a signal is delivered asynchronously;
    an exited child not yet reaped, a zombie, is not running either)."""
    import psutil

    states = _group_states(pgid)
    done = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    return bool(states) and all(state in done for state in states.values())


def _group_states(pgid: int) -> dict[str, str]:
    """``pid (name)`` -> state of every process of process group ``pgid``."""
    import psutil

    states = {}
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                states[f"{proc.pid} ({proc.info['name']})"] = proc.status()
        except (psutil.Error, OSError):
            continue
    return states


def _write_locked(db: Path) -> bool:
    """Whether another connection holds ``db``'s write lock now."""
    con = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        con.close()


def _utc_seconds(text: str) -> float:
    from datetime import UTC, datetime

    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
