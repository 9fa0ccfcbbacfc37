"""End-to-end latency of the demo stream, measured from the data, with Spark's own floor beside it.

    python bench/latency.py [--seconds 180] [--warmup 30] [--rates 1000,10000] [--partitions 3]
                            [--triggers 'default,0 seconds'] [--queries demo,floor,realtime]
                            [--realtime-batch '5 seconds'] [--realtime-partitions 2]
                            [--realtime-sink kafka|foreach] [--drain-timeout 120] [--conf KEY=VALUE ...]

For each rate, a steady producer (a thread with confluent-kafka's ``Producer`` at its default
settings, records spread evenly in time: record ``i`` is sent at ``start + i / rate``) writes demo
events for ``--seconds`` into a fresh topic created with ``message.timestamp.type=LogAppendTime``,
so each record's Kafka timestamp is the moment the broker appended it. One query at a time reads
that topic, started (and past its start-up) before the producer starts:

- ``demo``: the demo stream (``rewind.driver.runner.build_query``: Spark's connector, ``format:
  kafka``, the registry's source options, the real transform and the SQLite exactly-once sink; not
  ``run_stream``'s status listener and lag probe), once per trigger in ``--triggers`` (``default`` =
  the registry's ``trigger`` for ``demo`` in ``streams.yaml``). Latency per record = ``committed_at``
  of its batch in the sink's ledger (``rewind_batches``, joined on the row's ``batch_id``) minus the
  row's ``kafka_timestamp``. ``committed_at`` is stamped when the sink transaction starts (before
  the rows are inserted); the insert and commit that follow are in ``foreachBatch_mean_s.sink_write_s``.
- ``floor``: Spark's micro-batch floor, the same source options and trigger, a stateless query whose
  ``foreachBatch`` only collects each record's Kafka timestamp and notes the time (no transform,
  no sink): what any micro-batch query costs on this machine.
- ``realtime``: Spark's real-time mode (``trigger(realTime=...)``, pyspark >= 4.1) on a stateless
  query: Kafka source -> Spark's Kafka sink into a second LogAppendTime topic (latency = output
  append time - input append time), or with ``--realtime-sink foreach`` a Python ``foreach`` writer
  that notes when each row reaches it. Real-time mode needs one task slot per source partition
  (``--realtime-partitions``, default 2 for ``local[2]``). pyspark 4.2 allows it only stateless
  operators without Python and the Kafka, foreach, console and memory sinks (not ``foreachBatch``):
  the bench also tries to start the demo stream's own plan in it and records Spark's refusal
  (``realtime_mode.demo_stream``).

The first ``--warmup`` seconds of records (by Kafka timestamp) are not measured; a session warm-up
(the demo stream over 5,000 records) runs before the first measured query. Per query and rate:
p50/p95/p99/max of the latency and the count of records measured, a timeline (p50 and p99 per 10 s
of append time); the split of each record's latency into ``queue`` (append -> start of the
micro-batch that read it, from the progress ``timestamp``) and ``in_batch`` (batch start ->
commit); batches/s, the mean duration of each phase of a batch (the progress ``durationMs``) and
the state operators' times, over the batches with data in the measured window; ``drain_s``
(producer end -> every record read) and ``kept_up`` (see ``finish``). ``--conf`` adds Spark
settings to the session, to try a change without editing ``rewind/``.

Prints one JSON object on stdout; Spark's JVM and the services log to ``<work>/bench.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import add_conf_option, broker_description, conf_pairs, keep_stdout_for_json  # noqa: E402

PHASES = ("triggerExecution", "addBatch", "queryPlanning", "walCommit", "commitOffsets", "latestOffset",
          "getBatch")
QUANTILES = {"p50": 50, "p95": 95, "p99": 99}
TARGET_P99_S, TARGET_RATE = 1.0, 1000


# ---------------------------------------------------------------------------------------------- producer
class SteadyProducer(threading.Thread):
    """Demo events at ``rate`` per second for ``seconds``, evenly spread: record ``i`` is due at
    ``start + i / rate`` (the loop sleeps until the next one is due and sends what is due, so a
    late wake-up sends a few at once, never a burst of more than the time slept)."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seconds: float, prefix: str) -> None:
        super().__init__(name=f"producer-{topic}", daemon=True)
        self.bootstrap, self.topic, self.rate, self.seconds, self.prefix = bootstrap, topic, rate, seconds, prefix
        self.sent = 0
        self.errors: list[str] = []
        self.start_epoch = self.end_epoch = 0.0
        self.behind_s: list[float] = []  # how late each 100th record was sent, against its schedule

    def run(self) -> None:
        from confluent_kafka import Producer

        from rewind.demo.events import make_event

        producer = Producer({"bootstrap.servers": self.bootstrap})  # librdkafka's defaults (linger.ms 5)

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        total = int(self.rate * self.seconds)
        self.start_epoch = time.time()
        start = time.monotonic()
        i = 0
        while i < total:
            now = time.monotonic()
            due = min(total, int((now - start) * self.rate) + 1)
            while i < due:
                if i % 100 == 0:
                    self.behind_s.append(time.monotonic() - (start + i / self.rate))
                event = make_event(self.prefix, i, datetime.now(UTC))
                while True:
                    try:
                        producer.produce(self.topic, value=event.encode(), key=event.key.encode(),
                                         on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.01)
                i += 1
            producer.poll(0)
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.end_epoch = time.time()
        self.sent = i
        left = producer.flush(60)
        if left:
            self.errors.append(f"{left} records not delivered within 60 s")

    def report(self) -> dict[str, Any]:
        span = self.end_epoch - self.start_epoch
        behind = sorted(self.behind_s) or [0.0]
        return {"sent": self.sent, "seconds": round(span, 2), "rate": round(self.sent / span, 1) if span else 0.0,
                "behind_schedule_ms": {"p50": round(1000 * _q(behind, 50), 2), "p99": round(1000 * _q(behind, 99), 2),
                                       "max": round(1000 * behind[-1], 2)},
                "steady": behind[-1] < 1.0,  # never more than 1 s behind its schedule
                "delivery_errors": len(self.errors), "first_error": self.errors[0] if self.errors else None}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A fresh topic whose record timestamps are the broker's append time (LogAppendTime)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config={"message.timestamp.type": "LogAppendTime"})
    for fut in admin.create_topics([new]).values():
        fut.result(timeout=30)


