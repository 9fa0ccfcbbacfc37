"""Latency of a Rewind stream in Spark's real-time mode against the same stream in micro-batches (issue 38).

    python bench/realtime.py [--seconds 40] [--rate 1000] [--runs rewind_rtm,rewind_mb,rewind_rtm_kafka,...]

The stream is the one ``rewind stream new`` writes (parse, validate, dead letters; Spark SQL functions only),
on a 2-partition topic with LogAppendTime, so each row's ``kafka_timestamp`` is its record's append time. A
producer sends ``--rate`` records/s for ``--seconds``; a poller reads the rows table every 5 ms and notes when
each row became visible. Latency = visible - appended, leaving out the first ``--warmup`` seconds and the last
one. Runs, each on a fresh topic and sink, one after the other:

- ``rewind_rtm``: ``rewind stream run`` with ``trigger: {real_time: "5 seconds"}`` (``rewind.driver.realtime``);
- ``rewind_mb``: the same entry with ``trigger: "0 seconds"`` (micro-batches back to back);
- ``rewind_rtm_kafka`` / ``rewind_mb_kafka``: the same two into a Kafka sink (``kafka://``); a ``read_committed``
  consumer of the rows topic notes when each row became visible to such a reader;
- ``spark_rtm_kafka``: Spark's own floor for a stateless plan in real-time mode, from ``bench/rtm_probe.py``
  (Kafka to Kafka, output append time - input append time; a projection, no parsing).

Prints one JSON object; the drivers' logs stay in the work folder it names.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import rtm_probe  # noqa: E402
from common import keep_stdout_for_json  # noqa: E402


def latency(values: list[float]) -> dict[str, float] | None:
    """rtm_probe's percentiles of ``values`` (ms), and how many there were; None for none."""
    import numpy as np

    return rtm_probe.percentiles(np.array(values, dtype="float64")) | {"rows": len(values)} if values else None


def scaffold_value(n: int) -> bytes:
    """A valid record of the scaffold's shape (``rewind stream new``)."""
    return json.dumps({"id": f"r{n}", "value": n * 1.5, "ts": "2026-11-29T12:00:00.000+00:00"}).encode()


