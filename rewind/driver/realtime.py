"""Spark's real-time mode for stateless streams (``trigger: {real_time: "5 seconds"}``, issue 38).

Why apart from the micro-batch path: the mode runs no ``foreachBatch`` (Rewind's whole batch writer) and
no Python in its plan on Spark 4.2 (its ``RealTimeModeAllowlist`` admits JVM operators and, as sinks,
Kafka, a ``ForeachWriter``, the console and memory; a Python ``ForeachWriter`` gets its rows in ~1 MB
pickled chunks, docs/benchmarks.md). So rows go from the executors' JVM into the SQL sink through
``io.rewind.rtm.JdbcRealTimeWriter``: small transactions within milliseconds, exactly once by each table's
key (a record re-read after a crash writes nothing new), the lease epoch's fence in every transaction, a
ledger row per (epoch, Spark partition) when the epoch closes. Into a Kafka sink through
``io.rewind.rtm.KafkaRealTimeWriter``: rows encoded in the plan (``rewind.sink.kafka_realtime``), small
Kafka transactions each with the partition's ledger record, records re-read after a crash skipped by their
source offsets, a transactional producer per (stream, partition) and the driver's fence record.

What cannot run this way is refused before anything is written, in one line: a Delta sink, a transform
that declares aggregates (not idempotent by key), a plan with a stateful operator or Python code
(``check_plan``), and more source partitions than the application has task slots (``check_slots``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import make_url

from rewind.api.contract import Transform
from rewind.api.routing import KIND
from rewind.api.tables import decimal_of
from rewind.errors import Refused
from rewind.registry import StreamSpec

__all__ = ["RealTimeRefused", "check_plan", "check_slots", "check_stream", "jdbc_url", "partitions_guard",
           "start_query", "writer_plan"]

log = logging.getLogger(__name__)

#: How often a writer commits its buffered rows (ms): each commit is one short transaction.
FLUSH_MS = 20
#: The same for a Kafka sink: a Kafka transaction costs a round trip to the transaction coordinator and a
#: commit marker in every partition it wrote, so it commits less often. A read_committed reader sees a record
#: about this long after the writer got it (docs/realtime.md).
KAFKA_FLUSH_MS = 50
#: A Kafka writer's transaction.timeout.ms: a transaction lives one flush, so a crashed writer's open one
#: (which holds read_committed readers back) ends after this even if no new driver starts.
KAFKA_TXN_TIMEOUT_MS = 15_000

#: Logical operators that keep state across records: the mode of Spark 4.2 runs none of them, and their
#: output is not idempotent by key.
STATEFUL = {"Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "FlatMapGroupsWithState",
            "TransformWithState", "TransformWithStateInPySpark", "Window", "Sort", "GlobalLimit", "LocalLimit",
            "Distinct", "Expand"}
#: Logical operators that run Python: the mode admits JVM operators only.
PYTHON = {"BatchEvalPython", "ArrowEvalPython", "MapInPandas", "MapInArrow", "PythonMapInArrow",
          "FlatMapGroupsInPandas", "FlatMapCoGroupsInPandas", "FlatMapGroupsInArrow", "PythonUDTF",
          "BatchEvalPythonUDTF", "ArrowEvalPythonUDTF", "FlatMapGroupsInPandasWithState"}


#: Source options of micro-batches that Spark refuses in real-time mode (lower case).
PACING = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "maxrecordspertrigger",
          "maxbytespertrigger"}


class RealTimeRefused(Refused, ValueError):
    """A stream real-time mode cannot run; the message names the stream, the cause and the fix."""


def check_stream(spec: StreamSpec, transform: Transform) -> None:
    """Before Spark starts: the sink and the transform's declarations allow the mode."""
    where = f"stream {spec.name}: trigger real_time"
    backend = sink_backend(spec.sink.url)
    if backend not in ("sqlite", "postgresql", "kafka"):
        raise RealTimeRefused(f"{where}: the sink {spec.sink.url.split('://')[0]}:// has no real-time path (only "
                              "sqlite, postgresql and kafka sinks are written row by row); use a processing-time "
                              "trigger")
    if spec.source.format != "kafka":
        raise RealTimeRefused(f"{where}: the source {spec.source.format!r} is Python; real-time mode reads with "
                              "Spark's own Kafka connector (source: {format: kafka})")
    paced = sorted(k for k in spec.source.options if k.lower() in PACING)
    if paced:
        raise RealTimeRefused(f"{where}: the source option(s) {', '.join(paced)} pace micro-batches and Spark "
                              "refuses them in real-time mode; remove them from the entry's source options")
    if transform.aggregates:
        names = ", ".join(a.table for a in transform.aggregates)
        raise RealTimeRefused(f"{where}: the aggregate table(s) {names} cannot be written idempotently row by row "
                              "(an aggregate needs state); use a processing-time trigger")


def sink_backend(url: str) -> str:
    try:
        return make_url(url).get_backend_name()
    except Exception:  # noqa: BLE001 - a delta:// or kafka:// URL is not SQLAlchemy's
        return url.split(":", 1)[0]