def timestamp_type(bootstrap: str, topic: str) -> str:
    """The timestamp type of the topic's first record, as a consumer sees it."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex}",
                        "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(len(
            consumer.list_topics(topic, timeout=10).topics[topic].partitions))])
        msg = consumer.poll(10)
        if msg is None or msg.error():
            return "unknown"
        kind = msg.timestamp()[0]
        return {TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime", TIMESTAMP_CREATE_TIME: "CreateTime"}.get(kind, str(kind))
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------- figures
def _q(sorted_values: Any, pct: float) -> float:
    import numpy as np

    return float(np.percentile(sorted_values, pct)) if len(sorted_values) else float("nan")


def percentiles(values: Any) -> dict[str, float | None]:
    import numpy as np

    arr = np.asarray(values, dtype="float64")
    arr = np.sort(arr[np.isfinite(arr)])  # a record whose batch has no progress event has no split
    if not len(arr):
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    out: dict[str, float | None] = {k: round(_q(arr, v), 3) for k, v in QUANTILES.items()}
    out["max"], out["mean"] = round(float(arr[-1]), 3), round(float(arr.mean()), 3)
    return out


def timeline(kafka_s: Any, latency_s: Any, since: float, step: float = 10.0) -> list[list[float]]:
    """[seconds after the warm-up, records, p50, p99] per ``step`` seconds of append time: whether the
    latency is steady or grows (a query falling behind), and when a tail happened."""
    import numpy as np

    out: list[list[float]] = []
    if not len(kafka_s):
        return out
    slot = np.floor((kafka_s - since) / step).astype(int)
    for k in np.unique(slot):
        lat = np.sort(latency_s[slot == k])
        out.append([float(k * step), int(len(lat)), round(_q(lat, 50), 3), round(_q(lat, 99), 3)])
    return out


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def batch_figures(progress: list[dict[str, Any]], since: float, until: float, cap: int = 0) -> dict[str, Any]:
    """Batches/s and the mean ``durationMs`` per phase over the micro-batches with data that started
    in [since, until] (the measured window), each phase's share of ``triggerExecution``, the state
    operators' mean times per batch (updates, removals, commit), and how many batches were full at
    ``cap`` (``maxOffsetsPerTrigger``: a query whose every batch is full cannot work off a backlog)."""
    data = [p for p in progress if p.get("numInputRows", 0) > 0 and since <= _epoch(p["timestamp"]) <= until]
    if not data:
        return {"batches": 0}
    mean = {k: round(statistics.fmean(p["durationMs"].get(k, 0) for p in data) / 1000, 3) for k in PHASES}
    total = mean["triggerExecution"] or 1.0
    out: dict[str, Any] = {
        "batches": len(data), "batches_per_s": round(len(data) / (until - since), 3),
        "batch_duration_mean_s": mean["triggerExecution"],
        "rows_per_batch_mean": round(statistics.fmean(p["numInputRows"] for p in data)),
        "input_rows_per_s": round(sum(p["numInputRows"] for p in data) / (until - since)),
        "batches_at_max_offsets": sum(1 for p in data if p["numInputRows"] >= 0.99 * cap) if cap else None,
        "durationMs_mean_s": mean,
        "durationMs_share": {k: round(v / total, 3) for k, v in mean.items() if k != "triggerExecution"}}
    ops: dict[str, dict[str, list[float]]] = {}
    for p in data:
        for i, op in enumerate(p.get("stateOperators", [])):
            o = ops.setdefault(f"{i}:{op.get('operatorName', '?')}", {})
            for k in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
                o.setdefault(k.replace("TimeMs", "_s"), []).append(op.get(k, 0) / 1000)
    if ops:
        out["state_operators_mean_s"] = {name: {k: round(statistics.fmean(v), 3) for k, v in o.items()}
                                         for name, o in ops.items()}
        out["state_operators_total_mean_s"] = round(sum(statistics.fmean(v) for o in ops.values()
                                                        for v in o.values()), 3)
    return out


def split_figures(kafka_s: Any, commit_s: Any, start_s: Any) -> dict[str, Any]:
    """Each record's latency split at the start of its micro-batch: queue (append -> batch start: the
    trigger interval and the previous batch) and in_batch (batch start -> commit)."""
    return {"queue_s": percentiles(start_s - kafka_s), "in_batch_s": percentiles(commit_s - start_s)}


def wait_ready(query: Any, timeout: float = 300.0) -> float:
    """Until the query has started its sources (past 'Initializing ...'); returns the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if query.exception() is not None:
            raise RuntimeError(f"query failed while starting: {query.exception()}")
        if not query.isActive:
            raise RuntimeError("query stopped while starting")
        if not str(query.status.get("message", "")).startswith("Initializing"):
            return time.monotonic() - t0
        time.sleep(0.2)
    raise RuntimeError(f"query not started after {timeout} s: {query.status}")


