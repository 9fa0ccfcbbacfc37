"""Replay throughput with both Kafka sources: records/s of `rewind replay run` (into-sink) over a
1,000,000-record range with ``source.format: kafka`` (Spark's own connector, the default) and with
``source.format: rewind_kafka`` (Rewind's Python Data Source), next to a raw confluent-kafka consumer
reading the same range in the same run, and their ratios to it; and beside them the reference a team
would write: the same transform as a plain PySpark batch job over exactly the same offsets, collected
once and written to SQLite in one idempotent transaction (``plain_batch``; ``--no-plain`` leaves it out),
run in the same session after each repetition's replays. Before the first repetition, one untimed run of
the plain job warms the session (Python workers, the Kafka connector's classes, planning and code
generation), so that neither side pays the session's first job (``warm_up_s``; ``--no-warm-up`` leaves it
out, as the results before 2026-11-29 did: then the first replay alone paid it).

Prints one JSON object (stdout holds only the JSON; Spark's and the services' output go to
``<work>/bench.log``). Each replay is what ``rewind replay run`` does (``rewind.replay.run.run_replay``):
it writes into its own fresh SQLite sink (one registry entry per source and repetition) through the
stream's own transform, in chunks, with every window it touches recomputed from all its records (the
transform over every retained record, ``rewind.replay.aggregates``; 1 s windows and a 1 s watermark
delay, so nearly every window is closed and recomputed). Every replay's plan is
made for its own stream and must cover exactly the same offsets as the others'.

Order: all replays share one Spark session, and the first one pays for the Python workers' start-up
and the first planning and compiling (its first chunk is slow; ``chunks_s`` shows it). So each of
``--repeat`` repetitions reads the range with the raw consumer, then replays with the two sources one
after the other, ``kafka`` first in odd repetitions (1, 3, ...) and ``rewind_kafka`` first in even
ones (the JSON's ``order``). A source's ``records_per_s`` is the median over its repetitions (the
mean of two with the default ``--repeat 2``), the raw consumer's likewise, and ``ratio_to_raw`` is
their quotient; ``runs`` holds each repetition's figures. Spark start-up is measured separately and
not counted. The DQ proof is left out of the throughput (``--prove`` runs it and reports its time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import broker_description, keep_stdout_for_json  # noqa: E402


def raw_read(bootstrap: str, ranges: dict[Any, tuple[int, int]]) -> tuple[int, float]:
    """A plain consumer over exactly the planned ranges: (records, seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rewind-bench-raw", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.max.bytes": 52428800})
    start = time.perf_counter()
    n = 0
    try:
        consumer.assign([TopicPartition(tp.topic, tp.partition, s) for tp, (s, e) in ranges.items() if e > s])
        pending = {(tp.topic, tp.partition): e for tp, (s, e) in ranges.items() if e > s}
        while pending:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                key = (msg.topic(), msg.partition())
                if key not in pending:
                    continue
                if msg.error() is not None:
                    pending.pop(key, None)  # EOF (or an error): nothing more to read there
                    continue
                if msg.offset() < pending[key]:
                    n += 1
                if msg.offset() >= pending[key] - 1:
                    pending.pop(key)
            if time.perf_counter() - start > 600:
                raise TimeoutError(f"raw read did not finish: {pending}")
    finally:
        consumer.close()
    return n, time.perf_counter() - start


SOURCES = ("kafka", "rewind_kafka")


def plain_batch(spark: Any, spec: Any, bootstrap: str, ranges: dict[Any, tuple[int, int]], db: Path
                ) -> dict[str, Any]:
    """The reference: the same transform as a plain PySpark batch job over exactly the same offsets (Spark's
    Kafka connector, ``read_committed``), collected once and written to SQLite in one idempotent transaction
    (``plain_job.SqliteWriter``, the careful user's writer of ``bench/overhead.py``); its records/s."""
    from plain_job import SqliteWriter

    from rewind.api.contract import load_transform
    from rewind.kafka.types import offsets_json_text

    transform = load_transform(spec)
    t0 = time.perf_counter()
    src = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", ",".join(sorted({tp.topic for tp in ranges})))
           .option("kafka.isolation.level", "read_committed")
           .option("startingOffsets", offsets_json_text({tp: s for tp, (s, _) in ranges.items()}))
           .option("endingOffsets", offsets_json_text({tp: e for tp, (_, e) in ranges.items()})).load())
    SqliteWriter(db, transform)(transform.build(src, spec), 0)
    seconds = time.perf_counter() - t0
    records = sum(e - s for s, e in ranges.values())
    import sqlite3

    with sqlite3.connect(db) as con:
        written = {t.name: con.execute(f'SELECT COUNT(*) FROM "{t.name}"').fetchone()[0] for t in transform.tables}
    return {"records": records, "seconds": round(seconds, 2), "records_per_s": round(records / seconds),
            "written": written}


