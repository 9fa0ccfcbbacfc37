"""The text of a new stream's package (``rewind stream new``): templates with ``__NAME__``-style holes.

Kept apart from ``rewind.cli.scaffold`` (which fills them and appends the registry entry) so
each file reads as the code it generates. Holes: ``__NAME__`` (the stream and package name),
``__CLASS__`` (the transform class), ``__TOPIC__``, ``__PARTITIONS__``.
"""

from __future__ import annotations

INIT = '''"""The __NAME__ stream for Rewind: `transform` (the code Rewind runs), `producer` (test records)."""
'''

TRANSFORM = r'''"""The __NAME__ stream: JSON records from Kafka into a table, malformed ones into dead letters.

A record is ``{"id": str, "value": number, "ts": "2026-05-01T12:00:00.123+00:00"}``. ``build`` is
the PySpark code Rewind runs, on the stream's micro-batches and on a replay's bounded read;
``expect`` recomputes the same in pandas, one record at a time, and ``rewind verify __NAME__``
holds the sink to it. The places to change are marked CHANGE (1/3), (2/3) and (3/3): the record's
shape, the output table, and expect(); build() and expect() must change together.

Written by ``rewind stream new __NAME__``; the contract is ``rewind.api.contract.Transform``
(Rewind's docs/add-your-stream.md says what each member is for).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pandas as pd
from rewind.api import Column, Identity, TableSpec, Transform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# CHANGE (1/3): the record's shape. Spark parses it with this schema (from_json) in build();
# parse_record() reads the same fields with Python's json module for expect(). The id is read as a
# VARIANT so that build() can require a JSON string, as parse_record() does (Spark would turn a
# number into text, and Java writes 1e20 as "1.0E20" where Python writes "1e+20").
RECORD_SCHEMA = "id VARIANT, value DOUBLE, ts STRING"
#: An ISO 8601 time with its zone, in the years 1970-2199. A time without a zone would be read in the
#: Spark session's time zone (the same record could become another row elsewhere: not deterministic);
#: pandas' timestamps end in 2262; Spark and Python disagree about the year 0 and offsets past 18 h.
ISO_TIME = (r"(19[7-9][0-9]|2[01][0-9][0-9])-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
            r"(Z|[+-](0[0-9]|1[0-7]):[0-5][0-9])")
#: ISO_TIME as the whole text, in Java's regular expressions (``\z``: the very end; ``$`` would allow a
#: final line break). Python: ``re.fullmatch(ISO_TIME, text)``.
WHOLE_ISO_TIME = "^" + ISO_TIME + r"\z"
#: Strict JSON, as Python's json module reads it: no 'single quotes', no NaN or Infinity.
JSON_OPTIONS = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}
#: The dead-letter reason of a record that is not JSON, lacks a field or has one of the wrong kind.
MALFORMED = "malformed"

# CHANGE (2/3): the output table. Insert-once (on_conflict="ignore"): the first row written for an
# id is kept, so a record sent twice, a batch re-run after a crash or a replay leaves it as it is.
# (A table of each entity's latest state: on_conflict="latest" with version="a column".)
ROWS = TableSpec(
    name="__NAME___rows",
    columns=(Column("id", "string", False), Column("value", "double"), Column("event_time", "timestamp", False),
             Column("topic", "string", False), Column("partition", "int", False), Column("offset", "bigint", False),
             Column("kafka_timestamp", "timestamp"), Column("batch_id", "bigint")),
    key=("id",), on_conflict="ignore")
#: The records the stream refuses, at their Kafka coordinates, with the reason and the raw text.
DEAD_LETTER = TableSpec(
    name="__NAME___dead_letter",
    columns=(Column("topic", "string", False), Column("partition", "int", False), Column("offset", "bigint", False),
             Column("kafka_timestamp", "timestamp"), Column("reason", "string", False), Column("raw_value", "string"),
             Column("watermark", "timestamp"), Column("batch_id", "bigint")),
    key=("topic", "partition", "offset"), on_conflict="ignore")
#: Output row kind -> table, for the default split() (rewind.api.contract.Transform.split). Rows of
#: kind LATE_CANDIDATE (a stateful operator would drop them as behind the watermark: only if you add
#: one, see rewind.driver.late_routing) go to the dead-letter table too.
KINDS = {"row": ROWS.name, "dead": DEAD_LETTER.name}


class __CLASS__(Transform):
    """Parse, route malformed records to dead letters, keep one row per id. Stateless: no watermark."""

    @property
    def tables(self) -> tuple[TableSpec, ...]:
        return (ROWS, DEAD_LETTER)

    @property
    def identity(self) -> Identity:
        # Where `rewind verify` looks for each valid record: the row of its id.
        return Identity(table="__NAME___rows", columns=("id",))

    @property
    def dead_letter_table(self) -> str:
        return DEAD_LETTER.name

    def build(self, source: DataFrame, spec: Any) -> DataFrame:
        """Kafka rows -> one row per record, kind "row" or "dead". Only the record decides: no clock,
        no randomness, so a re-run batch or a replay gives the same rows."""
        from pyspark.sql import functions as F

        text = F.make_valid_utf8(F.col("value").cast("string"))  # bytes that are not UTF-8 become U+FFFD
        record = F.from_json(text, RECORD_SCHEMA, JSON_OPTIONS)
        rows = source.select(record.alias("r"), text.alias("raw_value"), "topic", "partition", "offset",
                             F.col("timestamp").alias("kafka_timestamp"))
        record_id = F.when(F.schema_of_variant("r.id") == "STRING", F.variant_get("r.id", "$", "string"))
        rows = rows.select(
            record_id.alias("id"),
            F.col("r.value").alias("value"),
            F.when(F.col("r.ts").rlike(WHOLE_ISO_TIME), F.try_to_timestamp("r.ts")).alias("event_time"),
            "topic", "partition", "offset", "kafka_timestamp", "raw_value")
        # CHANGE (2/3): computed columns go here (add them to ROWS and to expect() too), e.g.
        # rows = rows.withColumn("doubled", F.col("value") * 2)
        finite = F.col("value").isNotNull() & (F.abs("value") <= F.lit(sys.float_info.max))  # not NaN or inf
        ok = F.col("id").isNotNull() & finite & F.col("event_time").isNotNull()
        return (rows.withColumn("kind", F.when(ok, F.lit("row")).otherwise(F.lit("dead")))
                .withColumn("reason", F.when(F.col("kind") == "dead", F.lit(MALFORMED))))

    @property
    def kinds(self) -> dict[str, str]:
        # Where the default split() sends each kind of row build() outputs (one transaction per batch).
        return KINDS

    def expect(self, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
        """build() in pandas: for each Kafka record, its id, reason, event_time and values."""
        out = pd.DataFrame([parse_record(v) for v in records["value"]],
                           columns=["id", "value", "event_time", "reason"])
        out["event_time"] = pd.to_datetime(out["event_time"], utc=True)
        # CHANGE (3/3): recompute build()'s computed columns here, e.g.
        # out["doubled"] = out["value"] * 2
        return out


def parse_record(value: bytes | None) -> tuple[str | None, float | None, datetime | None, str | None]:
    """One Kafka value -> (id, value, event time, reason), by the rules of build()'s from_json."""
    try:  # like Spark's JSON reader: the first JSON value, whatever follows it
        text = value.decode("utf-8", "replace").lstrip(" \t\r\n") if value is not None else ""
        record = json.JSONDecoder(parse_constant=_refuse).raw_decode(text)[0]
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return None, None, None, MALFORMED
    rid, number, ts = record.get("id"), record.get("value"), record.get("ts")
    if not isinstance(rid, str) or not _is_unicode(rid):
        rid = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or abs(number) > sys.float_info.max:
        number = None  # not a number, or past a double's range (1e400: Spark reads infinity)
    event_time = None
    if isinstance(ts, str) and re.fullmatch(ISO_TIME, ts):
        try:
            event_time = datetime.fromisoformat(ts).astimezone(UTC)
        except ValueError:
            event_time = None
    if rid is None or number is None or event_time is None:
        return None, None, None, MALFORMED
    return rid, float(number), event_time, None


def _is_unicode(text: str) -> bool:
    """False for a string with a lone surrogate ("\\ud800"): Spark's VARIANT refuses it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not a JSON number")  # NaN, Infinity: see JSON_OPTIONS
'''

