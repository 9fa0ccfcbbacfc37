"""Pure offset logic of the Kafka source: option parsing, offset resolution, rate limits, data loss.

Nothing here talks to Kafka or Spark, so every decision the source makes can be unit-tested
with plain dicts. The source (``source.py``) gathers facts through ``client.py`` and asks these
functions what to do with them.

Conventions (the same as Spark's built-in Kafka source):
- an offset is the offset of the *next* record to read; a range is ``[from, until)``;
- in option JSON, ``-2`` means earliest and ``-1`` means latest;
- offsets recorded in Spark's offset log look like ``{"topic": {"0": 42, "1": 17}}`` with string
  partition keys, topics and partitions sorted, so the same offsets always serialize to the same
  JSON (Spark compares offsets by their JSON text).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, NamedTuple

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

SOURCE_NAME = "rewind_kafka"


class TP(NamedTuple):
    """A topic-partition; hashable and sortable so offset maps have one canonical order."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Offsets = dict[TP, int]


class KafkaSourceOptionError(ValueError):
    """An option of the ``rewind_kafka`` source is missing or has a value it cannot use."""


class UnknownTopicError(ValueError):
    """A subscribed topic does not exist on the cluster."""


class DataLossError(RuntimeError):
    """Records the query should read are gone (retention, truncation, topic recreated or deleted)."""


# ---------------------------------------------------------------------------------------------
# Offset maps <-> JSON
# ---------------------------------------------------------------------------------------------


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """The JSON-safe, canonically ordered form recorded in Spark's offset log."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(obj: Any, what: str = "offset") -> Offsets:
    """Parse ``{"topic": {"0": 42}}`` (a dict or its JSON text) into an offset map."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as exc:
            raise KafkaSourceOptionError(
                f"{what}: not valid JSON ({exc.msg}); expected "
                '{"topic": {"0": 42, "1": -2}}') from exc
    if not isinstance(obj, dict):
        raise KafkaSourceOptionError(
            f'{what}: expected a JSON object like {{"topic": {{"0": 42}}}}, got {type(obj).__name__}')
    out: Offsets = {}
    for topic, parts in obj.items():
        if not isinstance(topic, str) or not topic:
            raise KafkaSourceOptionError(f"{what}: topic names must be non-empty strings, got {topic!r}")
        if not isinstance(parts, dict):
            raise KafkaSourceOptionError(
                f'{what}: topic {topic!r} must map partition numbers to offsets, like {{"0": 42}}')
        for part, value in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise KafkaSourceOptionError(
                    f"{what}: partition {part!r} of topic {topic!r} is not an integer") from None
            if partition < 0:
                raise KafkaSourceOptionError(f"{what}: partition {part!r} of topic {topic!r} is negative")
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaSourceOptionError(
                    f"{what}: offset of {topic!r} partition {partition} must be an integer, got {value!r}")
            out[TP(topic, partition)] = value
    return out


def offsets_json_text(offsets: Mapping[TP, int]) -> str:
    """Compact canonical JSON text of an offset map (for logs, errors and comparisons)."""
    return json.dumps(offsets_to_json(offsets), separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------

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
    "fetchoffset.numretries", "fetchoffset.retryintervalms", "path",
    "eventtimealignment.maxdriftms", "eventtimealignment.idletimeoutms",  # rewind.kafka.alignment
}

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
    alignment: Any = None  # rewind.kafka.alignment.Alignment, or None (off)


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


def _position_option(opts: Mapping[str, str], prefix: str, default: str, *, allow_earliest: bool,
                     allow_latest: bool) -> OffsetSpec:
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


def parse_alignment(opts: Mapping[str, str], streaming: bool) -> Any:
    from rewind.kafka.alignment import parse_alignment as parse

    return parse(opts, streaming)


def _check_spec_topics(spec: OffsetSpec, topics: tuple[str, ...]) -> None:
    """Per-partition JSON may only name subscribed topics (a typo would otherwise be ignored)."""
    extra = sorted({tp.topic for tp in spec.offsets} - set(topics))
    if extra:
        raise KafkaSourceOptionError(
            f"option '{spec.option}' names topic(s) {extra} that are not in 'subscribe' {list(topics)}")


# ---------------------------------------------------------------------------------------------
# Resolving specs against what the cluster holds
# ---------------------------------------------------------------------------------------------


