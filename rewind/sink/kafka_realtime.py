"""The Kafka sink in Spark's real-time mode: rows encoded in the plan, the ledger topic, the driver's fence.

Why the encoding is in the Spark plan (``encoded_frame``): one encoding of a row exists, the micro-batch
sink's (``rewind.sink.kafka_codec``: a key the JSON array of the key values, a value the JSON object of the
row), written with Spark's ``to_json`` so that the JVM writer (``io.rewind.rtm.KafkaRealTimeWriter``) only
routes bytes. Keys must be byte for byte what the micro-batch sink writes (a replay leaves out keys already in
a topic by comparing bytes), so key columns are limited to strings and integers, where Spark's JSON and
msgspec's agree; values are compared decoded, by type.

Why a ledger topic of its own (``<prefix><table_prefix>rewind_rtm_epochs``, compacted): the records of a
real-time epoch are committed in many small transactions, each with the record ``stream/epoch/partition``
saying up to which source offset the partition's rows are committed; a writer skips records below that after
a crash (Spark runs the uncommitted epoch again from its start). The micro-batch ledger (``rewind_batches``)
keeps its own shape. The driver's fence (``fence``) is a record ``stream/fence`` holding its lease epoch,
written before its query starts, then every partition's transactional producer is started once, which fences
a previous driver's producers and aborts what they left open.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from rewind.api.tables import decimal_of
from rewind.kafka.client_config import base_consumer_config, librdkafka_config
from rewind.kafka.reader import read_to_end
from rewind.kafka.topics import ensure_topic
from rewind.sink.errors import TOO_LARGE, TOO_LARGE_FIX, SinkRefused
from rewind.sink.kafka import LEDGER_TOPIC_CONFIG
from rewind.sink.kafka_mirror import settled_ends
from rewind.sink.kafka_txn import Record, Transactions

__all__ = ["LEDGER", "client_lines", "create_ledger", "encoded_frame", "fence", "ledger_topic", "read_epochs",
           "record_limit", "transactional_prefix"]

#: The real-time ledger topic's table name (as the SQL sink's ledger table).
LEDGER = "rewind_rtm_epochs"
#: librdkafka's names of settings the Java client names otherwise.
JAVA_NAMES = {"message.max.bytes": "max.request.size"}
#: Key column types whose JSON Spark writes byte for byte as msgspec does.
KEY_TYPES = {"string", "int", "bigint"}
#: Spark's ``to_json`` options that give kafka_codec's forms: nulls kept, times RFC 3339 UTC at microseconds.
JSON_OPTIONS = {"ignoreNullFields": "false", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                "timeZone": "UTC"}


def ledger_topic(sink: Any) -> str:
    return f"{sink.target.topic_prefix}{sink.table_prefix}{LEDGER}"


def transactional_prefix(sink: Any) -> str:
    """The writers' transactional ids are this and the Spark partition: one per (stream, partition)."""
    return f"{sink.transactional_id}.rtm."


def create_ledger(sink: Any) -> str:
    """The real-time ledger topic (one partition, compacted, kept forever), created if absent; its name."""
    topic = ledger_topic(sink)
    ensure_topic(sink.bootstrap, topic, 1, sink.target.replication, config=librdkafka_config(sink.target.client),
                 topic_config=LEDGER_TOPIC_CONFIG)
    return topic


def client_lines(sink: Any) -> str:
    """The sink's client settings for the Java client, one ``key=value`` a line (never logged). librdkafka's
    ``message.max.bytes`` is the Java producer's ``max.request.size``: the plan keeps records under it."""
    java = {JAVA_NAMES.get(k, k): v for k, v in sink.target.client.items() if k != "isolation.level"}
    return "\n".join(f"{k}={v}" for k, v in java.items())


def fence(sink: Any, lease_epoch: int, partitions: int) -> None:
    """Before the query starts: record the driver's lease epoch as the stream's fence, then start each Spark
    partition's transactional producer once (an older driver's producer of that id is fenced, the
    transaction it left open aborted). A writer refuses to write under a lower lease than the fence."""
    topic = create_ledger(sink)
    value = json.dumps({"stream": sink.stream, "fence": int(lease_epoch),
                        "at": dt.datetime.now(dt.UTC).isoformat()}).encode()
    prefix = transactional_prefix(sink)
    txn = Transactions(sink._producer_config(f"{prefix}fence"))
    try:
        txn.run([Record(topic, f"{sink.stream}/fence".encode(), value, [])], f"the fence of stream {sink.stream}")
    finally:
        txn.close()
    for partition in range(partitions):
        Transactions(sink._producer_config(f"{prefix}{partition}")).close()


def read_epochs(sink: Any) -> list[dict[str, Any]]:
    """The real-time ledger of the sink's stream as committed (read_committed): one dict per (epoch, Spark
    partition), the last record of each."""
    conf = {**base_consumer_config(sink.bootstrap, sink.target.client, group_id=f"rewind-sink-{sink.stream}"),
            "isolation.level": "read_committed"}
    topic = ledger_topic(sink)
    ends = settled_ends(conf, topic, wait_s=2.0)
    out: dict[str, dict[str, Any]] = {}
    if ends is None:
        return []
    for msgs in read_to_end(conf, [topic], upper=ends):
        for m in msgs:
            key, raw = (m.key() or b"").decode(), m.value()
            if raw is None or not key.startswith(f"{sink.stream}/"):
                continue
            entry = json.loads(raw)
            if "epoch" in entry:
                out[key] = entry
    return sorted(out.values(), key=lambda e: (e["epoch"], e["spark_partition"]))