def progress_of(query: Any) -> list[dict[str, Any]]:
    return [json.loads(p.json) for p in query.recentProgress]


def drain(query: Any, produced: int, timeout: float, rows_seen: Any,
          settle: bool = True) -> tuple[float | None, list[dict[str, Any]]]:
    """Wait until the query has read every produced record (``rows_seen()``) or ``timeout``; returns
    the seconds it took (None: not drained) and the progress list."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        if rows_seen() >= produced:
            done = time.monotonic() - t0
            until = time.monotonic() + (15 if settle else 0)  # the last batch's progress follows its commit
            while query.status.get("isTriggerActive") and time.monotonic() < until:
                time.sleep(0.05)
            return done, progress_of(query)
        time.sleep(0.25)
    return None, progress_of(query)


def max_offsets(spec: Any) -> int:
    return int(spec.source.options.get("maxOffsetsPerTrigger", 0))


def source_rows(query: Any) -> int:
    return sum(int(p.get("numInputRows", 0)) for p in progress_of(query))


# ---------------------------------------------------------------------------------------------- runs
class Run:
    """One query over one fresh topic while the steady producer writes to it."""

    def __init__(self, kind: str, trigger: str, rate: int, args: argparse.Namespace, work: Path, bootstrap: str):
        self.kind, self.trigger, self.rate, self.args, self.bootstrap = kind, trigger, rate, args, bootstrap
        label = trigger.replace(" ", "")
        self.name = f"{kind}_{rate}_{label}".replace(".", "_")
        self.topic = f"latency-{self.name}".replace("_", "-")
        self.work = work
        self.partitions = args.realtime_partitions if kind == "realtime" else args.partitions

    def produce_while(self, query: Any) -> tuple[SteadyProducer, float]:
        ready_s = wait_ready(query)
        producer = SteadyProducer(self.bootstrap, self.topic, self.rate, self.args.seconds, self.name)
        producer.start()
        producer.join()
        if producer.errors:
            raise RuntimeError(f"producer {self.topic}: {producer.errors[0]}")
        return producer, ready_s

    def base(self, producer: SteadyProducer, ready_s: float, drain_s: float | None, rows_read: int) -> dict[str, Any]:
        return {"query": self.kind, "trigger": self.trigger, "rate": self.rate, "topic": self.topic,
                "partitions": self.partitions,
                "timestamp_type": timestamp_type(self.bootstrap, self.topic), "producer": producer.report(),
                "query_ready_s": round(ready_s, 2), "rows_read": rows_read,
                "drain_s": None if drain_s is None else round(drain_s, 2),
                "kept_up": drain_s is not None}  # refined by finish() from the latency's trend


def finish(out: dict[str, Any]) -> dict[str, Any]:
    """``kept_up``: every record read within the drain timeout, the query reading at least 0.9x the
    production rate over the measured window, and the latency not growing over the run (the last
    full 10-s window's median at most 1.5x the first's plus 1 s). A query that falls behind has a
    backlog that grows with time: its figures depend on the run's length."""
    full = [w for w in out.get("timeline", []) if w[1] >= 0.5 * out["rate"] * 10]
    growing = len(full) >= 2 and full[-1][2] > 1.5 * full[0][2] + 1.0
    reading = out.get("progress", {}).get("input_rows_per_s", 0) >= 0.9 * out["rate"]
    out["kept_up"] = bool(out["kept_up"] and reading and not growing)
    return out