def specific_offsets_needs(spec: OffsetSpec) -> tuple[bool, bool]:
    """(needs earliest, needs latest) look-ups to resolve ``spec``: avoid needless broker calls."""
    if spec.kind == "earliest":
        return True, False
    if spec.kind == "latest":
        return False, True
    if spec.kind == "offsets":
        values = set(spec.offsets.values())
        return EARLIEST in values, LATEST in values
    return False, True  # timestamps may fall back to latest


def check_covers_partitions(spec: OffsetSpec, partitions: list[TP]) -> None:
    """A per-partition spec must name exactly the partitions of the subscribed topics (like Spark)."""
    if spec.kind not in ("offsets", "timestamps"):
        return
    wanted = set(partitions)
    given = set(spec.offsets)
    unknown = sorted(given - wanted)
    if unknown:
        raise KafkaSourceOptionError(
            f"option '{spec.option}' names partition(s) that do not exist: "
            + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in unknown))
    missing = sorted(wanted - given)
    if missing:
        raise KafkaSourceOptionError(
            f"option '{spec.option}' must specify every partition of the subscribed topics; missing "
            + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in missing)
            + (" (use -2 for earliest, -1 for latest)" if spec.kind == "offsets" else ""))


def resolve_offsets(spec: OffsetSpec, partitions: list[TP], earliest: Mapping[TP, int],
                    latest: Mapping[TP, int]) -> Offsets:
    """Concrete offsets for an "earliest" / "latest" / per-partition spec (-2/-1 resolved)."""
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in partitions}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in partitions}
    if spec.kind != "offsets":
        raise ValueError(f"resolve_offsets cannot resolve a {spec.kind} spec")
    check_covers_partitions(spec, partitions)
    out: Offsets = {}
    for tp in partitions:
        off = spec.offsets[tp]
        out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
    return out


def timestamp_targets(spec: OffsetSpec, partitions: list[TP]) -> dict[TP, int]:
    """The timestamp to look up for each partition of a timestamp spec."""
    if spec.kind == "timestamp":
        assert spec.timestamp is not None
        return {tp: spec.timestamp for tp in partitions}
    if spec.kind == "timestamps":
        check_covers_partitions(spec, partitions)
        return {tp: spec.offsets[tp] for tp in partitions}
    raise ValueError(f"timestamp_targets needs a timestamp spec, got {spec.kind}")


def resolve_timestamp_offsets(spec: OffsetSpec, found: Mapping[TP, int | None], latest: Mapping[TP, int],
                              strategy: Literal["error", "latest"], starting: bool) -> Offsets:
    """Offsets for a timestamp spec from ``offsets_for_times`` answers (None: no record at/after it).

    Starting: like Spark, no matching record fails unless the strategy is "latest". Ending: no
    matching record means "read to the end".
    """
    out: Offsets = {}
    for tp in sorted(found):
        off = found[tp]
        if off is None or off < 0:
            if starting and strategy == "error":
                ts = spec.timestamp if spec.kind == "timestamp" else spec.offsets.get(tp)
                raise KafkaSourceOptionError(
                    f"option '{spec.option}': no record at or after timestamp {ts} in {tp.topic}[{tp.partition}]; "
                    "set startingOffsetsByTimestampStrategy=latest to start at the end instead")
            out[tp] = latest[tp]
        else:
            out[tp] = off
    return out


# ---------------------------------------------------------------------------------------------
# Data loss
# ---------------------------------------------------------------------------------------------


def check_start(tp: TP, requested: int, earliest: int, end: int, fail_on_data_loss: bool) -> int:
    """Where reading ``tp`` can really start when ``requested`` is asked for.

    Data is lost when ``requested`` is below the earliest retained offset (retention deleted it)
    or above the partition's end (the topic was truncated or recreated). With failOnDataLoss
    that is an error naming the numbers. Without it, a warning, and the read goes on where Spark's
    connector goes on, so both sources read the same records: from the earliest offset when
    records were deleted; from the end when the partition is behind the start. Why the end: a
    partition truncated (an unclean leader election) holds records the query has read already,
    which a restart at earliest would read twice; the price is that the records of a recreated
    topic below that end are skipped.
    """
    if earliest <= requested <= end:
        return requested
    if requested < earliest:
        msg = (f"data loss in {tp.topic} partition {tp.partition}: requested offset {requested} is below the "
               f"earliest available offset {earliest} (records {requested}..{earliest - 1} were deleted, "
               "e.g. by retention)")
        resume, where = earliest, f"from the earliest offset {earliest}"
    else:
        msg = _beyond_end(tp, requested, earliest, end)
        resume, where = end, f"from the partition's end offset {end}"
    if fail_on_data_loss:
        raise DataLossError(msg + f". Set failOnDataLoss=false to continue {where} instead.")
    log.warning("%s; failOnDataLoss=false, continuing %s", msg, where)
    return resume