def _json_type(kind: str) -> str:
    exact = decimal_of(kind)
    if exact is not None:
        return f"decimal({exact[0]},{exact[1]})"
    return {"int": "int", "bigint": "bigint", "double": "double", "string": "string", "timestamp": "timestamp",
            "binary": "binary"}[kind]


def record_limit(sink: Any) -> int:
    """The largest key + value the plan hands the writer: ``kafka.message.max.bytes`` less the headers the JVM
    writer adds (the stream, and the epoch and lease as up to 19 digits each) and the ``batch_id`` it appends."""
    headers = len(b"rewind.stream") + len(sink.stream.encode()) + len(b"rewind.batch") + len(b"rewind.epoch") + 38
    return int(sink.target.max_record_bytes) - headers - len(b',"batch_id":') - 19


def encoded_frame(frame: Any, sink: Any, kinds: Mapping[str, str]) -> Any:
    """``frame`` with ``rewind_topic``, ``rewind_key`` and ``rewind_value``: each row's record as the
    micro-batch sink writes it (``batch_id`` left out: the writer adds the epoch). ``kinds``: row kind -> table.
    A record above ``record_limit`` becomes its dead letter, as in the micro-batch sink (``TOO_LARGE``), or fails
    the task naming the setting when it cannot be one. SinkRefused for a key column whose JSON Spark would not
    write as msgspec does."""
    from pyspark.sql import functions as F

    present = set(frame.columns)

    def column(c: str, kind_: str, source: Mapping[str, Any] | None = None) -> Any:
        found = source.get(c) if source is not None else F.col(c) if c in present else None
        e = (F.lit(None) if found is None else found).cast(_json_type(kind_))
        return e.cast("string") if decimal_of(kind_) is not None else e

    def record(name: str, source: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
        """The key and value of a row of table ``name`` (its columns from ``source``, else the frame's)."""
        spec = sink.specs[name]
        types = {c.name: c.type for c in spec.columns}
        row = F.struct(*[column(c.name, c.type, source).alias(c.name) for c in spec.columns if c.name != "batch_id"])
        parts = [F.regexp_replace(F.to_json(F.struct(column(k, types[k], source).alias("v")), JSON_OPTIONS),
                                  r'^\{"v":|\}$', "") for k in spec.key]
        return F.concat(F.lit("["), F.concat_ws(",", *parts), F.lit("]")), F.to_json(row, JSON_OPTIONS)

    built: dict[str, Any] = {}
    for kind, name in kinds.items():
        spec = sink.specs[name]
        types = {c.name: c.type for c in spec.columns}
        odd = [k for k in spec.key if types[k] not in KEY_TYPES or k == "batch_id"]
        if odd:
            raise SinkRefused(f"stream {sink.stream}: table {name!r}: key column {odd[0]!r} ({types[odd[0]]}) cannot "
                              "be written by the real-time Kafka sink (keys of strings and integers only, so that "
                              "they are byte for byte the micro-batch sink's); use a processing-time trigger")
        key, value = record(name)
        when = F.col("kind") == F.lit(kind)
        exprs = {"rewind_topic": F.lit(sink.table_name(name)), "rewind_key": key, "rewind_value": value,
                 "rewind_table": F.lit(name)}
        for what, expr in exprs.items():
            built[what] = F.when(when, expr) if what not in built else built[what].when(when, expr)
    return _too_large_as_dead_letters(frame.withColumns(built), sink, record)


def _too_large_as_dead_letters(frame: Any, sink: Any, record: Any) -> Any:
    """Rows whose record is above ``record_limit`` rerouted to the dead-letter table, reason ``TOO_LARGE`` with
    the size (the micro-batch sink's words); without a dead-letter table, for the dead-letter table's own rows
    and for rows without their Kafka coordinates the task fails naming the setting to raise. A second projection
    on purpose: Spark keeps it apart rather than compute each row's JSON twice."""
    from pyspark.sql import functions as F

    limit = record_limit(sink)
    size = F.octet_length("rewind_key") + F.octet_length("rewind_value")
    over = F.col("rewind_value").isNotNull() & (size > F.lit(limit))
    why = F.concat(F.lit(f"{TOO_LARGE}: a row of table '"), F.col("rewind_table"), F.lit("' is "),
                   size.cast("string"), F.lit(f" bytes, above kafka.message.max.bytes less overhead ({limit})"))
    coords = ("topic", "partition", "offset")
    dead_name = sink.dead_letter_table
    refused = F.concat(F.lit(f"stream {sink.stream}: "), why, F.lit(TOO_LARGE_FIX))
    if dead_name is None or any(c not in frame.columns for c in coords):
        return frame.withColumn("rewind_topic", F.when(over, F.raise_error(refused)).otherwise(F.col("rewind_topic"))
                                ).drop("rewind_table")
    cannot = over & (F.col("rewind_table") == F.lit(dead_name))
    for c in coords:
        cannot = cannot | (over & F.col(c).isNull())
    dead_key, dead_value = record(dead_name, {**{c: F.col(c) for c in coords}, "reason": why})
    return frame.withColumns({
        "rewind_topic": F.when(cannot, F.raise_error(refused)).when(over, F.lit(sink.table_name(dead_name)))
        .otherwise(F.col("rewind_topic")),
        "rewind_key": F.when(over, dead_key).otherwise(F.col("rewind_key")),
        "rewind_value": F.when(over, dead_value).otherwise(F.col("rewind_value")),
    }).drop("rewind_table")