def run_demo(spark: Any, spec: Any, run: Run) -> dict[str, Any]:
    import numpy as np

    from rewind.api.tables import LEDGER_TABLE
    from rewind.driver.runner import build_query, open_sink

    phases: list[dict[str, Any]] = []
    query = build_query(spark, spec, run.bootstrap, phases=phases)
    try:
        producer, ready_s = run.produce_while(query)
        drain_s, progress = drain(query, producer.sent, run.args.drain_timeout, lambda: source_rows(query))
    finally:
        query.stop()
    since, until = producer.start_epoch + run.args.warmup, producer.end_epoch
    sink = open_sink(spec)
    events = sink.read_table("events")
    ledger = sink.read_table(LEDGER_TABLE)
    ledger = ledger[ledger["stream"] == spec.name]
    dead = len(sink.read_table("dead_letter"))
    sink.dispose()
    rows = events.merge(ledger[["batch_id", "committed_at"]], on="batch_id", how="left")
    kafka_s = rows["kafka_timestamp"].astype("int64").to_numpy() / 1e9
    keep = kafka_s >= since
    commit_s = rows["committed_at"].astype("int64").to_numpy()[keep] / 1e9
    produced_s = rows["event_time"].astype("int64").to_numpy()[keep] / 1e9
    kafka_s = kafka_s[keep]
    starts = {int(p["batchId"]): _epoch(p["timestamp"]) for p in progress}
    start_s = np.array([starts.get(int(b), np.nan) for b in rows["batch_id"].to_numpy()[keep]])
    measured_batches = {int(b) for b in rows["batch_id"].to_numpy()[keep]}
    writer = [w for w in phases if w["batch_id"] in measured_batches]
    out = run.base(producer, ready_s, drain_s, sum(int(p.get("numInputRows", 0)) for p in progress))
    out.update({
        "records_in_sink": len(events), "not_in_sink": producer.sent - len(events), "dead_letters": dead,
        "latency_is_lower_bound": producer.sent > len(events),  # records never committed are not measured
        "measured": int(keep.sum()),
        "latency_s": percentiles(commit_s - kafka_s),
        "timeline": timeline(kafka_s, commit_s - kafka_s, since),
        "latency_from_produce_s": percentiles(commit_s - produced_s),
        "produce_to_append_s": percentiles(kafka_s - produced_s),
        "split": split_figures(kafka_s, commit_s, start_s),
        "progress": batch_figures(progress, since, until, max_offsets(spec)),
        "foreachBatch_mean_s": {k: round(statistics.fmean(w[k] for w in writer), 3)
                                for k in ("collect_s", "to_pandas_split_s", "sink_write_s")} if writer else None,
    })
    return finish(out)