def _beyond_end(tp: TP, requested: int, earliest: int, end: int) -> str:
    return (f"data loss in {tp.topic} partition {tp.partition}: requested offset {requested} is beyond the "
            f"partition's end offset {end} (earliest {earliest}); the topic may have been deleted and "
            "recreated or truncated")


def check_missing_partitions(previous: Mapping[TP, int], current: list[TP], fail_on_data_loss: bool) -> list[TP]:
    """Partitions the query was reading that no longer exist (topic deleted): error or drop them."""
    gone = sorted(set(previous) - set(current))
    if gone and fail_on_data_loss:
        raise DataLossError(
            "data loss: partition(s) " + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in gone)
            + " no longer exist (topic deleted?). Set failOnDataLoss=false to drop them and continue.")
    if gone:
        log.warning("partitions %s no longer exist; failOnDataLoss=false, dropping them", gone)
    return gone


# ---------------------------------------------------------------------------------------------
# Rate limiting and planning
# ---------------------------------------------------------------------------------------------


def split_limit(limit: int, backlog: Mapping[TP, int]) -> dict[TP, int]:
    """How many offsets each partition may advance so that the total is at most ``limit``.

    Proportional to each partition's backlog (like Spark's ``rateLimit``), but exact: the shares
    add up to ``min(limit, total backlog)`` and never exceed a partition's backlog. A partition
    whose proportional share is below one still gets one offset when the limit allows (small
    partitions are not starved, as in Spark); the rest is shared by largest remainder. Ties break
    by (topic, partition), so the answer is deterministic.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    nonempty = {tp: b for tp, b in backlog.items() if b > 0}
    out = {tp: 0 for tp in backlog}
    total = sum(nonempty.values())
    if total <= limit:
        out.update(nonempty)
        return out
    if limit < len(nonempty):
        # Fewer offsets than busy partitions: one each to the largest backlogs.
        for tp in sorted(nonempty, key=lambda t: (-nonempty[t], t))[:limit]:
            out[tp] = 1
        return out
    # Partitions whose share is below one get exactly one; repeat, since the others' shares shrink.
    rest = dict(nonempty)
    budget = limit
    while True:
        rest_total = sum(rest.values())
        small = [tp for tp, b in rest.items() if budget * b < rest_total]
        if not small:
            break
        for tp in small:
            out[tp] = 1
            budget -= 1
            del rest[tp]
    # budget < rest_total here, so every share (rounded up) stays within its backlog.
    rest_total = sum(rest.values())
    remainders: list[tuple[int, TP]] = []
    given = 0
    for tp, b in rest.items():
        share, rem = divmod(budget * b, rest_total)
        out[tp] = share
        given += share
        remainders.append((rem, tp))
    remainders.sort(key=lambda r: (-r[0], r[1]))
    for _, tp in remainders[: budget - given]:
        out[tp] += 1
    return out


def rate_limit(start: Mapping[TP, int], end: Mapping[TP, int], limit: int) -> Offsets:
    """End offsets that advance at most ``limit`` offsets in total beyond ``start``.

    ``start`` must hold the effective start of every partition in ``end`` (new partitions at
    their earliest offset, after the data-loss check). The result is never behind ``start`` unless
    ``end`` itself is (then ``end`` is returned for that partition), and never beyond ``end``.
    """
    missing = sorted(set(end) - set(start))
    if missing:
        raise ValueError(f"rate_limit needs a start offset for every partition; missing {missing}")
    backlog = {tp: max(0, e - start[tp]) for tp, e in end.items()}
    shares = split_limit(limit, backlog)
    return {tp: start[tp] + shares[tp] if backlog[tp] > 0 else (e if e < start[tp] else start[tp])
            for tp, e in end.items()}


@dataclass(frozen=True)
class OffsetRange:
    """One Kafka partition's records ``[from_offset, until_offset)``: one Spark input partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        """Offsets in the range; records may be fewer (transaction markers take offsets)."""
        return self.until_offset - self.from_offset


