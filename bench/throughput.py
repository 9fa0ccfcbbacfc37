"""Demo stream throughput with both Kafka sources vs two references, all in one run. Prints one JSON object.

On one topic, in one Spark session:
- raw consumer: a plain confluent-kafka consumer reading the whole topic (``rewind.proof.verify.read_records``),
  the reference every ratio is taken to;
- the demo stream, once per source: ``trigger(availableNow=True)`` over the whole topic through the
  real transform and sink (``build_query``, as ``rewind run`` wires it), with ``source.format: kafka``
  (Spark's own connector, the default) and with ``source.format: rewind_kafka`` (Rewind's Python Data
  Source), each run on its own checkpoint and its own fresh SQLite sink;
- rate reference: Spark's ``rate-micro-batch`` source (the ``rate`` source with a fixed number of
  rows per micro-batch, so it is never the bottleneck), shaped into the demo's output rows and
  written through the same ``foreachBatch`` writer and exactly-once SQLite sink as the demo stream,
  in micro-batches of the same size: Spark's own floor for this sink path, without Kafka, parsing or
  state. Measured once, after the last repetition.

Order, so that machine noise and the session's warm-up (the first query of a session starts the
Python workers and loads and compiles the code) fall on both sources alike: each of ``--repeat``
repetitions reads the topic with the raw consumer, then runs the two sources one after the other,
``kafka`` first in odd repetitions (1, 3, ...) and ``rewind_kafka`` first in even ones; the JSON's
``order`` lists it. A source's ``events_per_s`` is the median over its repetitions (the mean of two
with the default ``--repeat 2``), the raw consumer's likewise, and ``ratio_to_raw`` is their quotient;
``runs`` holds each repetition's figures.

Spark start-up is measured separately and counted in no Spark figure. The per-phase breakdown
sums Spark's ``lastProgress.durationMs`` over the batches (``addBatch`` holds the foreachBatch call,
split by the writer into collect = the Spark job, to_pandas+split, and the sink transaction) and the
state operators' figures. ``source_scans_per_record`` is the source's ``numInputRows`` over the
records in Kafka: 1.0 when every record is read and parsed once. ``cpu_s`` is CPU seconds by kind of
process (Spark's JVM, the Kafka broker's JVM, SeaweedFS, Spark's Python workers, this driver).

Everything but the JSON (Spark's JVM, services) goes to ``<work>/bench.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import add_conf_option, broker_description, conf_pairs, keep_stdout_for_json  # noqa: E402

PHASES = ("addBatch", "getBatch", "latestOffset", "queryPlanning", "walCommit", "commitOffsets",
          "triggerExecution")


def process_kind(argv: list[str], pid: int) -> str:
    """What a process is, from its command line: Spark's JVM and the Kafka broker's JVM are both
    ``java``, told apart by their main class (``org.apache.spark...`` vs ``kafka.Kafka``)."""
    if pid == os.getpid():
        return "bench_driver"
    exe = argv[0] if argv else ""
    if exe.endswith("java"):
        if "kafka.Kafka" in argv:
            return "kafka_broker"
        return "spark_jvm" if any(a.startswith("org.apache.spark") for a in argv) else "other_jvm"
    if "weed" in Path(exe).name:
        return "seaweedfs"
    return "python_workers" if any("pyspark" in a for a in argv[1:]) else "other"


def tree_cpu() -> dict[str, float]:
    """CPU seconds used so far by this process and its live descendants, by kind (Linux /proc)."""
    hz = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float, list[str]]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(pid)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / hz, [a for a in argv if a])
    mine, grew = {os.getpid()}, True
    while grew:
        new = {pid for pid, (ppid, _, _) in procs.items() if ppid in mine} - mine
        mine |= new
        grew = bool(new)
    out: dict[str, float] = defaultdict(float)
    for pid in mine:
        _, cpu, argv = procs[pid]
        out[process_kind(argv, pid)] += cpu
    return dict(out)


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per kind between two ``tree_cpu`` snapshots (processes that exited in between are lost)."""
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 1) for k in sorted(set(before) | set(after))
            if after.get(k, 0.0) - before.get(k, 0.0) >= 0.05}


def raw_consumer_eps(bootstrap: str, topic: str) -> tuple[int, float]:
    from rewind.proof.verify import read_records

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
    """The demo stream over the whole topic with ``spec``'s source, on its own checkpoint and sink."""
    from rewind.driver.runner import build_query

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
            "rows_out": sum(int(w["rows"]) for w in writer), "cpu_s": cpu, "breakdown": breakdown(progress, writer)}


def run_rate(spark: Any, spec: Any, rows: int, rows_per_batch: int) -> dict[str, Any]:
    """Spark's rate source -> the demo's output shape -> the same writer and sink, ``rows`` rows."""
    from pyspark.sql import functions as F

    from rewind.api.contract import load_transform
    from rewind.demo.transform import _shape
    from rewind.driver.runner import BatchWriter, open_sink

    transform = load_transform(spec)
    sink = open_sink(spec, transform)
    sink.create_tables()
    writer_phases: list[dict[str, Any]] = []
    writer = BatchWriter(sink, transform.split, checkpoint=spec.checkpoint, phases=writer_phases)
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


SOURCES = ("kafka", "rewind_kafka")