def run_floor(spark: Any, spec: Any, run: Run) -> dict[str, Any]:
    """Kafka source (the demo's options) -> foreachBatch that collects the Kafka timestamps and notes
    the time: the micro-batch engine's own latency, no transform, no sink."""
    import numpy as np

    from rewind.driver.runner import source_options

    batches: list[tuple[int, float, Any]] = []

    def record(df: Any, batch_id: int) -> None:
        table = df.selectExpr("unix_micros(timestamp) AS ts_us").toArrow()
        batches.append((batch_id, time.time(), table.column("ts_us").to_numpy()))

    src = spark.readStream.format("kafka").options(**source_options(spec, run.bootstrap)).load()
    query = (src.writeStream.foreachBatch(record).queryName(run.name)
             .option("checkpointLocation", spec.checkpoint)
             .trigger(processingTime=f"{spec.durations()['trigger'].total_seconds()} seconds").start())
    try:
        producer, ready_s = run.produce_while(query)
        drain_s, progress = drain(query, producer.sent, run.args.drain_timeout,
                                  lambda: sum(len(b[2]) for b in batches))
    finally:
        query.stop()
    since = producer.start_epoch + run.args.warmup
    starts = {int(p["batchId"]): _epoch(p["timestamp"]) for p in progress}
    kafka_s = np.concatenate([b[2] for b in batches]) / 1e6 if batches else np.array([])
    commit_s = np.concatenate([np.full(len(b[2]), b[1]) for b in batches]) if batches else np.array([])
    start_s = np.concatenate([np.full(len(b[2]), starts.get(b[0], np.nan)) for b in batches]) if batches \
        else np.array([])
    keep = kafka_s >= since
    out = run.base(producer, ready_s, drain_s, int(len(kafka_s)))
    out.update({"latency_is_lower_bound": producer.sent > len(kafka_s), "measured": int(keep.sum()),
                "latency_s": percentiles(commit_s[keep] - kafka_s[keep]),
                "timeline": timeline(kafka_s[keep], commit_s[keep] - kafka_s[keep], since),
                "split": split_figures(kafka_s[keep], commit_s[keep], start_s[keep]),
                "progress": batch_figures(progress, since, producer.end_epoch, max_offsets(spec))})
    return finish(out)