class Poller(threading.Thread):
    """Reads new rows of ``table`` every 5 ms; ``seen`` holds (appended ms, visible ms) per row."""

    def __init__(self, db: Path, table: str) -> None:
        super().__init__(daemon=True)
        self.db, self.table, self.seen = db, table, []
        self.stop = threading.Event()

    def run(self) -> None:
        last = 0
        while not self.stop.is_set():
            time.sleep(0.005)
            if not self.db.exists():
                continue
            try:
                with sqlite3.connect(self.db, timeout=1) as con:
                    rows = con.execute(f'SELECT rowid, kafka_timestamp FROM "{self.table}" WHERE rowid > ?',
                                       (last,)).fetchall()
            except sqlite3.OperationalError:
                continue
            now = time.time() * 1000
            for rowid, appended in rows:
                last = max(last, rowid)
                at = datetime.strptime(appended, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp() * 1000
                self.seen.append((at, now))


class KafkaPoller(threading.Thread):
    """A ``read_committed`` consumer of ``topic``; ``seen`` holds (appended ms, visible ms) per row."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.seen = bootstrap, topic, []
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{self.topic}",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 5,
                             "topic.metadata.refresh.interval.ms": 1000})
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(500, timeout=0.05):
                    if msg.error() or msg.value() is None:
                        continue
                    now = time.time() * 1000
                    appended = json.loads(msg.value()).get("kafka_timestamp")
                    if appended:
                        self.seen.append((datetime.fromisoformat(appended).timestamp() * 1000, now))
        finally:
            consumer.close()


def rewind_run(kind: str, work: Path, bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    import yaml
    from confluent_kafka.admin import AdminClient, NewTopic

    home = work / kind
    home.mkdir()
    topic = f"rt-{kind}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config={"message.timestamp.type": "LogAppendTime"})])[topic].result()
    env = {**os.environ, "REWIND_HOME": str(home / "home"), "REWIND_REGISTRY": str(home / "streams.yaml"),
           "REWIND_KAFKA_BOOTSTRAP": bootstrap, "PYTHONPATH": f"{home}{os.pathsep}{ROOT}",
           "PYSPARK_PYTHON": sys.executable, "REWIND_LAG_PROBE_S": "0"}
    (home / "streams.yaml").write_text("streams:\n")
    subprocess.run([sys.executable, "-m", "rewind.cli", "stream", "new", "lat", "--dir", str(home), "--topic", topic,
                    "--partitions", "2"], env=env, cwd=home, check=True, capture_output=True, timeout=120)
    registry = yaml.safe_load((home / "streams.yaml").read_text())
    entry = registry["streams"]["lat"]
    entry["source"]["options"].pop("maxOffsetsPerTrigger", None)
    entry["trigger"] = {"real_time": "5 seconds"} if kind.startswith("rewind_rtm") else "0 seconds"
    into_kafka = kind.endswith("_kafka")
    if into_kafka:
        entry["sink"] = {"url": f"kafka://{bootstrap}/{kind}."}  # topic <run>.lat_rows: one per run
    (home / "streams.yaml").write_text(yaml.safe_dump(registry))
    poller: Poller | KafkaPoller = KafkaPoller(bootstrap, f"{kind}.lat_rows") if into_kafka else \
        Poller(home / "home" / "sink" / "lat.db", "lat_rows")
    poller.start()
    log = open(home / "driver.log", "ab")
    driver = subprocess.Popen([sys.executable, "-m", "rewind.cli", "stream", "run", "lat", "--bootstrap", bootstrap],
                              env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(args.start_s)  # the driver starts and plans before the producer sends
        sent, t0 = rtm_probe.produce(bootstrap, topic, args.rate, args.seconds, scaffold_value)
        time.sleep(7)  # the last records reach the sink
    finally:
        poller.stop.set()
        driver.terminate()
        driver.wait(120)
        log.close()
    since, until = (t0 + args.warmup) * 1000, (t0 + args.seconds - 1) * 1000
    kept = [seen - at for at, seen in poller.seen if since <= at < until]
    return {"run": kind, "sent": sent, "seen": len(poller.seen), "latency": latency(kept),
            "log": str(home / "driver.log")}


def spark_floor(work: Path, bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """bench/rtm_probe.py's Kafka-to-Kafka run in real-time mode: Spark's own floor, in this process."""
    import glob

    from confluent_kafka.admin import AdminClient
    from pyspark.sql import SparkSession

    jars = [*glob.glob(str(ROOT / ".jars" / "spark" / "*.jar")), *rtm_probe.build_writer(work)]
    spark = (SparkSession.builder.master("local[2]").appName("rtm-floor").config("spark.jars", ",".join(jars))
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        probe_args = argparse.Namespace(seconds=int(args.seconds), rate=args.rate, flush_ms=20, warmup=args.warmup)
        out = rtm_probe.run_one(spark, "rtm_kafka", bootstrap, AdminClient({"bootstrap.servers": bootstrap}), work,
                                probe_args)
    finally:
        spark.stop()
    return {**out, "run": "spark_rtm_kafka"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of each run left out at its start")
    ap.add_argument("--start-s", type=float, default=25.0, help="seconds a driver gets to start before records come")
    ap.add_argument("--runs", default="rewind_rtm,rewind_mb,rewind_rtm_kafka,rewind_mb_kafka,spark_rtm_kafka")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-realtime-"))
    out = keep_stdout_for_json(work / "bench.log")
    from rewind.embedded.kafka_broker import KafkaBroker

    broker = KafkaBroker(work / "kafka")
    broker.start()
    try:
        results = [spark_floor(work, broker.bootstrap, args) if kind == "spark_rtm_kafka"
                   else rewind_run(kind, work, broker.bootstrap, args) for kind in args.runs.split(",")]
    finally:
        broker.stop()
    json.dump({"benchmark": "realtime", "rate": args.rate, "seconds": args.seconds, "warmup_s": args.warmup,
               "partitions": 2, "master": "local[2]", "poll_ms": 5, "runs": results, "work": str(work)}, out, indent=1)
    out.write("\n")
    out.flush()


if __name__ == "__main__":
    main()
