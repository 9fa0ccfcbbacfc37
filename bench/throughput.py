"""Demo stream throughput vs a raw confluent-kafka consumer on the same topic, same run.

Prints one JSON object. The stream runs with trigger(availableNow=True) over the
whole topic through the real transform and exactly-once sink; Spark start-up is
measured separately and not counted in the stream's events/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewind.producer import ProduceSpec, produce  # noqa: E402
from rewind.registry import load_registry  # noqa: E402
from rewind.registry_templates import demo_stream, write_registry  # noqa: E402
from rewind.services import EmbeddedPlatform  # noqa: E402
from rewind.verify import read_records  # noqa: E402


def raw_consumer_eps(bootstrap: str, topic: str) -> tuple[int, float]:
    start = time.perf_counter()
    n = len(read_records(bootstrap, [topic], timeout=600))
    return n, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-"))
    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        os.environ.update(info.env())
        topic = "bench-events"
        t0 = time.perf_counter()
        produce(info.kafka_bootstrap, ProduceSpec(topic=topic, count=args.events, partitions=args.partitions,
                                                  id_prefix="bench"))
        produce_s = time.perf_counter() - t0
        raw_n, raw_s = raw_consumer_eps(info.kafka_bootstrap, topic)

        reg = write_registry(work / "streams.yaml", demo_stream("bench", topic, work,
                                                                max_offsets=args.max_offsets_per_trigger))
        spec = load_registry(reg).get("bench")
        from rewind.spark_session import build_session
        from rewind.stream_runner import build_query

        t0 = time.perf_counter()
        spark = build_session("rewind-bench")
        startup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        query = build_query(spark, spec, info.kafka_bootstrap, available_now=True)
        query.awaitTermination()
        stream_s = time.perf_counter() - t0
        batches = query.recentProgress
        scanned = sum(int(p.numInputRows) for p in batches)
        spark.stop()
    # numInputRows counts every scan of the source; the demo plan has one scan per output branch
    # (dead letters, deduplicated events, windows), so events/s is computed from Kafka's count.
    rows = raw_n
    result = {
        "benchmark": "throughput", "events": args.events, "partitions": args.partitions,
        "machine": {"cores": os.cpu_count(), "spark_master": os.environ.get("REWIND_SPARK_MASTER", "local[2]")},
        "produce_s": round(produce_s, 2),
        "raw_consumer": {"records": raw_n, "seconds": round(raw_s, 2), "events_per_s": round(raw_n / raw_s)},
        "demo_stream": {"records": rows, "seconds": round(stream_s, 2), "events_per_s": round(rows / stream_s),
                        "batches": len(batches), "spark_startup_s": round(startup_s, 2),
                        "source_rows_scanned": scanned, "source_scans_per_record": round(scanned / rows, 2)},
        "ratio_stream_to_raw": round((rows / stream_s) / (raw_n / raw_s), 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