class ArrivalRecorder:
    """A Python ``foreach`` writer: notes when each row reaches it; writes them out when its task
    (one long-running real-time batch of one partition) closes."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.rows: list[str] = []
        self.part, self.epoch = partition_id, epoch_id
        return True

    def process(self, row: Any) -> None:
        self.rows.append(f"{row[0]},{time.time():.6f}\n")

    def close(self, error: Any) -> None:
        path = Path(self.out_dir) / f"{self.part}-{self.epoch}-{uuid.uuid4().hex}.csv"
        path.write_text("".join(self.rows))


def read_output_topic(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> Any:
    """(input record's Kafka timestamp, output record's append time) in seconds, for every record of
    the real-time query's output topic (its value is the input's timestamp in microseconds)."""
    import numpy as np
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    pairs: list[tuple[float, float]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(pairs) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 1.0):
                if msg.error() is None:
                    pairs.append((int(msg.value()) / 1e6, msg.timestamp()[1] / 1e3))
    finally:
        consumer.close()
    return np.array(pairs, dtype="float64").reshape(-1, 2)


def run_realtime(spark: Any, spec: Any, run: Run) -> dict[str, Any]:
    """A stateless query in Spark's real-time mode: the same Kafka source -> Spark's Kafka sink into
    an output topic that is also LogAppendTime (``--realtime-sink kafka``: latency = the output
    record's append time minus the input's), or -> a Python foreach writer that notes when each row
    reaches it (``foreach``). On refusal, the error text."""
    import numpy as np

    from rewind.driver.runner import source_options

    out_dir = run.work / f"arrivals-{run.name}"
    out_dir.mkdir()
    out_topic = f"{run.topic}-out"
    sink = run.args.realtime_sink
    if sink == "kafka":
        create_topic(run.bootstrap, out_topic, run.partitions)
    options = {k: v for k, v in source_options(spec, run.bootstrap).items() if k != "maxOffsetsPerTrigger"}
    query = None
    try:
        src = spark.readStream.format("kafka").options(**options).load()
        if sink == "kafka":
            ws = (src.selectExpr("key", "CAST(unix_micros(timestamp) AS STRING) AS value").writeStream
                  .format("kafka").option("kafka.bootstrap.servers", run.bootstrap).option("topic", out_topic))
        else:
            ws = src.selectExpr("unix_micros(timestamp) AS ts_us").writeStream.foreach(ArrivalRecorder(str(out_dir)))
        query = (ws.outputMode("update").queryName(run.name).option("checkpointLocation", spec.checkpoint)
                 .trigger(realTime=run.trigger).start())
        producer, ready_s = run.produce_while(query)
        drain_s, progress = drain(query, producer.sent, run.args.drain_timeout, lambda: source_rows(query),
                                  settle=False)  # a real-time batch is always active
        time.sleep(1.0)  # the writers of the last batch close after its progress event
    except Exception as exc:  # refused at start or failed while running: the reason is the result
        err = query.exception() if query is not None and query.exception() is not None else exc
        return {"query": run.kind, "trigger": f"realTime={run.trigger}", "sink": sink, "rate": run.rate,
                "status": "failed", "error": f"{type(err).__name__}: {str(err).strip()[:2000]}"}
    finally:
        if query is not None:
            query.stop()
    if sink == "kafka":
        arr = read_output_topic(run.bootstrap, out_topic, producer.sent)
    else:
        pairs = [line.split(",") for f in sorted(out_dir.glob("*.csv")) for line in f.read_text().splitlines()]
        arr = np.array(pairs, dtype="float64").reshape(-1, 2) if pairs else np.zeros((0, 2))
        arr[:, 0] /= 1e6
    kafka_s, seen_s = arr[:, 0], arr[:, 1]
    since = producer.start_epoch + run.args.warmup
    keep = kafka_s >= since
    out = run.base(producer, ready_s, drain_s, int(len(kafka_s)))
    out.update({"status": "ran", "trigger": f"realTime={run.trigger}", "sink": sink,
                "latency_is_lower_bound": producer.sent > len(kafka_s), "measured": int(keep.sum()),
                "latency_s": percentiles(seen_s[keep] - kafka_s[keep]),
                "timeline": timeline(kafka_s[keep], seen_s[keep] - kafka_s[keep], since),
                "progress": batch_figures(progress, since, producer.end_epoch)})
    return finish(out)


# ---------------------------------------------------------------------------------------------- main
def warm_up(spark: Any, spec: Any, bootstrap: str, records: int = 5000) -> float:
    """Not measured: the demo stream once over a few thousand records, so the first measured query
    does not pay the session's Python workers and JIT; returns its seconds."""
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import build_query

    t0 = time.perf_counter()
    produce(bootstrap, ProduceSpec(topic=spec.topics[0], count=records, partitions=3, id_prefix="warmup"))
    query = build_query(spark, spec, bootstrap, available_now=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"warm-up stream failed: {query.exception()}")
    return time.perf_counter() - t0


