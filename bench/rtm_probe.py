"""Issue 38's feasibility probe: how fast a stateless plan's rows become visible in SQLite from Spark's real-time mode.

    python bench/rtm_probe.py [--seconds 40] [--rate 1000] [--flush-ms 20] [--runs rtm_sqlite,rtm_kafka,mb_sqlite]

Not Rewind's sink (no ledger, no fence): the question is only whether a JVM ``ForeachWriter`` can reach the
issue's p99 of 300 ms on 2 cores, where a Python one cannot (rows reach a Python writer in bulk near the end of
each real-time batch, docs/benchmarks.md "Spark's real-time mode"). One plan, Spark's JVM operators only: Kafka
-> (topic, partition, offset, timestamp, get_json_object(value, '$.event_id')), 2 partitions (one long-running
task each on ``local[2]``), topics with LogAppendTime. Runs, each on a fresh topic:

- ``rtm_sqlite``: real-time mode (``Trigger.RealTime``, 5 s) into ``bench/rtm/SqliteRowWriter.java`` (rows buffered
  and committed every ``--flush-ms``; latency = the commit's time - the record's Kafka append time);
- ``rtm_kafka``: Spark's own real-time floor for the same plan: into Spark's Kafka sink, an output topic with
  LogAppendTime (latency = output append time - input append time);
- ``mb_sqlite``: the same plan and writer in micro-batches, trigger 0.

The Java writer is compiled here with ``javac`` against PySpark's jars; sqlite-jdbc comes from Maven (``mvn
dependency:copy``, once, into ``.jars/probe``). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.54.1.0"
PLAN = ("topic", "partition", "offset", "timestamp", "get_json_object(CAST(value AS STRING), '$.event_id') AS event_id")


def build_writer(work: Path) -> list[str]:
    """The probe's jar and sqlite-jdbc's, for ``spark.jars``."""
    import pyspark

    probe = ROOT / ".jars" / "probe"
    if not list(probe.glob("sqlite-jdbc-*.jar")):
        subprocess.run(["mvn", "-B", "-q", "dependency:copy", f"-Dartifact={SQLITE_JDBC}",
                        f"-DoutputDirectory={probe}"], check=True, cwd=work)
    classes = work / "classes"
    spark_jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{spark_jars}/*",
                    str(ROOT / "bench" / "rtm" / "SqliteRowWriter.java")], check=True)
    jar = work / "rtm-probe.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    return [str(jar), *map(str, probe.glob("sqlite-jdbc-*.jar"))]


def percentiles(values: Any) -> dict[str, float]:
    import numpy as np

    return {f"p{q}_ms": round(float(np.percentile(values, q)), 1) for q in (50, 95, 99)} | {
        "max_ms": round(float(values.max()), 1)}


def probe_value(n: int) -> bytes:
    return json.dumps({"event_id": f"e{n}", "amount": n % 100}).encode()


def produce(bootstrap: str, topic: str, rate: int, seconds: float,
            value_of: Callable[[int], bytes] = probe_value) -> tuple[int, float]:
    """``rate`` records/s for ``seconds`` (record ``n``'s value: ``value_of(n)``, its key ``n``); (sent, start)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    t0, n = time.time(), 0
    while time.time() - t0 < seconds:
        while n < int((time.time() - t0) * rate):
            producer.produce(topic, key=str(n).encode(), value=value_of(n))
            n += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)
    return n, t0


def run_one(spark: Any, kind: str, bootstrap: str, admin: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from confluent_kafka.admin import NewTopic

    topic = f"rtm-{kind}"
    topics = [topic] + ([f"{topic}-out"] if kind == "rtm_kafka" else [])
    for t in topics:
        admin.create_topics([NewTopic(t, 2, 1, config={"message.timestamp.type": "LogAppendTime"})])[t].result()
    db = work / f"{kind}.db"
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE events(topic TEXT, part INT, off INT, kafka_ts_ms INT, event_id TEXT, "
                    "commit_id TEXT, PRIMARY KEY(topic, part, off))")
        con.execute("CREATE TABLE commits(commit_id TEXT PRIMARY KEY, at_ms INT, rows INT)")
    jvm = spark._jvm
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").load())
    if kind == "rtm_kafka":
        writer = (src.selectExpr("key", "CAST(unix_millis(timestamp) AS STRING) AS value")._jdf.writeStream()
                  .format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topics[1]))
    else:
        writer = src.selectExpr(*PLAN)._jdf.writeStream().foreach(
            jvm.rewind.bench.rtm.SqliteRowWriter(str(db), args.flush_ms))
    trigger = (jvm.org.apache.spark.sql.streaming.Trigger.RealTime("5 seconds") if kind.startswith("rtm")
               else jvm.org.apache.spark.sql.streaming.Trigger.ProcessingTime(0))
    query = (writer.outputMode("update" if kind.startswith("rtm") else "append")
             .option("checkpointLocation", str(work / f"ckpt-{kind}")).trigger(trigger).start())
    try:
        time.sleep(8)  # the query's first batch plans before the producer starts
        sent, t0 = produce(bootstrap, topic, args.rate, args.seconds)
        time.sleep(7)  # the last records reach the sink
    finally:
        query.stop()
    if kind == "rtm_kafka":
        pairs = read_output(bootstrap, topics[1], sent)
    else:
        with sqlite3.connect(db) as con:
            pairs = np.array(con.execute("SELECT e.kafka_ts_ms, c.at_ms FROM events e JOIN commits c USING(commit_id)")
                             .fetchall(), dtype="float64").reshape(-1, 2)
    since, until = (t0 + args.warmup) * 1000, (t0 + args.seconds - 1) * 1000
    keep = (pairs[:, 0] >= since) & (pairs[:, 0] < until)
    return {"run": kind, "sent": sent, "seen": int(len(pairs)), "measured": int(keep.sum()),
            "latency": percentiles(pairs[keep, 1] - pairs[keep, 0])}


def read_output(bootstrap: str, topic: str, expected: int) -> Any:
    import numpy as np
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{time.time()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    pairs, deadline = [], time.monotonic() + 60
    while len(pairs) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                pairs.append((int(msg.value()), msg.timestamp()[1]))
    consumer.close()
    return np.array(pairs, dtype="float64").reshape(-1, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--flush-ms", type=int, default=20)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of each run left out at its start")
    ap.add_argument("--runs", default="rtm_sqlite,rtm_kafka,mb_sqlite")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from confluent_kafka.admin import AdminClient
    from pyspark.sql import SparkSession

    from rewind.embedded.kafka_broker import KafkaBroker

    work = Path(tempfile.mkdtemp(prefix="rtm-probe-"))
    broker = KafkaBroker(work / "kafka")
    broker.start()
    spark = None
    try:
        jars = [*glob.glob(str(ROOT / ".jars" / "spark" / "*.jar")), *build_writer(work)]
        spark = (SparkSession.builder.master("local[2]").appName("rtm-probe").config("spark.jars", ",".join(jars))
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        results = [run_one(spark, kind, broker.bootstrap, admin, work, args) for kind in args.runs.split(",")]
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"benchmark": "rtm_probe", "rate": args.rate, "seconds": args.seconds, "flush_ms": args.flush_ms,
                      "partitions": 2, "master": "local[2]", "runs": results}, indent=1))


if __name__ == "__main__":
    main()
