"""Demo stream throughput vs two references measured in the same run. Prints one JSON object.

- raw consumer: a plain confluent-kafka consumer reading the whole topic (``rewind.verify.read_records``);
- rate into the same sink: Spark's ``rate-micro-batch`` source (the ``rate`` source with a fixed number
  of rows per micro-batch, so it is never the bottleneck), shaped into the demo's output rows and
  written through the same ``foreachBatch`` writer and exactly-once SQLite sink as the demo stream,
  in micro-batches of the same size: Spark's own floor for this sink path, without Kafka, parsing or
  state;
- the demo stream: ``trigger(availableNow=True)`` over the whole topic through the real transform
  and sink (``build_query``, as ``rewind run`` wires it).

Spark start-up is measured separately and counted in neither Spark figure. The per-phase breakdown
sums Spark's ``lastProgress.durationMs`` over the batches (``addBatch`` holds the foreachBatch call,
split by the writer into collect = the Spark job, to_pandas+split, and the sink transaction) and the
state operators' figures. ``source_scans_per_record`` is the source's ``numInputRows`` over the
records in Kafka: 1.0 when every record is read and parsed once.

Everything but the JSON (Spark's JVM, services) goes to ``<work>/bench.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import keep_stdout_for_json  # noqa: E402

PHASES = ("addBatch", "getBatch", "latestOffset", "queryPlanning", "walCommit", "commitOffsets",
          "triggerExecution")


def tree_cpu() -> dict[str, float]:
    """CPU seconds used so far by this process and its live descendants, by kind (Linux /proc)."""
    hz = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float, str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(pid)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / hz, cmd)
    mine, grew = {os.getpid()}, True
    while grew:
        new = {pid for pid, (ppid, _, _) in procs.items() if ppid in mine} - mine
        mine |= new
        grew = bool(new)
    out: dict[str, float] = defaultdict(float)
    for pid in mine:
        _, cpu, cmd = procs[pid]
        exe = cmd.split(" ")[0]
        kind = ("spark_jvm" if exe.endswith("java") else "tansu" if "tansu" in exe else "seaweedfs" if "weed" in exe
                else "python_workers" if "pyspark" in cmd else "bench_driver" if pid == os.getpid() else "other")
        out[kind] += cpu
    return dict(out)


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per kind between two ``tree_cpu`` snapshots (processes that exited in between are lost)."""
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 1) for k in sorted(set(before) | set(after))
            if after.get(k, 0.0) - before.get(k, 0.0) >= 0.05}


def raw_consumer_eps(bootstrap: str, topic: str) -> tuple[int, float]:
    from rewind.verify import read_records

    start = time.perf_counter()
    n = len(read_records(bootstrap, [topic], timeout=600))
    return n, time.perf_counter() - start


def _progress(query: Any) -> list[dict[str, Any]]:
    return [json.loads(p.json) for p in query.recentProgress]


def _end_epoch(progress: dict[str, Any]) -> float:
    """When a micro-batch ended: its trigger's start plus its triggerExecution time."""
    start = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return start + progress["durationMs"].get("triggerExecution", 0) / 1000


