"""The options of ``format("rewind_kafka")``: parsed and checked once, up front, into ``SourceOptions``.

Why up front: a bad option should fail at ``load()`` naming the option and what to write instead,
not minutes later in a query thread (or, worse, be ignored). The source's option table (names,
defaults, meanings) is the ``rewind.kafka.source.KafkaDataSource`` docstring; this module is its
grammar. Spark's own option names are used, so a job can switch between Spark's connector and
this source by configuration; Spark's options that would change which records are read but that
this source does not implement are refused, not ignored.

Pure: no I/O. Where a read starts and ends is kept as an ``OffsetSpec`` here and resolved against
what the cluster holds by ``rewind.kafka.offsets``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from rewind.kafka.alignment import OPTIONS as ALIGNMENT_OPTIONS
from rewind.kafka.alignment import Alignment, parse_alignment
from rewind.kafka.types import EARLIEST, LATEST, TP, KafkaSourceOptionError, offsets_from_json

SOURCE_NAME = "rewind_kafka"

# Spark's built-in option names that change which records are read: refusing them beats ignoring.
_UNSUPPORTED = {
    "assign": "use 'subscribe' with a comma-separated list of topics",
    "subscribepattern": "use 'subscribe' with a comma-separated list of topics",
    "minoffsetspertrigger": "only 'maxOffsetsPerTrigger' is supported",
    "maxtriggerdelay": "only 'maxOffsetsPerTrigger' is supported",
    "minpartitions": "the source reads one Spark partition per Kafka partition",
    "maxrecordsperpartition": "the source reads one Spark partition per Kafka partition",
}

# Consumer settings the source owns; setting them would break offset tracking.
_RESERVED_KAFKA = {
    "auto.offset.reset": "set 'startingOffsets' instead (and 'failOnDataLoss')",
    "enable.auto.commit": "offsets are tracked in Spark's checkpoint, not in Kafka",
    "enable.partition.eof": "the source needs end-of-partition events to find true end offsets",
    "key.deserializer": "records are returned as binary key/value",
    "value.deserializer": "records are returned as binary key/value",
}

_KNOWN = {
    "kafka.bootstrap.servers", "subscribe", "startingoffsets", "endingoffsets",
    "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "endingtimestamp", "endingoffsetsbytimestamp", "maxoffsetspertrigger", "failondataloss",
    "kafkaconsumer.polltimeoutms", "includeheaders", "groupidprefix", "maxrecordsperbatch",
    "fetchoffset.numretries", "fetchoffset.retryintervalms", "path", *ALIGNMENT_OPTIONS,
}
_STREAM_ONLY = ("maxoffsetspertrigger",)
_BATCH_ONLY = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default (spark.network.timeout)
# The Java client's default, so Spark's connector reads records of aborted and open transactions
# unless told otherwise; librdkafka's is read_committed. The source takes Spark's, so switching
# sources never changes which records a stream reads (Rewind's streams set read_committed).
DEFAULT_ISOLATION_LEVEL = "read_uncommitted"
DEFAULT_RECORDS_PER_BATCH = 10_000


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the cluster.

    kind: "earliest" | "latest" | "offsets" (per partition, -2/-1 allowed) |
    "timestamp" (one timestamp for all partitions) | "timestamps" (per partition).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    option: str
    offsets: dict[TP, int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``rewind_kafka`` read (batch or streaming)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    poll_timeout_ms: int
    include_headers: bool
    timestamp_strategy: Literal["error", "latest"]
    records_per_batch: int
    consumer_conf: dict[str, str]
    group_id_prefix: str
    alignment: Alignment | None = None  # event-time alignment (rewind.kafka.alignment), None: off


def _parse_bool(name: str, value: str) -> bool:
    v = str(value).strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise KafkaSourceOptionError(f"option '{name}': expected 'true' or 'false', got {value!r}")


def _parse_positive_int(name: str, value: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise KafkaSourceOptionError(f"option '{name}': expected a positive integer, got {value!r}") from None
    if n <= 0:
        raise KafkaSourceOptionError(f"option '{name}': expected a positive integer, got {value!r}")
    return n


def _parse_timestamp(name: str, value: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise KafkaSourceOptionError(
            f"option '{name}': expected a timestamp in milliseconds since the epoch, got {value!r}") from None
    if n < 0:
        raise KafkaSourceOptionError(f"option '{name}': timestamp must be >= 0, got {value!r}")
    return n


def parse_offset_option(name: str, value: str, *, allow_earliest: bool, allow_latest: bool) -> OffsetSpec:
    """Parse ``startingOffsets`` / ``endingOffsets``: "earliest", "latest" or per-partition JSON."""
    text = str(value).strip()
    low = text.lower()
    accepted = " or ".join(
        [f"'{w}'" for w, ok in (("earliest", allow_earliest), ("latest", allow_latest)) if ok]
        + ['a JSON object like {"topic": {"0": 42}}'])
    if low == "earliest":
        if not allow_earliest:
            raise KafkaSourceOptionError(f"option '{name}': 'earliest' is not allowed here; use {accepted}")
        return OffsetSpec("earliest", name)
    if low == "latest":
        if not allow_latest:
            raise KafkaSourceOptionError(f"option '{name}': 'latest' is not allowed here; use {accepted}")
        return OffsetSpec("latest", name)
    if not text.startswith("{"):
        raise KafkaSourceOptionError(f"option '{name}': got {value!r}; use {accepted}")
    offsets = offsets_from_json(text, f"option '{name}'")
    for tp, off in offsets.items():
        if off < EARLIEST:
            raise KafkaSourceOptionError(
                f"option '{name}': offset {off} for {tp.topic!r} partition {tp.partition} is invalid; "
                "use an offset >= 0, -2 (earliest) or -1 (latest)")
        if off == EARLIEST and not allow_earliest:
            raise KafkaSourceOptionError(
                f"option '{name}': -2 (earliest) is not allowed for {tp.topic!r} partition {tp.partition}")
        if off == LATEST and not allow_latest:
            raise KafkaSourceOptionError(
                f"option '{name}': -1 (latest) is not allowed for {tp.topic!r} partition {tp.partition}")
    return OffsetSpec("offsets", name, offsets=offsets)


def parse_timestamps_option(name: str, value: str) -> OffsetSpec:
    """Parse ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: ``{"topic": {"0": ts_ms}}``."""
    stamps = offsets_from_json(str(value).strip(), f"option '{name}'")
    for tp, ts in stamps.items():
        if ts < 0:
            raise KafkaSourceOptionError(
                f"option '{name}': timestamp {ts} for {tp.topic!r} partition {tp.partition} must be >= 0 (ms)")
    return OffsetSpec("timestamps", name, offsets=stamps)


def _position_option(opts: Mapping[str, str], prefix: str, default: Literal["earliest", "latest"], *,
                     allow_earliest: bool, allow_latest: bool) -> OffsetSpec:
    """``startingX`` / ``endingX`` with Spark's precedence: global timestamp, per-partition
    timestamps, then offsets. ``opts`` has lower-case keys; ``prefix`` is 'starting' or 'ending'."""
    if f"{prefix}timestamp" in opts:
        return OffsetSpec("timestamp", f"{prefix}Timestamp",
                          timestamp=_parse_timestamp(f"{prefix}Timestamp", opts[f"{prefix}timestamp"]))
    if f"{prefix}offsetsbytimestamp" in opts:
        return parse_timestamps_option(f"{prefix}OffsetsByTimestamp", opts[f"{prefix}offsetsbytimestamp"])
    if f"{prefix}offsets" in opts:
        return parse_offset_option(f"{prefix}Offsets", opts[f"{prefix}offsets"],
                                   allow_earliest=allow_earliest, allow_latest=allow_latest)
    return OffsetSpec(default, f"{prefix}Offsets")


def parse_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Validate the user's options once, up front, with errors that name the option."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}

    for key, hint in _UNSUPPORTED.items():
        if key in opts:
            raise KafkaSourceOptionError(f"option '{key}' is not supported by {SOURCE_NAME}: {hint}")
    unknown = sorted(k for k in opts if k not in _KNOWN and not k.startswith("kafka."))
    if unknown:
        raise KafkaSourceOptionError(
            f"unknown option(s) {unknown} for {SOURCE_NAME}; accepted: 'kafka.bootstrap.servers', 'subscribe', "
            "'startingOffsets', 'endingOffsets', 'startingTimestamp', 'startingOffsetsByTimestamp', "
            "'startingOffsetsByTimestampStrategy', 'endingTimestamp', 'endingOffsetsByTimestamp', "
            "'maxOffsetsPerTrigger', 'failOnDataLoss', 'kafkaConsumer.pollTimeoutMs', 'includeHeaders', "
            "'groupIdPrefix', 'maxRecordsPerBatch' and any 'kafka.<librdkafka setting>'")

    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise KafkaSourceOptionError(
            "option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")

    raw_topics = opts.get("subscribe")
    if raw_topics is None:
        raise KafkaSourceOptionError("option 'subscribe' is required: a comma-separated list of topics")
    topics = tuple(dict.fromkeys(t.strip() for t in raw_topics.split(",") if t.strip()))
    if not topics:
        raise KafkaSourceOptionError(f"option 'subscribe': no topic names in {raw_topics!r}")

    starting = _position_option(opts, "starting", "latest" if streaming else "earliest",
                                allow_earliest=True, allow_latest=streaming)
    _check_spec_topics(starting, topics)

    ending_keys = [k for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp") if k in opts]
    ending: OffsetSpec | None = None
    if streaming:
        if ending_keys:
            raise KafkaSourceOptionError(
                f"option '{ending_keys[0]}' is not valid for streaming queries (only for spark.read); "
                "use 'maxOffsetsPerTrigger' or trigger(availableNow=True) to bound a stream")
    else:
        ending = _position_option(opts, "ending", "latest", allow_earliest=False, allow_latest=True)
        _check_spec_topics(ending, topics)

    max_per_trigger = None
    if "maxoffsetspertrigger" in opts:
        if not streaming:
            raise KafkaSourceOptionError(
                "option 'maxOffsetsPerTrigger' is only valid for streaming queries; "
                "bound a batch read with 'endingOffsets'")
        max_per_trigger = _parse_positive_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaSourceOptionError(
            "option 'startingOffsetsByTimestampStrategy': expected 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}")

    for key in ("fetchoffset.numretries", "fetchoffset.retryintervalms"):
        if key in opts:  # accepted for compatibility with Spark's option set; look-ups retry on their own
            _parse_positive_int(key, opts[key])

    consumer_conf: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka."):]
        if name in _RESERVED_KAFKA:
            raise KafkaSourceOptionError(f"option '{key}' is not supported: {_RESERVED_KAFKA[name]}")
        consumer_conf[name] = value
    iso = consumer_conf.setdefault("isolation.level", DEFAULT_ISOLATION_LEVEL)
    if iso not in ("read_committed", "read_uncommitted"):
        raise KafkaSourceOptionError(
            f"option 'kafka.isolation.level': expected 'read_committed' or 'read_uncommitted', got {iso!r}")

    return SourceOptions(
        bootstrap_servers=bootstrap,
        topics=topics,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=_parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        poll_timeout_ms=_parse_positive_int("kafkaConsumer.pollTimeoutMs",
                                            opts.get("kafkaconsumer.polltimeoutms", str(DEFAULT_POLL_TIMEOUT_MS))),
        include_headers=includes_headers(opts),
        timestamp_strategy=strategy,  # type: ignore[arg-type]
        records_per_batch=_parse_positive_int("maxRecordsPerBatch",
                                              opts.get("maxrecordsperbatch", str(DEFAULT_RECORDS_PER_BATCH))),
        consumer_conf=consumer_conf,
        group_id_prefix=opts.get("groupidprefix", "rewind-kafka-source").strip() or "rewind-kafka-source",
        alignment=parse_alignment(opts, streaming),
    )


def includes_headers(options: Mapping[str, str]) -> bool:
    """``includeHeaders`` (any key case): false unless set, like Spark's connector."""
    value = next((v for k, v in options.items() if str(k).lower() == "includeheaders"), "false")
    return _parse_bool("includeHeaders", value)


def _check_spec_topics(spec: OffsetSpec, topics: tuple[str, ...]) -> None:
    """Per-partition JSON may only name subscribed topics (a typo would otherwise be ignored)."""
    extra = sorted({tp.topic for tp in spec.offsets} - set(topics))
    if extra:
        raise KafkaSourceOptionError(
            f"option '{spec.option}' names topic(s) {extra} that are not in 'subscribe' {list(topics)}")


def validate_options(options: Mapping[str, str]) -> None:
    """Fail fast at ``load()`` (before batch vs. streaming is known) on options no read could use.

    Options valid for one kind of read pass; the reader created later checks again for its kind.
    """
    keys = {str(k).lower() for k in options}
    errors: dict[bool, KafkaSourceOptionError] = {}
    for streaming in (True, False):
        try:
            parse_options(options, streaming=streaming)
        except KafkaSourceOptionError as exc:
            errors[streaming] = exc
    if len(errors) < 2:
        return
    if any(k in keys for k in _BATCH_ONLY) and not any(k in keys for k in _STREAM_ONLY):
        raise errors[False]
    raise errors[True]