def check_plan(spec: StreamSpec, frame: Any) -> None:
    """Refuse the first operator of ``frame``'s analyzed plan that the mode cannot run, naming it (Spark
    optimizes a streaming plan only once the query starts; a Python UDF is an expression until then)."""
    where = f"stream {spec.name}: trigger real_time"
    stack = [frame._jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        name = str(node.nodeName())
        python = _python_expression(node)
        if python:
            name = f"{python} in {name}"
            raise RealTimeRefused(f"{where}: the plan runs Python ({name}: a Python UDF); real-time mode runs JVM "
                                  "operators only: write build() with Spark SQL functions (from_json, when, ...) or "
                                  "use a processing-time trigger")
        if name in STATEFUL:
            raise RealTimeRefused(f"{where}: the plan has a stateful operator ({name}); Spark 4.2's real-time mode "
                                  "runs stateless plans only: use a processing-time trigger")
        if name in PYTHON:
            raise RealTimeRefused(f"{where}: the plan runs Python ({name}: a Python UDF, pandas or Arrow function); "
                                  "real-time mode runs JVM operators only: write build() with Spark SQL functions "
                                  "(from_json, when, ...) or use a processing-time trigger")
        if name == "Join" and sum(1 for c in _children(node) if bool(c.isStreaming())) > 1:
            raise RealTimeRefused(f"{where}: the plan joins two streams (state); join a stream with a static table "
                                  "only, or use a processing-time trigger")
        stack.extend(_children(node))


def _python_expression(node: Any) -> str | None:
    """The name of a Python function among ``node``'s expressions (PythonUDF, ...), or None."""
    stack: list[Any] = []
    exprs = node.expressions()
    stack.extend(exprs.apply(i) for i in range(exprs.size()))
    while stack:
        expr = stack.pop()
        name = str(expr.nodeName())
        if name.startswith("Python"):
            return name
        stack.extend(_children(expr))
    return None


def _children(node: Any) -> list[Any]:
    kids = node.children()
    return [kids.apply(i) for i in range(kids.size())]


def jdbc_url(url: str) -> str:
    """The sink's SQLAlchemy URL as the JDBC driver takes it (the password in the URL, never logged)."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return f"jdbc:sqlite:{u.database}"
    from urllib.parse import quote, urlencode

    query = urlencode({k: v for k, v in (("user", u.username), ("password", u.password)) if v})
    host = f"{u.host or 'localhost'}:{u.port or 5432}"
    return f"jdbc:postgresql://{host}/{quote(u.database or '')}" + (f"?{query}" if query else "")


def writer_plan(sink: Any, transform: Transform) -> str:
    """The writer's plan (``JdbcRealTimeWriter``), one line per row kind: kind, physical table, the SQL sink's
    own idempotent insert (``with_conflict_rule``: the same rule for an existing key as a micro-batch's),
    compiled with positional parameters, the columns those take, decimal scales. A row's ``kind`` is its
    table's name or a key of ``transform.kinds``."""
    from rewind.sink.sql_realtime import positional_insert  # lazy: SQLAlchemy, only here

    kinds: dict[str, str] = {name: name for name in sink.specs}
    kinds.update({str(k): str(v) for k, v in transform.kinds.items()})
    lines = []
    for kind, name in kinds.items():
        spec = sink.specs[name]
        sql, columns = positional_insert(sink.dialect, spec, sink.table_prefix)
        scales = [f"{c.name}:{exact[1]}" for c in spec.columns if (exact := decimal_of(c.type))]
        lines.append("\t".join([kind, sink.table_name(name), sql, ",".join(columns), ",".join(scales)]))
    return "\n".join(lines)


def check_slots(spark: Any, spec: StreamSpec, bootstrap: str) -> int:
    """Refuse the stream when its source's partitions cannot all run at once in the application's task slots
    (``rewind.driver.realtime_slots``: such a partition is never read, and Spark says nothing); the number of
    partitions."""
    from rewind.driver.realtime_slots import slots_refusal  # lazy: only real-time streams

    partitions = source_partitions(spec, bootstrap)
    refusal = slots_refusal(spec.name, spark.sparkContext.master, partitions, slots_of(spark))
    if refusal:
        raise RealTimeRefused(refusal)
    return partitions


def slots_of(spark: Any) -> int | None:
    """The tasks the session's application runs at once (``rewind.driver.realtime_slots``), None if unknown."""
    from rewind.driver.realtime_slots import task_slots  # lazy: only real-time streams

    sc = spark.sparkContext
    cores = int(sc._jvm.java.lang.Runtime.getRuntime().availableProcessors())  # what Spark's local[*] takes
    return task_slots(sc.master, dict(sc.getConf().getAll()), cores)


def partitions_guard(spark: Any, spec: StreamSpec, stop: threading.Event,
                     said: list[str]) -> Callable[[int], None] | None:
    """For the lag probe of a running real-time stream: a partition added to its topics past the task slots
    would never be read, so the first look-up that counts more stops the driver (``stop``) with the refusal
    in ``said``, logged at once; None when the slots are unknown."""
    from rewind.driver.realtime_slots import slots_refusal  # lazy: only real-time streams

    slots, master = slots_of(spark), spark.sparkContext.master
    if slots is None:
        return None

    def check(partitions: int) -> None:
        refusal = slots_refusal(spec.name, master, partitions, slots)
        if refusal and not said:
            said.append(f"{refusal} (the topics gained partitions while it ran)")
            log.error("%s; stopping the stream", said[0])
            stop.set()

    return check


def start_query(spark: Any, spec: StreamSpec, transform: Transform, sink: Any, frame: Any, checkpoint: str,
                lease_epoch: int, partitions: int) -> Any:
    """Start ``frame`` in real-time mode into the SQL sink through the JVM writer; the StreamingQuery.
    ``partitions``: the source's, as ``check_slots`` counted them."""
    from pyspark.sql.streaming.query import StreamingQuery

    if KIND not in frame.columns:
        raise RealTimeRefused(f"stream {spec.name}: build() output has no {KIND!r} column to route rows by")
    jvm = spark._jvm
    if sink_backend(spec.sink.url) == "kafka":
        return _start_kafka(spark, spec, transform, sink, frame, checkpoint, lease_epoch, partitions)
    from rewind.sink.sql_fence import FENCE_TABLE  # lazy: SQLAlchemy's metadata, only here
    from rewind.sink.sql_realtime import create_ledger  # lazy: as above

    writer = jvm.io.rewind.rtm.JdbcRealTimeWriter(
        jdbc_url(spec.sink.url), spec.name, int(lease_epoch), sink.table_prefix + FENCE_TABLE, create_ledger(sink),
        writer_plan(sink, transform), FLUSH_MS)
    interval = f"{int(spec.durations()['trigger'].total_seconds() * 1000)} milliseconds"
    jquery = (frame._jdf.writeStream().foreach(writer).outputMode("update").queryName(spec.name)
              .option("checkpointLocation", checkpoint)
              .trigger(jvm.org.apache.spark.sql.streaming.Trigger.RealTime(interval)).start())
    return StreamingQuery(jquery)


def _start_kafka(spark: Any, spec: StreamSpec, transform: Transform, sink: Any, frame: Any, checkpoint: str,
                 lease_epoch: int, partitions: int) -> Any:
    """``start_query`` into a Kafka sink (``io.rewind.rtm.KafkaRealTimeWriter``): the plan encodes each row's
    record, the driver writes its fence and starts every partition's producer once, then the query starts."""
    from pyspark.sql.streaming.query import StreamingQuery

    from rewind.sink import kafka_realtime as krt  # lazy: confluent-kafka, only for Kafka sinks

    missing = [c for c in ("topic", "partition", "offset") if c not in frame.columns]
    if missing:
        raise RealTimeRefused(f"stream {spec.name}: trigger real_time: build() output lacks {missing}; the Kafka "
                              "sink skips records re-read after a crash by their Kafka coordinates: keep topic, "
                              "partition and offset in build()'s output")
    kinds: dict[str, str] = {name: name for name in sink.specs}
    kinds.update({str(k): str(v) for k, v in transform.kinds.items()})
    try:
        encoded = krt.encoded_frame(frame, sink, kinds)
    except Refused as exc:
        raise RealTimeRefused(f"{exc}") from None
    krt.fence(sink, lease_epoch, partitions)
    with_batch = ",".join(sink.table_name(n) for n, t in sink.specs.items() if "batch_id" in t.column_names)
    jvm = spark._jvm
    writer = jvm.io.rewind.rtm.KafkaRealTimeWriter(
        sink.bootstrap, krt.client_lines(sink), spec.name, int(lease_epoch), krt.transactional_prefix(sink),
        krt.ledger_topic(sink), with_batch, KAFKA_FLUSH_MS, KAFKA_TXN_TIMEOUT_MS)
    interval = f"{int(spec.durations()['trigger'].total_seconds() * 1000)} milliseconds"
    jquery = (encoded._jdf.writeStream().foreach(writer).outputMode("update").queryName(spec.name)
              .option("checkpointLocation", checkpoint)
              .trigger(jvm.org.apache.spark.sql.streaming.Trigger.RealTime(interval)).start())
    return StreamingQuery(jquery)


def source_partitions(spec: StreamSpec, bootstrap: str) -> int:
    """How many Spark partitions the query has: one per partition of the source topics in this mode, asked of
    the brokers the query reads (``source_options``: the entry's own bootstrap wins over the driver's)."""
    from rewind.driver.source import source_options  # lazy: only real-time streams
    from rewind.kafka.client_config import stream_consumer_config  # lazy: confluent-kafka
    from rewind.kafka.lookups import KafkaOffsetClient  # lazy: as above

    brokers = source_options(spec, bootstrap)["kafka.bootstrap.servers"]
    config = stream_consumer_config(spec.source.options, brokers, f"rewind-rtm-{spec.name}")
    with KafkaOffsetClient(config, 30.0) as client:
        return len(client.partitions(list(spec.topics)))