def breakdown(progress: list[dict[str, Any]], writer: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds per phase summed over the micro-batches that read data, and the state operators' share."""
    data = [p for p in progress if p.get("numInputRows", 0) > 0]
    phases = {k: round(sum(p["durationMs"].get(k, 0) for p in data) / 1000, 2) for k in PHASES}
    ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in data:
        for i, op in enumerate(p.get("stateOperators", [])):
            o = ops[f"{i}:{op.get('operatorName', '?')}"]
            for k in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
                o[k.replace("TimeMs", "_s")] += op.get(k, 0) / 1000
            o["rows_updated"] += op.get("numRowsUpdated", 0)
            o["rows_total_last"] = op.get("numRowsTotal", 0)
    out: dict[str, Any] = {"batches_with_data": len(data), "durationMs_s": phases}
    if writer:
        out["foreachBatch_s"] = {k: round(sum(w[k] for w in writer), 2)
                                 for k in ("collect_s", "to_pandas_split_s", "sink_write_s")}
    if ops:
        out["state_operators"] = {name: {k: round(v, 2) for k, v in o.items()} for name, o in ops.items()}
    return out


def run_demo(spark: Any, spec: Any, bootstrap: str, records: int) -> dict[str, Any]:
    from rewind.stream_runner import build_query

    writer: list[dict[str, Any]] = []
    cpu0 = tree_cpu()
    t0 = time.perf_counter()
    query = build_query(spark, spec, bootstrap, available_now=True, phases=writer)
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    cpu = cpu_delta(cpu0, tree_cpu())
    if query.exception() is not None:
        raise RuntimeError(f"demo stream failed: {query.exception()}")
    progress = _progress(query)
    scanned = sum(int(p.get("numInputRows", 0)) for p in progress)
    return {"records": records, "seconds": round(seconds, 2), "events_per_s": round(records / seconds),
            "batches": len([p for p in progress if p.get("numInputRows", 0) > 0]),
            "source_rows_scanned": scanned, "source_scans_per_record": round(scanned / records, 2),
            "cpu_s": cpu, "breakdown": breakdown(progress, writer)}


def run_rate(spark: Any, spec: Any, rows: int, rows_per_batch: int) -> dict[str, Any]:
    """Spark's rate source -> the demo's output shape -> the same writer and sink, ``rows`` rows."""
    from pyspark.sql import functions as F

    from rewind.demo.transform import _shape
    from rewind.stream_runner import BatchWriter, open_sink

    sink, tables_mod = open_sink(spec)
    sink.create_tables()
    writer_phases: list[dict[str, Any]] = []
    writer = BatchWriter(sink, tables_mod.split_batch, checkpoint=spec.checkpoint, phases=writer_phases)
    src = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
           .option("numPartitions", 2).option("startTimestamp", int(time.time() * 1000)).load())
    events = src.select(
        F.format_string("rate-%09d", F.col("value")).alias("event_id"),
        F.format_string("k%03d", F.col("value") % 16).alias("key"),
        ((F.col("value") * 37) % 1000 / 10).cast("double").alias("amount"),
        F.col("timestamp").alias("event_time"), F.lit("rate").alias("topic"),
        (F.col("value") % 4).cast("int").alias("partition"), F.col("value").alias("offset"),
        F.col("timestamp").alias("kafka_timestamp"))
    out = _shape(events, "event")
    cpu0 = tree_cpu()
    t0 = time.time()
    query = (out.writeStream.foreachBatch(writer).outputMode("append").queryName("rate-reference")
             .option("checkpointLocation", spec.checkpoint).start())
    try:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline and query.isActive:
            progress = _progress(query)
            if sum(int(p.get("numInputRows", 0)) for p in progress) >= rows:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"rate reference did not write {rows} rows: {query.exception()}")
    finally:
        query.stop()
    cpu = cpu_delta(cpu0, tree_cpu())
    done, used = 0, []
    for p in progress:
        if done >= rows:
            break
        done += int(p.get("numInputRows", 0))
        used.append(p)
    seconds = _end_epoch(used[-1]) - t0
    return {"rows": done, "seconds": round(seconds, 2), "rows_per_s": round(done / seconds),
            "batches": len([p for p in used if p.get("numInputRows", 0) > 0]), "cpu_s": cpu,
            "breakdown": breakdown(used, writer_phases[:len(used)])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    ap.add_argument("--skip-rate", action="store_true", help="leave out the rate-source reference")
    ap.add_argument("--event-log", help="write Spark's event log here (per-stage task times, for profiling)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-"))
    out = keep_stdout_for_json(work / "bench.log")
    load_start = round(os.getloadavg()[0], 2)  # other work on the machine skews every figure: say how much

    from rewind.producer import ProduceSpec, produce
    from rewind.registry import load_registry
    from rewind.registry_templates import demo_stream, write_registry
    from rewind.services import EmbeddedPlatform
    from rewind.spark_session import build_session

    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        os.environ.update(info.env())
        topic = "bench-events"
        t0 = time.perf_counter()
        produce(info.kafka_bootstrap, ProduceSpec(topic=topic, count=args.events, partitions=args.partitions,
                                                  id_prefix="bench"))
        produce_s = time.perf_counter() - t0
        cpu0 = tree_cpu()
        raw_n, raw_s = raw_consumer_eps(info.kafka_bootstrap, topic)
        raw_cpu = cpu_delta(cpu0, tree_cpu())

        reg = write_registry(work / "streams.yaml",
                             demo_stream("bench", topic, work, max_offsets=args.max_offsets_per_trigger),
                             demo_stream("rate", "unused", work))
        registry = load_registry(reg)
        t0 = time.perf_counter()
        conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": args.event_log} if args.event_log else None
        spark = build_session("rewind-bench", conf=conf)
        startup_s = time.perf_counter() - t0
        try:
            demo = run_demo(spark, registry.get("bench"), info.kafka_bootstrap, raw_n)
            rate = None if args.skip_rate else run_rate(spark, registry.get("rate"), args.events,
                                                        args.max_offsets_per_trigger)
        finally:
            spark.stop()
    raw_eps = raw_n / raw_s
    demo["spark_startup_s"] = round(startup_s, 2)
    result: dict[str, Any] = {
        "benchmark": "throughput", "events": args.events, "partitions": args.partitions,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "machine": {"cores": os.cpu_count(), "spark_master": os.environ.get("REWIND_SPARK_MASTER", "local[2]"),
                    "load_avg_1m_at_start": load_start, "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "produce_s": round(produce_s, 2),
        "raw_consumer": {"records": raw_n, "seconds": round(raw_s, 2), "events_per_s": round(raw_eps),
                         "cpu_s": raw_cpu},
        "rate_into_sink": rate,
        "demo_stream": demo,
        "ratio_stream_to_raw": round(demo["events_per_s"] / raw_eps, 3),
        "ratio_stream_to_rate": round(demo["events_per_s"] / rate["rows_per_s"], 3) if rate else None,
        "ratio_rate_to_raw": round(rate["rows_per_s"] / raw_eps, 3) if rate else None,
        "log": str(work / "bench.log"),
    }
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
