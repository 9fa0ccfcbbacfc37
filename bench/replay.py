"""Replay throughput: records/s of `rewind replay run` (into-sink) over a 1,000,000-record range,
next to a raw confluent-kafka consumer reading the same range in the same run, and their ratio.

Prints one JSON object (stdout holds only the JSON; Spark's and the services' output go to
``<work>/bench.log``). The replay writes into a fresh SQLite sink through the stream's own
transform, in chunks, with the windows recomputed from the sink's events (1 s windows and a
1 s watermark delay, so nearly every window is closed and recomputed). Spark start-up is
measured separately and not counted; the first chunk pays for Python worker start-up.
The DQ proof is left out of the throughput (``--prove`` runs it and reports its time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import keep_stdout_for_json  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000, help="records in the replayed range")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--chunk-offsets", type=int, default=200_000)
    ap.add_argument("--prove", action="store_true", help="also run the DQ proof over the range (timed apart)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-replay-"))
    out = keep_stdout_for_json(work / "bench.log")
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("REWIND_HOME", str(work / "home"))

    from rewind.producer import ProduceSpec, produce
    from rewind.registry import load_registry
    from rewind.registry_templates import demo_stream, write_registry
    from rewind.replay import run_replay
    from rewind.replay_plan import ReplayRequest, plan_replay
    from rewind.services import EmbeddedPlatform

    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        os.environ.update(info.env())
        topic = "bench-replay"
        t0 = time.perf_counter()
        produce(info.kafka_bootstrap, ProduceSpec(topic=topic, count=args.records, partitions=args.partitions,
                                                  id_prefix="brp", malformed_every=1000, duplicate_every=500))
        produce_s = time.perf_counter() - t0
        reg = load_registry(write_registry(work / "streams.yaml", demo_stream(
            "brp", topic, work, window="1 second", watermark_delay="1 second", allowed_lateness="500 ms")))
        spec = reg.get("brp")
        t0 = time.perf_counter()
        plan = plan_replay(ReplayRequest.parse("brp", "earliest", "latest", registry=reg), reg, info.kafka_bootstrap)
        plan_s = time.perf_counter() - t0
        ranges = {p.tp: (p.start, p.end) for p in plan.partitions}
        raw_n, raw_s = raw_read(info.kafka_bootstrap, ranges)

        from rewind.spark_session import build_session

        t0 = time.perf_counter()
        spark = build_session("rewind-bench-replay", conf={"spark.ui.showConsoleProgress": "false"})
        startup_s = time.perf_counter() - t0
        try:
            report = run_replay(spec, plan, info.kafka_bootstrap, spark=spark, run_dir=work / "run",
                                replay_id="bench", progress=False, chunk_offsets=args.chunk_offsets,
                                prove=args.prove)
        finally:
            spark.stop()
    replay_s = report.seconds["replay"]
    replay_eps = report.counts["records_read"] / replay_s
    result = {
        "benchmark": "replay", "records": plan.total_records, "partitions": args.partitions,
        "machine": {"cores": os.cpu_count(), "spark_master": os.environ.get("REWIND_SPARK_MASTER", "local[2]")},
        "produce_s": round(produce_s, 2), "plan_s": round(plan_s, 2),
        "raw_consumer": {"records": raw_n, "seconds": round(raw_s, 2), "records_per_s": round(raw_n / raw_s)},
        "replay": {"records": report.counts["records_read"], "seconds": round(replay_s, 2),
                   "records_per_s": round(replay_eps), "chunks": len(report.chunks),
                   "chunk_offsets": args.chunk_offsets, "spark_startup_s": round(startup_s, 2),
                   "phases_s": {k: v for k, v in report.seconds.items() if k in ("read_transform_write", "windows")},
                   "written": report.counts["written"], "windows": {k: report.windows[k] for k in (
                       "affected", "recomputed", "written", "left_open")},
                   "proof_s": report.seconds.get("proof"), "proof_ok": report.proof["ok"] if report.proof else None},
        "ratio_replay_to_raw": round(replay_eps / (raw_n / raw_s), 4),
        "log": str(work / "bench.log"),
    }
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