PRODUCER = r'''"""Send test records to the __NAME__ stream's topic (a few malformed ones among them).

    python -m __NAME__.producer --count 2000 --malformed-every 100 [--bootstrap HOST:PORT]

Ids are ``__NAME__-<n>``, so a run can be told from another (``--start``). The topic is created with
``--partitions`` partitions if it does not exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta

TOPIC = "__TOPIC__"
PARTITIONS = __PARTITIONS__
#: What a malformed record looks like, in turn: each becomes a dead letter with reason "malformed".
MALFORMED = (b"not json", b'{"id": "cut-short", "val', b'{"id": "no-value", "ts": "2026-05-01T12:00:00Z"}',
             b'{"id": "no-zone", "value": 1, "ts": "2026-05-01 12:00:00"}')


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(timeout=15)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m __NAME__.producer", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", help="Kafka (default: $REWIND_KAFKA_BOOTSTRAP, else the one `rewind up` started)")
    p.add_argument("--topic", default=TOPIC)
    p.add_argument("--partitions", type=int, default=PARTITIONS, help="if the topic is created")
    p.add_argument("--count", type=int, default=1000, help="records to send")
    p.add_argument("--start", type=int, default=0, help="the first id's number")
    p.add_argument("--malformed-every", type=int, default=100, metavar="N", help="one malformed record in N (0: none)")
    args = p.parse_args(argv)
    from confluent_kafka import Producer
    from rewind.errors import RewindError
    from rewind.settings import resolve_bootstrap

    try:
        bootstrap = resolve_bootstrap(args.bootstrap)
    except RewindError as exc:
        print(f"producer: {exc}", file=sys.stderr)
        return 3
    ensure_topic(bootstrap, args.topic, args.partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    start, malformed = datetime.now(UTC), 0
    for n in range(args.start, args.start + args.count):
        key = f"__NAME__-{n}"
        if args.malformed_every and n % args.malformed_every == args.malformed_every - 1:
            value, malformed = MALFORMED[malformed % len(MALFORMED)], malformed + 1
        else:
            ts = (start + timedelta(milliseconds=n)).isoformat()
            value = json.dumps({"id": key, "value": round(n * 0.25, 2), "ts": ts}).encode()
        while True:
            try:
                producer.produce(args.topic, key=key.encode(), value=value)
                break
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.5)
        producer.poll(0)
    left = producer.flush(60)
    print(json.dumps({"topic": args.topic, "sent": args.count - left, "malformed": malformed, "unsent": left}))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
'''

