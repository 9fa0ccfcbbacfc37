"""Rows/s of each sink against a plain write of the same rows to the same system, in one run.

Prints one JSON object. The rows are the demo's event rows (``--rows``, default 200,000), written
in batches of ``--batch`` rows:

- **SQL sink** (``ExactlyOnceSqlSink`` on a SQLite file: one transaction per batch, the ledger,
  conflict handling) vs **plain SQLite**: ``executemany`` of the same values into a table with the
  same primary key, one commit per batch, no ledger, no conversion.
- **Kafka sink** (``TransactionalKafkaSink``: JSON rows, one transaction per batch with its ledger
  record) vs **plain producer**: the same JSON records through an idempotent (not transactional)
  confluent-kafka producer with the same ``linger.ms``, flushed per batch. The records are encoded
  before the clock starts, so the reference measures the Kafka write alone; the sink's figure
  includes its own conversion and encoding, which is its cost.
- **Delta sink** (``DeltaSink`` through delta-rs: a MERGE per batch under the stream's app id, then
  the ledger row) vs **plain Delta append**: ``write_deltalake(mode="append")`` of the same rows,
  already as Arrow, one commit per batch. The MERGE reads the keys already in the table, so its
  cost grows with the table; the append does not look.

Each measure runs ``--repeat`` times (fresh tables/topics); the median is reported with the ratio
sink / plain. Why a ratio: the machine is shared, so only figures from the same run compare.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import broker_description, keep_stdout_for_json  # noqa: E402


def demo_rows(n: int) -> Any:
    import pandas as pd

    t0 = pd.Timestamp("2026-11-24T10:00:00Z")
    return pd.DataFrame({
        "event_id": [f"e-{i:09d}" for i in range(n)], "key": [f"user-{i % 1000}" for i in range(n)],
        "amount": [i * 0.25 for i in range(n)],
        "event_time": pd.date_range(t0, periods=n, freq="ms"), "topic": "bench-events",
        "kafka_timestamp": pd.date_range(t0, periods=n, freq="ms"),
        "partition": pd.array([i % 3 for i in range(n)], dtype="Int32"),
        "offset": pd.array(range(n), dtype="Int64"), "batch_id": pd.array([0] * n, dtype="Int64"),
    })


def batches(frame: Any, size: int) -> list[Any]:
    return [frame.iloc[i:i + size] for i in range(0, len(frame), size)]


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def sql_pair(work: Path, parts: list[Any], tables: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from rewind.sink.sql import ExactlyOnceSqlSink

    spec = next(t for t in tables if t.name == "events")
    cols = list(spec.column_names)

    def sink_write() -> None:
        with ExactlyOnceSqlSink(f"sqlite:///{work}/sink-{uuid.uuid4().hex[:6]}.db", "bench", tables) as sink:
            for i, part in enumerate(parts):
                sink.write_batch(i, {"events": part})

    values = [[tuple(None if v is None else v for v in row) for row in
               part[cols].astype(object).where(part[cols].notna(), None).itertuples(index=False, name=None)]
              for part in parts]
    values = [[tuple(v.isoformat() if isinstance(v, dt.datetime) else v for v in row) for row in rows]
              for rows in values]

    def plain_write() -> None:
        con = sqlite3.connect(work / f"plain-{uuid.uuid4().hex[:6]}.db")
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(f"CREATE TABLE events ({', '.join(cols)}, PRIMARY KEY ({', '.join(spec.key)}))")
        sql = f"INSERT OR IGNORE INTO events VALUES ({', '.join('?' * len(cols))})"
        for rows in values:
            con.executemany(sql, rows)
            con.commit()
        con.close()

    return sink_write, plain_write


def kafka_pair(bootstrap: str, parts: list[Any], tables: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from confluent_kafka import Producer

    from rewind.sink.convert import prepare_table
    from rewind.sink.kafka import TransactionalKafkaSink
    from rewind.sink.kafka_codec import encode_table
    from rewind.sink.kafka_target import KafkaSinkTarget

    spec = next(t for t in tables if t.name == "events")

    def sink_write() -> None:
        sink = TransactionalKafkaSink(KafkaSinkTarget(bootstrap, f"bs{uuid.uuid4().hex[:6]}."), "bench", tables)
        try:
            sink.create_tables()
            for i, part in enumerate(parts):
                sink.write_batch(i, {"events": part})
        finally:
            sink.dispose()

    encoded = [[(k, v) for k, v in encode_table(prepare_table(spec, part, sqlite_text=False))] for part in parts]

    def plain_write() -> None:
        from rewind.kafka.topics import ensure_topic

        topic = f"bp{uuid.uuid4().hex[:6]}.events"
        ensure_topic(bootstrap, topic, 3)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        for records in encoded:
            for k, v in records:
                while True:
                    try:
                        p.produce(topic, v, k)
                        break
                    except BufferError:
                        p.poll(0.05)
            p.flush(60)

    return sink_write, plain_write


def delta_pair(work: Path, parts: list[Any], tables: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from deltalake import write_deltalake

    from rewind.sink.convert import prepare_table
    from rewind.sink.delta import DeltaSink
    from rewind.sink.delta_tables import arrow_table
    from rewind.sink.delta_target import DeltaSinkTarget

    spec = next(t for t in tables if t.name == "events")

    def sink_write() -> None:
        with DeltaSink(DeltaSinkTarget(str(work / f"lake-{uuid.uuid4().hex[:6]}")), "bench", tables) as sink:
            for i, part in enumerate(parts):
                sink.write_batch(i, {"events": part})

    arrow = [arrow_table(prepare_table(spec, part, sqlite_text=False)) for part in parts]

    def plain_write() -> None:
        path = str(work / f"plain-lake-{uuid.uuid4().hex[:6]}")
        for table in arrow:
            write_deltalake(path, table, mode="append")

    return sink_write, plain_write


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=20_000, help="rows per batch (the demo's maxOffsetsPerTrigger)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-sinks-"))
    out = keep_stdout_for_json(work / "bench.log")

    from rewind.demo.tables import TABLES
    from rewind.embedded.services import EmbeddedPlatform

    parts = batches(demo_rows(args.rows), args.batch)
    results: dict[str, Any] = {}
    with EmbeddedPlatform(work / "services") as plat:
        bootstrap = plat.info().kafka_bootstrap
        for name, (sink_write, plain_write) in {"sql_sqlite": sql_pair(work, parts, TABLES),
                                                 "kafka": kafka_pair(bootstrap, parts, TABLES),
                                                 "delta": delta_pair(work, parts, TABLES)}.items():
            sink_s, plain_s = timed(sink_write, args.repeat), timed(plain_write, args.repeat)
            sink_rate, plain_rate = args.rows / statistics.median(sink_s), args.rows / statistics.median(plain_s)
            results[name] = {"sink_rows_per_s": round(sink_rate), "plain_rows_per_s": round(plain_rate),
                             "ratio_sink_to_plain": round(sink_rate / plain_rate, 3),
                             "sink_seconds": [round(s, 2) for s in sink_s],
                             "plain_seconds": [round(s, 2) for s in plain_s]}
    doc = {"bench": "sinks", "broker": broker_description(), "cpus": os.cpu_count(), "rows": args.rows,
           "batch_rows": args.batch, "repeat": args.repeat, "sinks": results, "work": str(work)}
    print(json.dumps(doc, indent=1), file=out)
    out.flush()


if __name__ == "__main__":
    main()
