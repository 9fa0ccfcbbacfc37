"""The Spark job a platform team would write without Rewind, for ``bench/overhead.py`` to time beside Rewind.

The same plan as the Rewind stream: the stream's transform's ``build`` over Spark's Kafka source (what a team
would have written anyway), without the late-candidate branch Rewind's contract adds (a plain job has no dead
letters for late records), and a careful ``foreachBatch``: the batch's rows split by table with the
transform's own ``split``, written to SQLite in one transaction per batch, idempotent (a re-run batch is
recognised by its id in a ``batches`` table; insert-once tables ``INSERT OR IGNORE``, upserted ones ``INSERT
OR REPLACE``). ``--sink noop`` writes the same plan to Spark's ``noop`` sink instead: Spark's floor.

``--settings spark``: Spark's defaults (the HDFS-backed state store, no Arrow for ``toPandas``, the Kafka
consumer's default ``read_uncommitted``); ``--settings rewind``: the settings Rewind gives every stream
(``rewind.driver.spark_conf``: RocksDB with changelog checkpointing, Arrow, ``read_committed``). Both run
``local[2]`` with 2 shuffle partitions (the plan's state partitions), as the Rewind stream does.

usage: plain_job.py --bootstrap B --topic T --checkpoint DIR --db FILE --max-offsets N --stream-spec FILE
                    [--settings spark|rewind] [--sink sqlite|noop] [--transform MODULE:CLASS] [--continuous]
"""

from __future__ import annotations

import argparse
import importlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SQL_TYPES = {"bigint": "INTEGER", "int": "INTEGER", "double": "REAL", "boolean": "INTEGER"}


def spark_session(settings: str) -> Any:
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers' Python: this one (it has pyarrow)

    from rewind.driver.spark_conf import DEFAULTS, REQUIRED, master_defaults
    from rewind.runtime.jars import connector_jars

    builder = (SparkSession.builder.master("local[2]").appName(f"plain-{settings}")
               .config("spark.jars", ",".join(connector_jars()))
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
               .config("spark.sql.session.timeZone", "UTC"))
    if settings == "rewind":
        for key, value in {**DEFAULTS, **master_defaults("local[2]"), **REQUIRED}.items():
            if not key.startswith(("spark.metrics.", "spark.ui.")):
                builder = builder.config(key, value)
    return builder.getOrCreate()


class SqliteWriter:
    """A careful user's ``foreachBatch``: one transaction per batch, idempotent by batch id."""

    def __init__(self, db: Path, transform: Any) -> None:
        self.db, self.transform = str(db), transform
        with sqlite3.connect(self.db) as con:
            con.execute("CREATE TABLE IF NOT EXISTS batches (batch_id INTEGER PRIMARY KEY)")
            for t in transform.tables:
                cols = ", ".join(f'"{c.name}" {SQL_TYPES.get(c.type, "TEXT")}' for c in t.columns)
                key = ", ".join(f'"{k}"' for k in t.key)
                con.execute(f'CREATE TABLE IF NOT EXISTS "{t.name}" ({cols}, PRIMARY KEY ({key}))')

    @staticmethod
    def _values(frame: Any, columns: list[str]) -> list[tuple[Any, ...]]:
        import pandas as pd

        out = frame.reindex(columns=columns).astype(object)
        out = out.where(out.notna(), None)
        return [tuple(v.isoformat() if isinstance(v, pd.Timestamp) else str(v) if type(v).__name__ == "Decimal"
                      else v for v in row) for row in out.itertuples(index=False, name=None)]

    def __call__(self, df: Any, batch_id: int) -> None:
        frame = df.toPandas()
        tables = self.transform.split(frame, batch_id)
        con = sqlite3.connect(self.db, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
            if con.execute("SELECT 1 FROM batches WHERE batch_id = ?", (batch_id,)).fetchone():
                con.execute("ROLLBACK")  # a re-run of a committed batch: written already
                return
            for t in self.transform.tables:
                rows = tables.get(t.name)
                if rows is None or not len(rows):
                    continue
                names = [c.name for c in t.columns]
                verb = "INSERT OR IGNORE" if t.on_conflict == "ignore" else "INSERT OR REPLACE"
                marks = ", ".join("?" for _ in names)
                con.executemany(f'{verb} INTO "{t.name}" ({", ".join(chr(34) + n + chr(34) for n in names)}) '
                                f"VALUES ({marks})", self._values(rows, names))
            con.execute("INSERT INTO batches VALUES (?)", (batch_id,))
            con.execute("COMMIT")
        finally:
            con.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--max-offsets", type=int, required=True)
    ap.add_argument("--settings", choices=["spark", "rewind"], default="spark")
    ap.add_argument("--sink", choices=["sqlite", "noop"], default="sqlite")
    ap.add_argument("--transform", default="rewind.demo.transform:DemoTransform")
    ap.add_argument("--continuous", action="store_true",
                    help="trigger 0 (a batch as soon as the last ends) until SIGTERM, instead of availableNow")
    ap.add_argument("--stream-spec", required=True,
                    help="a registry file whose first stream gives build() its durations")
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F

    from rewind.api import LATE_CANDIDATE
    from rewind.registry import load_registry

    module, _, name = args.transform.partition(":")
    transform = getattr(importlib.import_module(module), name)()
    spec = next(iter(load_registry(args.stream_spec).streams.values()))
    spark = spark_session(args.settings)
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.max_offsets)))
    if args.settings == "rewind":
        reader = reader.option("kafka.isolation.level", "read_committed")
    plan = transform.build(reader.load(), spec)
    # the contract's late-candidate branch: a plain job has none. Filtered out: Spark keeps a constant-false
    # branch's scan in a streaming plan, but the demo's reads the exchange its other branches share
    if "kind" in plan.columns:
        plan = plan.filter(F.col("kind") != F.lit(LATE_CANDIDATE))
    writer = plan.writeStream.option("checkpointLocation", args.checkpoint)
    writer = writer.trigger(processingTime="0 seconds") if args.continuous else writer.trigger(availableNow=True)
    if args.sink == "noop":
        query = writer.format("noop").start()
    else:
        query = writer.foreachBatch(SqliteWriter(Path(args.db), transform)).start()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: query.stop())  # the bench ends a --continuous run so
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