TEST = r'''"""expect() on a few records, and split(): no Kafka, no Spark (run: pytest -q __NAME__/)."""

from __future__ import annotations

import pandas as pd

from __NAME__.transform import __CLASS__


def records(*values: bytes | None) -> pd.DataFrame:
    """Kafka records as expect() receives them (timestamp: epoch ms)."""
    return pd.DataFrame({"topic": "__TOPIC__", "partition": 0, "offset": range(len(values)),
                         "timestamp": 1_777_000_000_000, "key": None, "value": list(values)})


def test_expect_reads_valid_records_and_refuses_malformed_ones() -> None:
    out = __CLASS__().expect(records(
        b'{"id": "a", "value": 1.5, "ts": "2026-05-01T12:00:00Z"}',
        b'{"id": "b", "value": 2, "ts": "2026-05-01T14:00:00.250+02:00"}',
        b"not json", b'{"id": "c", "ts": "2026-05-01T12:00:00Z"}', b'{"id": "d", "value": 1, "ts": "yesterday"}',
        None), spec=None)
    assert list(out["reason"]) == [None, None, "malformed", "malformed", "malformed", "malformed"]
    assert list(out["id"][:2]) == ["a", "b"] and list(out["value"][:2]) == [1.5, 2.0]
    assert list(out["event_time"][:2]) == [pd.Timestamp("2026-05-01T12:00:00Z"),
                                           pd.Timestamp("2026-05-01T12:00:00.250Z")]
    assert out["id"][2:].isna().all() and out["event_time"][2:].isna().all()


def test_split_sends_each_kind_to_its_table() -> None:
    t = __CLASS__()
    frame = pd.DataFrame({"kind": ["row", "dead"], "id": ["a", None], "value": [1.5, None],
                          "event_time": [pd.Timestamp("2026-05-01T12:00:00Z"), pd.NaT], "topic": "__TOPIC__",
                          "partition": 0, "offset": [0, 1], "kafka_timestamp": pd.NaT,
                          "reason": [None, "malformed"], "raw_value": [None, "not json"]})
    out = t.split(frame, batch_id=7)
    rows, dead = out[t.identity.table], out[t.dead_letter_table]
    assert list(rows["id"]) == ["a"] and list(dead["offset"]) == [1] and list(dead["reason"]) == ["malformed"]
    assert set(rows["batch_id"]) == {7} and list(rows.columns) == [c.name for c in t.tables[0].columns]
'''

#: The registry entry (below ``streams:``, indented by the caller), like streams.yaml's demo entry.
REGISTRY_ENTRY = '''# written by `rewind stream new __NAME__`: the package __NAME__/ is in __DIR__ (PYTHONPATH)
__NAME__:
  topics: [__TOPIC__]
  partitions: __PARTITIONS__
  transform: __NAME__.transform:__CLASS__
  source:
    format: kafka               # Spark's own connector; `rewind_kafka`: Rewind's Python source
    options:
      startingOffsets: earliest
      maxOffsetsPerTrigger: 20000
      failOnDataLoss: "true"
  sink:
    url: sqlite:///${REWIND_HOME}/sink/__NAME__.db
  checkpoint: ${REWIND_HOME}/checkpoints/__NAME__
  status_dir: ${REWIND_HOME}/status
  trigger: 2 seconds
  window: 10 seconds            # the default; build reads spec.durations()["window"]; an Aggregate without size= too
  watermark_delay: 30 seconds   # used only by a stateful transform (withWatermark)
  restart: {strategy: exponential-backoff, max_attempts: 5, delay: 5 seconds, max_delay: 2 min}
  savepoints: {schedule: "@hourly", keep_last: 5, max_age: 7d}
  supervision: {poll: 2 seconds, heartbeat_timeout: 60 seconds, stall_after: 2 min, startup_grace: 3 min}
  dq_suite: contract            # `rewind verify` proves it from the transform's contract (expect())
'''