def source_order(rep: int, sources: tuple[str, ...] = SOURCES) -> tuple[str, ...]:
    """Repetition ``rep`` (0-based) runs the sources in this order: as given, then reversed, alternately."""
    return sources if rep % 2 == 0 else sources[::-1]


def stream_name(fmt: str, rep: int) -> str:
    """One registry entry per source and repetition: each replay writes into its own fresh sink."""
    return f"{fmt}_r{rep + 1}"


def replay_once(spark: Any, spec: Any, plan: Any, bootstrap: str, run_dir: Path, chunk_offsets: int,
                prove: bool) -> dict[str, Any]:
    from rewind.replay.run import run_replay

    report = run_replay(spec, plan, bootstrap, spark=spark, run_dir=run_dir, replay_id="bench", progress=False,
                        chunk_offsets=chunk_offsets, prove=prove)
    replay_s = report.seconds["replay"]
    return {"records": report.counts["records_read"], "seconds": round(replay_s, 2),
            "records_per_s": round(report.counts["records_read"] / replay_s), "chunks": len(report.chunks),
            "chunks_s": [c["seconds"] for c in report.chunks],
            # per chunk: reading the records its scan counted (rewind.replay.scanned); the transform's job and
            # collect; the sink write (beside the next chunk's read)
            "chunk_phases_s": [{k: c.get(k) for k in ("count_s", "read_s", "write_s")} for c in report.chunks],
            "phases_s": {k: v for k, v in report.seconds.items() if k in ("read_transform_write", "aggregates")},
            "written": report.counts["written"],
            "windows": {k: report.windows[k] for k in ("touched", "recomputed", "written", "left_open")},
            "proof_s": report.seconds.get("proof"), "proof_ok": report.proof["ok"] if report.proof else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="records in the replayed range")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--chunk-offsets", type=int, default=200_000)
    ap.add_argument("--no-warm-up", action="store_true",
                    help="no untimed plain job before the first repetition (the first replay pays the warm-up)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="repetitions; the sources' order alternates between them (default 2: both orders)")
    ap.add_argument("--sources", default=",".join(SOURCES),
                    help=f"comma-separated source formats to measure, in the first repetition's order "
                         f"(default {','.join(SOURCES)})")
    ap.add_argument("--prove", action="store_true", help="also run the DQ proof over the range (timed apart)")
    ap.add_argument("--no-plain", action="store_true", help="leave out the plain PySpark batch job's reference")
    args = ap.parse_args()
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    if not sources or set(sources) - set(SOURCES) or len(set(sources)) != len(sources) or args.repeat < 1:
        ap.error(f"--sources takes distinct names among {', '.join(SOURCES)}; --repeat must be >= 1")
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-replay-"))
    out = keep_stdout_for_json(work / "bench.log")
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("REWIND_HOME", str(work / "home"))
    load_start = round(os.getloadavg()[0], 2)

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.registry import load_registry
    from rewind.replay.planner import plan_replay
    from rewind.replay.request import ReplayRequest
    from tests.harness.registry_templates import demo_stream, write_registry

    order = [list(source_order(rep, sources)) for rep in range(args.repeat)]
    raw_runs: list[dict[str, Any]] = []
    plain_runs: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in sources}
    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        os.environ.update(info.env())
        topic = "bench-replay"
        t0 = time.perf_counter()
        produce(info.kafka_bootstrap, ProduceSpec(topic=topic, count=args.records, partitions=args.partitions,
                                                  id_prefix="brp", malformed_every=1000, duplicate_every=500))
        produce_s = time.perf_counter() - t0
        formats = {stream_name(fmt, rep): fmt for rep in range(args.repeat) for fmt in sources}
        names = list(formats)
        reg = load_registry(write_registry(work / "streams.yaml", *(demo_stream(
            name, topic, work, window="1 second", watermark_delay="1 second", allowed_lateness="500 ms",
            source=f"{{format: {fmt}, options: {{startingOffsets: earliest}}}}") for name, fmt in formats.items())))
        t0 = time.perf_counter()
        plans = {name: plan_replay(ReplayRequest.parse(name, "earliest", "latest", registry=reg), reg,
                                   info.kafka_bootstrap) for name in names}
        plan_s = (time.perf_counter() - t0) / len(names)
        ranges = {p.tp: (p.start, p.end) for p in plans[names[0]].partitions}
        for name, plan in plans.items():  # the topic is not written to any more: every plan is the same range
            if {p.tp: (p.start, p.end) for p in plan.partitions} != ranges:
                raise RuntimeError(f"the plan of {name} differs from the plan of {names[0]}")

        from rewind.driver.spark_session import build_session

        t0 = time.perf_counter()
        # 2g: the plain batch job collects the whole range into the driver at once (1g ran out at 1M records)
        spark = build_session("rewind-bench-replay", conf={"spark.ui.showConsoleProgress": "false",
                                                           "spark.driver.memory": "2g"})
        startup_s = time.perf_counter() - t0
        warm_up_s = None
        try:
            if not args.no_warm_up:
                t0 = time.perf_counter()
                plain_batch(spark, reg.get(names[0]), info.kafka_bootstrap, ranges, work / "warm-up.db")
                warm_up_s = round(time.perf_counter() - t0, 2)
            for rep, fmts in enumerate(order):
                raw_n, raw_s = raw_read(info.kafka_bootstrap, ranges)
                raw_runs.append({"repetition": rep + 1, "records": raw_n, "seconds": round(raw_s, 2),
                                 "records_per_s": round(raw_n / raw_s)})
                for position, fmt in enumerate(fmts, 1):
                    name = stream_name(fmt, rep)
                    run = replay_once(spark, reg.get(name), plans[name], info.kafka_bootstrap, work / "run" / name,
                                      args.chunk_offsets, args.prove)
                    runs[fmt].append({"repetition": rep + 1, "position": position, **run})
                if not args.no_plain:  # after the replays, warm like them (the warm-up above)
                    plain_runs.append({"repetition": rep + 1, **plain_batch(
                        spark, reg.get(names[0]), info.kafka_bootstrap, ranges, work / f"plain-{rep + 1}.db")})
        finally:
            spark.stop()
    raw_eps = statistics.median(r["records_per_s"] for r in raw_runs)
    plan = plans[names[0]]
    result: dict[str, Any] = {
        "benchmark": "replay", "records": plan.total_records, "partitions": args.partitions,
        "chunk_offsets": args.chunk_offsets, "repeat": args.repeat, "order": order,
        "machine": {"cores": os.cpu_count(), "spark_master": os.environ.get("REWIND_SPARK_MASTER", "local[2]"),
                    "kafka": broker_description(),
                    "load_avg_1m_at_start": load_start, "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "produce_s": round(produce_s, 2), "plan_s": round(plan_s, 2), "spark_startup_s": round(startup_s, 2),
        "warm_up_s": warm_up_s,
        "raw_consumer": {"records": raw_runs[0]["records"], "records_per_s": round(raw_eps), "runs": raw_runs},
        "sources": {},
    }
    for fmt in sources:
        eps = statistics.median(r["records_per_s"] for r in runs[fmt])
        result["sources"][fmt] = {"format": fmt, "records": runs[fmt][0]["records"], "records_per_s": round(eps),
                                  "ratio_to_raw": round(eps / raw_eps, 4), "runs": runs[fmt]}
    if set(SOURCES) <= set(sources):
        result["ratio_rewind_kafka_to_kafka"] = round(result["sources"]["rewind_kafka"]["records_per_s"]
                                                      / result["sources"]["kafka"]["records_per_s"], 3)
    if plain_runs:
        plain_eps = statistics.median(r["records_per_s"] for r in plain_runs)
        result["plain_batch_job"] = {"records_per_s": round(plain_eps), "runs": plain_runs}
        for fmt in sources:
            result["sources"][fmt]["ratio_to_plain_batch_job"] = round(
                result["sources"][fmt]["records_per_s"] / plain_eps, 3)
    result["log"] = str(work / "bench.log")
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