def realtime_demo_refusal(spark: Any, spec: Any, bootstrap: str, batch: str) -> dict[str, str]:
    """Try to start the demo stream's own plan (``DemoTransform.build``) in real-time mode, into a
    ``foreachBatch`` (as Rewind writes its sink) and into a ``foreach`` writer: what Spark answers."""
    from rewind.api.contract import load_transform
    from rewind.driver.runner import source_options

    transform = load_transform(spec)
    options = {k: v for k, v in source_options(spec, bootstrap).items() if k != "maxOffsetsPerTrigger"}
    out: dict[str, str] = {}
    for sink in ("foreachBatch", "foreach"):
        plan = transform.build(spark.readStream.format("kafka").options(**options).load(), spec)
        ws = (plan.writeStream.outputMode("update").option("checkpointLocation", f"{spec.checkpoint}-rt-{sink}")
              .trigger(realTime=batch))
        ws = ws.foreachBatch(lambda _df, _id: None) if sink == "foreachBatch" else ws.foreach(lambda _row: None)
        query = None
        try:
            query = ws.start()
            query.awaitTermination(20)
            err = query.exception()
            out[sink] = "started and ran for 20 s" if err is None else f"failed: {str(err).strip()[:1500]}"
        except Exception as exc:  # refused at start: the reason is the result
            out[sink] = f"refused: {type(exc).__name__}: {str(exc).strip()[:1500]}"
        finally:
            if query is not None:
                query.stop()
    return out