def source_order(rep: int, sources: tuple[str, ...] = SOURCES) -> tuple[str, ...]:
    """Repetition ``rep`` (0-based) runs the sources in this order: as given, then reversed, alternately."""
    return sources if rep % 2 == 0 else sources[::-1]


def source_entry(fmt: str, max_offsets: int) -> str:
    """The registry's ``source:`` value (YAML text) for one source format, as a stream would write it."""
    return f"{{format: {fmt}, options: {{startingOffsets: earliest, maxOffsetsPerTrigger: {max_offsets}}}}}"


def stream_name(fmt: str, rep: int) -> str:
    """One registry entry per source and repetition: its own checkpoint and its own fresh sink."""
    return f"{fmt}_r{rep + 1}"


def summary(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2,
                    help="repetitions; the sources' order alternates between them (default 2: both orders)")
    ap.add_argument("--sources", default=",".join(SOURCES),
                    help=f"comma-separated source formats to measure, in the first repetition's order "
                         f"(default {','.join(SOURCES)})")
    ap.add_argument("--skip-rate", action="store_true", help="leave out the rate-source reference")
    ap.add_argument("--event-log", help="write Spark's event log here (per-stage task times, for profiling)")
    add_conf_option(ap)
    args = ap.parse_args()
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    if not sources or set(sources) - set(SOURCES) or len(set(sources)) != len(sources) or args.repeat < 1:
        ap.error(f"--sources takes distinct names among {', '.join(SOURCES)}; --repeat must be >= 1")
    extra_conf = conf_pairs(ap, args.conf)
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-"))
    out = keep_stdout_for_json(work / "bench.log")
    load_start = round(os.getloadavg()[0], 2)  # other work on the machine skews every figure: say how much

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.spark_session import build_session
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    order = [list(source_order(rep, sources)) for rep in range(args.repeat)]
    raw_runs: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in sources}
    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        os.environ.update(info.env())
        topic = "bench-events"
        t0 = time.perf_counter()
        produce(info.kafka_bootstrap, ProduceSpec(topic=topic, count=args.events, partitions=args.partitions,
                                                  id_prefix="bench"))
        produce_s = time.perf_counter() - t0

        entries = [demo_stream(stream_name(fmt, rep), topic, work, max_offsets=args.max_offsets_per_trigger,
                               source=source_entry(fmt, args.max_offsets_per_trigger))
                   for rep in range(args.repeat) for fmt in sources]
        registry = load_registry(write_registry(work / "streams.yaml", *entries,
                                                demo_stream("rate", "unused", work)))
        t0 = time.perf_counter()
        conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": args.event_log} if args.event_log else {}
        conf.update(extra_conf)
        spark = build_session("rewind-bench", conf=conf)
        startup_s = time.perf_counter() - t0
        try:
            for rep, fmts in enumerate(order):
                cpu0 = tree_cpu()
                raw_n, raw_s = raw_consumer_eps(info.kafka_bootstrap, topic)
                raw_runs.append({"repetition": rep + 1, "records": raw_n, "seconds": round(raw_s, 2),
                                 "events_per_s": round(raw_n / raw_s), "cpu_s": cpu_delta(cpu0, tree_cpu())})
                for position, fmt in enumerate(fmts, 1):
                    run = run_demo(spark, registry.get(stream_name(fmt, rep)), info.kafka_bootstrap, raw_n)
                    runs[fmt].append({"repetition": rep + 1, "position": position, **run})
            rate = None if args.skip_rate else run_rate(spark, registry.get("rate"), args.events,
                                                        args.max_offsets_per_trigger)
        finally:
            spark.stop()
    raw_eps = summary(raw_runs, "events_per_s")
    result: dict[str, Any] = {
        "benchmark": "throughput", "events": args.events, "partitions": args.partitions,
        "max_offsets_per_trigger": args.max_offsets_per_trigger, "repeat": args.repeat, "order": order,
        "conf": extra_conf,
        "machine": {"cores": os.cpu_count(), "spark_master": os.environ.get("REWIND_SPARK_MASTER", "local[2]"),
                    "kafka": broker_description(),
                    "load_avg_1m_at_start": load_start, "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "produce_s": round(produce_s, 2), "spark_startup_s": round(startup_s, 2),
        "raw_consumer": {"records": raw_runs[0]["records"], "events_per_s": round(raw_eps), "runs": raw_runs},
        "rate_reference": None if rate is None else {**rate, "ratio_to_raw": round(rate["rows_per_s"] / raw_eps, 3)},
        "sources": {},
    }
    for fmt in sources:
        eps = summary(runs[fmt], "events_per_s")
        result["sources"][fmt] = {
            "format": fmt, "records": runs[fmt][0]["records"], "events_per_s": round(eps),
            "ratio_to_raw": round(eps / raw_eps, 3),
            "ratio_to_rate": round(eps / rate["rows_per_s"], 3) if rate else None,
            "runs": runs[fmt]}
    if set(SOURCES) <= set(sources):
        result["ratio_rewind_kafka_to_kafka"] = round(result["sources"]["rewind_kafka"]["events_per_s"]
                                                      / result["sources"]["kafka"]["events_per_s"], 3)
    result["log"] = str(work / "bench.log")
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