def plan_ranges(start: Mapping[TP, int], end: Mapping[TP, int], earliest: Mapping[TP, int],
                fail_on_data_loss: bool) -> list[OffsetRange]:
    """The non-empty ranges to read for one micro-batch ``start -> end``.

    Partitions in ``end`` but not in ``start`` are new and start at earliest. A start below
    earliest, or an end behind start, is data loss (see ``check_start``). Partitions whose start
    equals their end are skipped unchecked, so ``earliest`` is only needed for the others.
    """
    moved = [tp for tp in sorted(end) if start.get(tp) != end[tp]]
    missing = [tp for tp in moved if tp not in earliest]
    if missing:
        raise ValueError(f"plan_ranges needs the earliest offset of every partition that moved; missing {missing}")
    ranges: list[OffsetRange] = []
    for tp in moved:
        until = end[tp]
        if tp not in start:
            frm = earliest[tp]
        else:
            frm = check_start(tp, start[tp], earliest[tp], until, fail_on_data_loss)
        if until > frm:
            ranges.append(OffsetRange(tp.topic, tp.partition, frm, until))
    return ranges


def plan_batch_ranges(start: Mapping[TP, int], end: Mapping[TP, int], earliest: Mapping[TP, int],
                      latest: Mapping[TP, int], fail_on_data_loss: bool) -> list[OffsetRange]:
    """Ranges of a batch read ``[startingOffsets, endingOffsets)`` after checking both ends exist."""
    ranges: list[OffsetRange] = []
    for tp in sorted(end):
        if start[tp] > latest[tp]:
            # Spark's connector fails here whatever failOnDataLoss says: a batch read has no
            # position of its own to go on from, and an empty answer would hide the mistake.
            raise DataLossError(_beyond_end(tp, start[tp], earliest[tp], latest[tp])
                                + ". A batch read cannot start beyond the end, even with failOnDataLoss=false.")
        frm = check_start(tp, start[tp], earliest[tp], latest[tp], fail_on_data_loss)
        until = end[tp]
        if until > latest[tp]:
            if fail_on_data_loss:
                raise DataLossError(
                    f"endingOffsets for {tp.topic} partition {tp.partition} is {until} but the partition "
                    f"ends at {latest[tp]}. Set failOnDataLoss=false to read to the end instead.")
            log.warning("endingOffsets %d for %s beyond end %d; reading to the end", until, tp, latest[tp])
            until = latest[tp]
        if until < frm:
            raise KafkaSourceOptionError(
                f"endingOffsets ({until}) is below startingOffsets ({frm}) for {tp.topic} partition {tp.partition}")
        if until > frm:
            ranges.append(OffsetRange(tp.topic, tp.partition, frm, until))
    return ranges


def available_now_end(start: Mapping[TP, int], target: Mapping[TP, int]) -> Offsets:
    """End offsets for Trigger.AvailableNow: never beyond the target recorded at query start.

    Partitions that appeared after the target was taken are left out, partitions the query already
    reads but the target lacks keep their start offset, so the query ends once start == target.
    """
    out: Offsets = dict(target)
    for tp, off in start.items():
        out.setdefault(tp, off)
    return out


def plan_latest(start: Mapping[TP, int], ends: Mapping[TP, int], earliest: Mapping[TP, int],
                limit: int | None, fail_on_data_loss: bool) -> Offsets:
    """The end offset of the next micro-batch (what ``latestOffset`` returns).

    ``ends`` holds the partitions to cover and how far each may go (true end offsets, or the
    Trigger.AvailableNow target); ``earliest`` is needed for partitions that are new or moved.
    New partitions start at earliest; starts that lost data are checked (see ``check_start``);
    ``limit`` (ReadMaxRows) is split over the backlogs with ``rate_limit``.
    """
    effective: Offsets = {}
    for tp, end in ends.items():
        if tp not in start:
            effective[tp] = earliest[tp]
        elif start[tp] == end:
            effective[tp] = end
        else:
            effective[tp] = check_start(tp, start[tp], earliest[tp], end, fail_on_data_loss)
    result = dict(ends) if limit is None else rate_limit(effective, ends, limit)
    return {tp: result[tp] for tp in sorted(result)}


_STREAM_ONLY = ("maxoffsetspertrigger",)
_BATCH_ONLY = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")


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