def realtime_api() -> dict[str, Any]:
    """What pyspark itself says about real-time mode: the trigger's keyword and the sinks it allows."""
    import inspect

    import pyspark
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    return {"pyspark": pyspark.__version__,
            "trigger_keyword": "realTime" in inspect.signature(DataStreamWriter.trigger).parameters,
            "allowed_sinks_pyspark_4_2": ["kafka", "foreach (ForeachWriter)", "console", "memory"],
            "output_mode": "update only", "min_batch": "spark.sql.streaming.realTimeMode.minBatchDuration (5 s)",
            "not_allowed": "foreachBatch (sink allowlist); any stateful operator and any Python plan node such as "
                           "mapInArrow (operator allowlist of spark-sql 4.2.0: projections, filters, generate, "
                           "expand, map-like object operators, broadcast joins, the watermark); a union of the "
                           "same source with itself; one long-running task per source partition, so a topic with "
                           "more partitions than task slots leaves the extra partitions unread"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=180.0, help="production time per query and rate (default 180)")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds of records not measured (default 30)")
    ap.add_argument("--rates", default="1000,10000", help="events/s, comma-separated (default 1000,10000)")
    ap.add_argument("--partitions", type=int, default=3, help="topic partitions (default 3, as the demo's)")
    ap.add_argument("--triggers", default="default,0 seconds",
                    help="micro-batch triggers, 'default' = the registry's (default: 'default,0 seconds')")
    ap.add_argument("--queries", default="demo,floor,realtime",
                    help="which queries: demo, floor, realtime (default all)")
    ap.add_argument("--realtime-batch", default="5 seconds",
                    help="real-time mode batch duration (checkpoint interval; Spark's minimum is 5 s)")
    ap.add_argument("--realtime-partitions", type=int, default=2,
                    help="partitions of the real-time query's topics (default 2: one long-running task per "
                         "partition must fit in local[2]'s two task slots, or the third partition is never read)")
    ap.add_argument("--realtime-sink", choices=("kafka", "foreach"), default="kafka",
                    help="real-time mode's sink: Spark's Kafka sink into a LogAppendTime topic (default), or a "
                         "Python foreach writer")
    add_conf_option(ap)
    ap.add_argument("--drain-timeout", type=float, default=120.0,
                    help="seconds to wait after the producer ends for the query to read everything (default 120)")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",") if r.strip()]
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    if set(queries) - {"demo", "floor", "realtime"} or not rates or args.warmup >= args.seconds:
        ap.error("--queries takes demo, floor, realtime; --warmup must be below --seconds")
    extra = conf_pairs(ap, args.conf)
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-"))
    out = keep_stdout_for_json(work / "bench.log")
    load_start = round(os.getloadavg()[0], 2)

    from rewind.driver.spark_session import build_session
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    demo = load_registry(ROOT / "streams.yaml").get("demo")
    default_trigger = demo.trigger
    triggers = [default_trigger if t.strip() == "default" else t.strip() for t in args.triggers.split(",") if t.strip()]
    max_offsets = demo.source.options.get("maxOffsetsPerTrigger", "20000")
    plan: list[tuple[int, str, str]] = []  # every query at one rate, then the next rate
    for rate in rates:
        plan += [(rate, kind, trig) for trig in triggers for kind in ("floor", "demo") if kind in queries]
        plan += [(rate, "realtime", args.realtime_batch)] if "realtime" in queries else []
    results: list[dict[str, Any]] = []
    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        os.environ.update(info.env())
        runs = [Run(kind, trig, rate, args, work, info.kafka_bootstrap) for rate, kind, trig in plan]
        source = (f"{{format: kafka, options: {{startingOffsets: earliest, maxOffsetsPerTrigger: {max_offsets}, "
                  f"failOnDataLoss: \"true\"}}}}")
        entries = [demo_stream(r.name, r.topic, work, source=source,
                               **({"trigger": r.trigger} if r.kind != "realtime" else {}),
                               window=demo.window, watermark_delay=demo.watermark_delay,
                               allowed_lateness=demo.allowed_lateness) for r in runs]
        entries.append(demo_stream("warmup", "latency-warmup", work, source=source))
        registry = load_registry(write_registry(work / "streams.yaml", *entries))
        t0 = time.perf_counter()
        spark = build_session("rewind-bench-latency",
                              conf={"spark.sql.streaming.numRecentProgressUpdates": 100000, **extra})
        startup_s = time.perf_counter() - t0
        try:
            warmup_s = warm_up(spark, registry.get("warmup"), info.kafka_bootstrap)
            demo_in_realtime = (realtime_demo_refusal(spark, registry.get("warmup"), info.kafka_bootstrap,
                                                      args.realtime_batch) if "realtime" in queries else None)
            for r in runs:
                create_topic(info.kafka_bootstrap, r.topic, r.partitions)
                spec = registry.get(r.name)
                print(f"latency: {r.name} ({datetime.now(UTC):%H:%M:%S} UTC, load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr, flush=True)
                fn = {"demo": run_demo, "floor": run_floor, "realtime": run_realtime}[r.kind]
                res = fn(spark, spec, r)
                res["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
                print(f"latency: {r.name}: {json.dumps(res)}", file=sys.stderr, flush=True)
                results.append(res)
        finally:
            spark.stop()

    by_rate: dict[str, list[dict[str, Any]]] = {str(rate): [r for r in results if r["rate"] == rate] for rate in rates}
    demo_1k = [r for r in by_rate.get(str(TARGET_RATE), [])
               if r["query"] == "demo" and r["latency_s"]["p99"] is not None]
    best = min(demo_1k, key=lambda r: r["latency_s"]["p99"]) if demo_1k else None
    result: dict[str, Any] = {
        "benchmark": "latency", "seconds": args.seconds, "warmup_s": args.warmup, "rates": rates,
        "partitions": args.partitions, "triggers": triggers, "registry_trigger": default_trigger,
        "max_offsets_per_trigger": int(max_offsets), "realtime_batch": args.realtime_batch,
        "latency_definition": "sink ledger committed_at of the row's batch (demo) / time noted in foreachBatch "
                              "(floor) / time the foreach writer received the row (realtime), minus the record's "
                              "Kafka timestamp = broker append time (topic message.timestamp.type=LogAppendTime)",
        "machine": {"cores": os.cpu_count(), "spark_master": os.environ.get("REWIND_SPARK_MASTER", "local[2]"),
                    "kafka": broker_description(), "load_avg_1m_at_start": load_start,
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "spark_startup_s": round(startup_s, 2), "session_warm_up_s": round(warmup_s, 2),
        "extra_spark_conf": extra,
        "realtime_mode": {**realtime_api(), "demo_stream": demo_in_realtime},
        "target": {"rate": TARGET_RATE, "p99_limit_s": TARGET_P99_S,
                   "best_demo_trigger": best["trigger"] if best else None,
                   "p99_s": best["latency_s"]["p99"] if best else None,
                   "met": bool(best and best["latency_s"]["p99"] <= TARGET_P99_S)},
        "by_rate": by_rate,
        "log": str(work / "bench.log"),
    }
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
