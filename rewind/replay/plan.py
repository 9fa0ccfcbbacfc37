"""The replay planner: which exact Kafka range ``[start, end)`` per partition a replay reads.

An on-call engineer asks for "stream S, from X to Y" (offsets, ISO timestamps with a zone, or
Spark-style per-partition JSON). The plan turns that into exact offsets per topic-partition, the
number of DATA records each range holds (transaction markers take offsets too, so ``end - start``
over-counts), and problems that say what to change. Anything that would make a replay wrong
(data already deleted, a range past the end, a partition that does not exist) refuses the whole
plan with ``ReplayRefused`` listing every such problem, before any Spark job could start.

Decisions are pure functions over plain data (``parse_bound``, ``ReplayRequest.parse``,
``validate_request``, ``select_partitions``, ``decide_partition``); Kafka is only touched by
``plan_replay`` through ``KafkaOffsetClient`` (ListOffsets: earliest, end, by timestamp) and
``iter_range`` (record counts: transaction markers take offsets, so only a read counts records).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Literal, Mapping, Sequence

from rewind.kafka.offsets import TP, KafkaSourceOptionError, OffsetRange, offsets_from_json, offsets_json_text, \
    offsets_to_json

DEFAULT_COUNT_CAP = 2_000_000  # offsets read to count records exactly; above it counts are upper bounds
BoundKind = Literal["offset", "timestamp", "offsets", "earliest", "latest"]
Severity = Literal["error", "warning", "info"]
_EARLIEST, _LATEST = -2, -1     # Spark's per-partition JSON convention


@dataclass(frozen=True)
class Problem:
    """One finding of the planner; ``error`` refuses the plan, ``warning``/``info`` are notes."""

    kind: str
    message: str
    severity: Severity = "error"
    topic: str | None = None
    partition: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message,
                "topic": self.topic, "partition": self.partition}


class ReplayRefused(ValueError):
    """The replay cannot run as asked; the message lists every refusing problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = [p for p in problems if p.severity == "error"]
        lines = [f"- {p.message}" for p in self.problems]
        super().__init__(f"replay refused ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):\n"
                         + "\n".join(lines))

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (e.g. across Airflow task boundaries)
        return (type(self), (self.problems,))


def _refuse_if_errors(problems: Iterable[Problem]) -> None:
    problems = list(problems)
    if any(p.severity == "error" for p in problems):
        raise ReplayRefused(problems)


# ---------------------------------------------------------------------------------------------
# Bounds and requests (pure)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """One end of the requested range, as the user wrote it and as understood."""

    kind: BoundKind
    text: str
    offset: int | None = None                          # kind == "offset"
    timestamp: datetime | None = None                  # kind == "timestamp" (zone-aware)
    offsets: Mapping[TP, int] | None = None            # kind == "offsets" (-2 earliest, -1 latest)

    @property
    def timestamp_ms(self) -> int:
        assert self.timestamp is not None
        return int(self.timestamp.timestamp() * 1000)

    def describe(self) -> str:
        if self.kind == "timestamp":
            assert self.timestamp is not None
            return self.timestamp.isoformat()
        return self.text


def parse_bound(text: str, what: str = "bound") -> Bound:
    """An offset (int >= 0), ``earliest``/``latest``, an ISO 8601 timestamp WITH zone, or JSON.

    A timestamp without a zone is refused: the same wall-clock time means different records
    depending on the machine's zone, and a replay must not depend on where it was planned.
    """
    raw = str(text).strip()
    if raw.lower() in ("earliest", "latest"):
        return Bound(raw.lower(), raw.lower())  # type: ignore[arg-type]
    if raw.lstrip("+-").isdigit():
        value = int(raw)
        if value < 0:
            _refuse_bound("bad_bound", f"{what} {raw}: offsets are >= 0 (use 'earliest' or 'latest' for the ends)")
        return Bound("offset", raw, offset=value)
    if raw.startswith("{"):
        try:
            offsets = offsets_from_json(raw, what)
        except KafkaSourceOptionError as exc:
            _refuse_bound("bad_bound", str(exc))
        bad = sorted(str(tp) for tp, o in offsets.items() if o < _EARLIEST)
        if bad:
            _refuse_bound("bad_bound", f"{what}: offsets of {', '.join(bad)} are negative; use >= 0, "
                                       "-2 (earliest) or -1 (latest)")
        if not offsets:
            _refuse_bound("bad_bound", f'{what}: the JSON names no partition; expected {{"topic": {{"0": 12}}}}')
        return Bound("offsets", raw, offsets=dict(offsets))
    try:
        stamp = datetime.fromisoformat(raw)
    except ValueError:
        _refuse_bound("bad_bound", f"{what} {raw!r} is neither an offset (e.g. 1200), 'earliest'/'latest', an "
                                   "ISO 8601 timestamp with zone (e.g. 2026-11-22T03:00:00Z) nor per-partition "
                                   'JSON (e.g. {"topic": {"0": 12}})')
    if stamp.tzinfo is None or stamp.utcoffset() is None:
        example = raw + ("Z" if "T" in raw or " " in raw else "T00:00:00Z")
        _refuse_bound("timestamp_without_zone",
                      f"{what} {raw!r} has no time zone; add Z for UTC or an offset like +01:00 "
                      f"(e.g. {example})")
    return Bound("timestamp", raw, timestamp=stamp)


def _refuse_bound(kind: str, message: str) -> Any:
    raise ReplayRefused([Problem(kind, message)])


def _parse_list(value: str | Iterable[Any] | None) -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [i.strip() for i in items if i.strip()] or None


@dataclass(frozen=True)
class ReplayRequest:
    """What the engineer asked for; ``topics``/``partitions`` None mean all of the stream's."""

    stream: str
    start: Bound
    end: Bound
    topics: tuple[str, ...] | None = None
    partitions: tuple[int, ...] | None = None
    allow_beyond_retention: bool = False

    @classmethod
    def parse(cls, stream: str, start: str, end: str, topics: str | Iterable[str] | None = None,
              partitions: str | Iterable[int | str] | None = None,
              allow_beyond_retention: bool = False, registry: Any = None) -> "ReplayRequest":
        """Parse user input, refusing with every problem found (not only the first).

        With ``registry``, the stream and topics are checked too (``validate_request``), so an
        unknown stream and a bad timestamp are reported together.
        """
        problems: list[Problem] = []
        bounds: dict[str, Bound] = {}
        for name, text in (("--from", start), ("--to", end)):
            try:
                bounds[name] = parse_bound(text, name)
            except ReplayRefused as exc:
                problems.extend(exc.problems)
        parts: list[int] = []
        for p in _parse_list(partitions) or []:
            if not p.isdigit():
                problems.append(Problem("bad_partition", f"--partitions: {p!r} is not a partition number "
                                                         "(use e.g. --partitions 0,2)"))
            else:
                parts.append(int(p))
        if len(bounds) == 2:
            problems.extend(order_problems(bounds["--from"], bounds["--to"]))
        topic_list = _parse_list(topics)
        topic_tuple = tuple(dict.fromkeys(topic_list)) if topic_list else None
        if registry is not None:
            problems.extend(_stream_problems(registry, stream, topic_tuple, list(bounds.values()))[1])
        _refuse_if_errors(problems)
        return cls(stream, bounds["--from"], bounds["--to"], topic_tuple,
                   tuple(sorted(set(parts))) if parts else None, allow_beyond_retention)


def order_problems(start: Bound, end: Bound) -> list[Problem]:
    """``from_after_to`` when both bounds are of a kind comparable without Kafka."""
    if start.kind == "offset" and end.kind == "offset" and start.offset > end.offset:  # type: ignore[operator]
        return [Problem("from_after_to", f"--from {start.offset} is after --to {end.offset}; a range is "
                                         "[from, to): swap them")]
    if start.kind == end.kind == "timestamp" and start.timestamp > end.timestamp:  # type: ignore[operator]
        return [Problem("from_after_to", f"--from {start.describe()} is after --to {end.describe()}; swap them")]
    if start.kind == "latest" and end.kind == "earliest":
        return [Problem("from_after_to", "--from latest is after --to earliest; swap them")]
    return []


def validate_request(request: ReplayRequest, registry: Any) -> Any:
    """The request's StreamSpec; refuses an unknown stream or topics the stream does not read.

    Needs no Kafka, so bad input is refused even when no broker is reachable.
    """
    spec, problems = _stream_problems(registry, request.stream, request.topics, [request.start, request.end])
    _refuse_if_errors(problems)
    return spec


def _stream_problems(registry: Any, stream: str, topics: Sequence[str] | None,
                     bounds: Sequence[Bound]) -> tuple[Any, list[Problem]]:
    from rewind.registry import RegistryError

    try:
        spec = registry.get(stream)
    except RegistryError as exc:
        return None, [Problem("unknown_stream", f"{exc} (check the name or pass --registry)")]
    problems: list[Problem] = []
    json_topics = {tp.topic for b in bounds if b.kind == "offsets" for tp in b.offsets or {}}
    for topic in list(topics or ()) + sorted(json_topics - set(topics or ())):
        if topic not in spec.topics:
            problems.append(Problem("unknown_topic", f"topic {topic!r} is not read by stream {spec.name!r}; "
                                                     f"its topics: {', '.join(spec.topics)}", topic=topic))
    outside = sorted(json_topics - set(topics)) if topics else []
    if outside:
        problems.append(Problem("bound_mismatch", f"the per-partition JSON names topic(s) {', '.join(outside)} "
                                                  f"outside --topics {','.join(topics or ())}"))
    return spec, problems


def select_partitions(request: ReplayRequest, stream_topics: Sequence[str],
                      available: Mapping[str, Sequence[int] | None]) -> tuple[list[TP], list[Problem]]:
    """The partitions the replay covers, and problems (unknown topic on Kafka, unknown partition,
    JSON bounds that do not cover exactly the selection).

    ``available``: the partitions of each topic on Kafka (None: the topic does not exist there).
    Without ``--partitions``, a JSON bound selects the partitions it names; else all partitions.
    """
    problems: list[Problem] = []
    topics = list(request.topics or stream_topics)
    json_bounds = [(name, b) for name, b in (("--from", request.start), ("--to", request.end)) if b.kind == "offsets"]
    for topic in topics:
        if available.get(topic) is None:
            problems.append(Problem("unknown_topic", f"topic {topic!r} does not exist on Kafka (create it, or fix "
                                                     "the stream's topics in the registry)", topic=topic))
    wanted: list[TP]
    if request.partitions is not None:
        wanted = [TP(t, p) for t in topics for p in request.partitions]
    elif json_bounds:
        wanted = sorted({tp for _, b in json_bounds for tp in b.offsets or {}})
    else:
        wanted = [TP(t, p) for t in topics for p in sorted(available.get(t) or [])]
    selected: list[TP] = []
    for tp in wanted:
        has = available.get(tp.topic)
        if has is None:
            continue
        if tp.partition not in has:
            problems.append(Problem("unknown_partition", f"topic {tp.topic!r} has no partition {tp.partition}; its "
                                                         f"partitions: {', '.join(map(str, sorted(has)))}",
                                    topic=tp.topic, partition=tp.partition))
        else:
            selected.append(tp)
    for name, b in json_bounds:
        named = set(b.offsets or {})
        missing = [tp for tp in selected if tp not in named]
        extra = sorted(tp for tp in named if tp not in wanted)
        if missing:
            problems.append(Problem("bound_mismatch", f"{name} gives no offset for {', '.join(map(str, missing))}; "
                                                      "add them to the JSON or narrow --partitions"))
        if extra:
            problems.append(Problem("bound_mismatch", f"{name} names {', '.join(map(str, extra))}, which the "
                                                      "selection does not include; drop them or widen --partitions"))
    return sorted(set(selected)), problems


# ---------------------------------------------------------------------------------------------
# Plans (pure)
# ---------------------------------------------------------------------------------------------


@dataclass
class PartitionPlan:
    """One partition's range ``[start, end)`` and what is known about it."""

    topic: str
    partition: int
    start: int
    end: int
    records: int               # data records in range (an upper bound when not exact)
    earliest: int
    high: int                  # true end offset (Fetch high watermark / last stable offset)
    problems: list[Problem] = field(default_factory=list)
    exact: bool = False        # records counted by reading the range
    first_offset: int | None = None  # first / last data record in range (when counted)
    last_offset: int | None = None
    missing: int = 0           # offsets asked for that retention already deleted (allowed case)

    @property
    def tp(self) -> TP:
        return TP(self.topic, self.partition)

    @property
    def offsets(self) -> int:
        return max(0, self.end - self.start)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end,
                "offsets": self.offsets, "records": self.records, "exact": self.exact,
                "first_offset": self.first_offset, "last_offset": self.last_offset, "earliest": self.earliest,
                "high": self.high, "missing": self.missing, "problems": [p.to_json() for p in self.problems]}


def decide_partition(tp: TP, start: int, end: int, earliest: int, high: int, *, allow_beyond_retention: bool = False,
                     end_in_future: bool = False) -> PartitionPlan:
    """Apply the range rules to one partition's resolved offsets (no Kafka here).

    - start > end: ``from_after_to`` (refused);
    - end > high: ``after_high_watermark`` (refused, naming the current end). A timestamp never
      resolves past the end; one in the future only earns an info note that it was clamped;
    - start < earliest: ``before_retention``, refused unless allowed, then start moves to the
      earliest retained offset and ``missing`` counts what is gone;
    - start == end: ``empty`` (info).
    ``records`` starts as the upper bound ``end - start``; counting replaces it.
    """
    where = f"{tp.topic}[{tp.partition}]"
    problems: list[Problem] = []

    def add(kind: str, message: str, severity: Severity = "error") -> None:
        problems.append(Problem(kind, f"{where}: {message}", severity, tp.topic, tp.partition))

    missing = 0
    if start > end:
        add("from_after_to", f"--from resolves to offset {start}, after --to at offset {end}; a range is "
                             "[from, to): swap them or move one")
    elif end > high:
        add("after_high_watermark", f"--to offset {end} is past the end of the partition, which is {high} now "
                                    f"(the next offset to be written); use --to {high} or less, or 'latest'")
    elif start < earliest:
        gone = min(earliest, end) - start
        if allow_beyond_retention:
            missing = gone
            add("before_retention", f"offsets [{start}, {start + gone}) are gone (retention): {gone} offsets "
                                    f"cannot be replayed; replaying from {min(earliest, end)}", "warning")
            start = min(earliest, end)
        else:
            add("before_retention", f"--from resolves to offset {start}, but the earliest offset still retained "
                                    f"is {earliest}: offsets [{start}, {min(earliest, end)}) are already deleted. "
                                    f"Use --from {earliest} or later, or --allow-beyond-retention to replay what "
                                    f"is left and record the {gone} missing offsets")
    if end_in_future and end == high and not problems:
        add("end_clamped", f"--to is in the future; the range ends at the current end {end} (later records are "
                           "not part of this replay)", "info")
    if start == end and not any(p.severity == "error" for p in problems):
        add("empty", f"the range [{start}, {end}) is empty: nothing to replay here", "info")
    return PartitionPlan(tp.topic, tp.partition, start, end, max(0, end - start), earliest, high, problems,
                         exact=start >= end, missing=missing)


def apply_count(plan: PartitionPlan, records: int, first: int | None, last: int | None) -> PartitionPlan:
    """The plan with its exact data-record count; a non-empty range of markers only is ``empty``."""
    problems = list(plan.problems)
    if records == 0 and plan.end > plan.start:
        problems.append(Problem("empty", f"{plan.topic}[{plan.partition}]: the range [{plan.start}, {plan.end}) "
                                         "holds no data records (only transaction markers): nothing to replay here",
                                "info", plan.topic, plan.partition))
    return replace(plan, records=records, exact=True, first_offset=first, last_offset=last, problems=problems)


@dataclass
class ReplayPlan:
    """What ``rewind replay run`` executes: exact ``[start, end)`` per partition, plus notes."""

    stream: str
    start: str                 # the bounds as requested (for the record)
    end: str
    partitions: list[PartitionPlan]
    problems: list[Problem] = field(default_factory=list)  # plan-level and every partition's
    allow_beyond_retention: bool = False
    count_cap: int = DEFAULT_COUNT_CAP
    planned_at: str = ""

    @property
    def total_records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def total_offsets(self) -> int:
        return sum(p.offsets for p in self.partitions)

    @property
    def exact(self) -> bool:
        return all(p.exact for p in self.partitions)

    @property
    def missing(self) -> int:
        return sum(p.missing for p in self.partitions)

    @property
    def empty(self) -> bool:
        return self.total_records == 0

    def starting_offsets(self) -> dict[TP, int]:
        return {p.tp: p.start for p in self.partitions}

    def ending_offsets(self) -> dict[TP, int]:
        return {p.tp: p.end for p in self.partitions}

    def starting_offsets_json(self) -> str:
        """Spark's ``startingOffsets`` option text: ``{"topic":{"0":12}}`` (canonical order)."""
        return offsets_json_text(self.starting_offsets())

    def ending_offsets_json(self) -> str:
        """Spark's ``endingOffsets`` option text (exclusive ends)."""
        return offsets_json_text(self.ending_offsets())

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "from": self.start, "to": self.end, "planned_at": self.planned_at,
                "allow_beyond_retention": self.allow_beyond_retention, "total_records": self.total_records,
                "total_offsets": self.total_offsets, "exact": self.exact, "count_cap": self.count_cap,
                "missing_offsets": self.missing,
                "startingOffsets": offsets_to_json(self.starting_offsets()),
                "endingOffsets": offsets_to_json(self.ending_offsets()),
                "partitions": [p.to_json() for p in self.partitions],
                "problems": [p.to_json() for p in self.problems]}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | str) -> "ReplayPlan":
        """Rebuild a plan from ``to_json()`` (a replay run may receive the plan as JSON)."""
        d = json.loads(obj) if isinstance(obj, str) else obj

        def probs(items: Iterable[Mapping[str, Any]]) -> list[Problem]:
            return [Problem(i["kind"], i["message"], i["severity"], i.get("topic"), i.get("partition")) for i in items]

        parts = [PartitionPlan(p["topic"], p["partition"], p["start"], p["end"], p["records"], p["earliest"],
                               p["high"], probs(p["problems"]), p["exact"], p.get("first_offset"),
                               p.get("last_offset"), p.get("missing", 0)) for p in d["partitions"]]
        return cls(d["stream"], d["from"], d["to"], parts, probs(d["problems"]), d["allow_beyond_retention"],
                   d["count_cap"], d["planned_at"])


_INFO_LEGEND = {
    "end_clamped": "--to is in the future: each range ends at its partition's current end; records written "
                   "later are not part of this replay",
    "empty": "an empty range (or one holding only transaction markers) replays nothing",
}


def format_plan(plan: ReplayPlan) -> str:
    """The plan as a table for humans: one row per partition, then totals and notes."""
    header = ("topic", "partition", "[start, end)", "records", "notes")
    rows = []
    for p in plan.partitions:
        notes = [pr.kind.replace("_", " ") + (f" ({p.missing} offsets missing)" if pr.kind == "before_retention"
                                              else "") for pr in p.problems]
        if not p.exact:
            notes.append("upper bound (not counted)")
        rows.append((p.topic, str(p.partition), f"[{p.start}, {p.end})",
                     str(p.records) if p.exact else f"<= {p.records}", "; ".join(notes)))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'>' if i in (1, 3) else '<'}{w}}}" for i, w in enumerate(widths))
    lines = [f"replay plan for stream {plan.stream!r}: from {plan.start} to {plan.end}"]
    lines += [fmt.format(*r).rstrip() for r in [header, *rows]]
    total = f"{plan.total_records}" if plan.exact else f"at most {plan.total_records}"
    lines.append(f"total: {total} data records in {plan.total_offsets} offsets over {len(plan.partitions)} "
                 f"partition(s)" + ("" if plan.exact else f" (the range spans more than {plan.count_cap:,} offsets, "
                                                          "so records were not counted: end - start)"))
    if plan.missing:
        lines.append(f"missing: {plan.missing} offsets asked for are beyond retention and will not be replayed")
    lines += [f"{p.severity}: {p.message}" for p in plan.problems if p.severity != "info"]
    lines += [f"note: {_INFO_LEGEND[k]}" for k in dict.fromkeys(p.kind for p in plan.problems if p.severity == "info")
              if k in _INFO_LEGEND]
    lines.append("(plan only: nothing was written to the sink or changed)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Planning against Kafka (the edge)
# ---------------------------------------------------------------------------------------------


def consumer_config(spec: Any, bootstrap: str) -> dict[str, Any]:
    """Consumer settings for look-ups and counts: the stream's own ``kafka.*`` source options
    (isolation level, security) so the plan counts what the stream itself would read."""
    from rewind.kafka.client import stream_consumer_config

    return stream_consumer_config(spec.source.options, bootstrap, f"rewind-replay-plan-{spec.name}")


def _resolve(bound: Bound, tps: Sequence[TP], earliest: Mapping[TP, int], high: Mapping[TP, int],
             by_time: Mapping[TP, int | None]) -> dict[TP, int]:
    out: dict[TP, int] = {}
    for tp in tps:
        if bound.kind == "offset":
            out[tp] = int(bound.offset)  # type: ignore[arg-type]
        elif bound.kind == "earliest":
            out[tp] = earliest[tp]
        elif bound.kind == "latest":
            out[tp] = high[tp]
        elif bound.kind == "timestamp":
            found = by_time.get(tp)
            out[tp] = high[tp] if found is None else found  # no record that late: the end
        else:
            value = (bound.offsets or {})[tp]
            out[tp] = earliest[tp] if value == _EARLIEST else high[tp] if value == _LATEST else value
    return out


def count_records(config: Mapping[str, Any], plan: PartitionPlan,
                  timeout_s: float) -> tuple[int, int | None, int | None]:
    """(data records, first offset, last offset) in ``[start, end)`` by reading only offsets.

    Reading is the only exact way: transaction markers take offsets and are never delivered.
    """
    from rewind.kafka.client import iter_range

    n, first, last = 0, None, None
    for batch in iter_range(config, OffsetRange(plan.topic, plan.partition, plan.start, plan.end), 10_000, timeout_s):
        if batch:
            n += len(batch)
            first = batch[0].offset() if first is None else first
            last = batch[-1].offset()
    return n, first, last


def plan_replay(request: ReplayRequest, registry: Any, bootstrap: str, *, client: Any = None,
                count_cap: int = DEFAULT_COUNT_CAP, now: datetime | None = None,
                timeout_s: float = 60.0) -> ReplayPlan:
    """Resolve ``request`` against Kafka into a ``ReplayPlan``, or raise ``ReplayRefused``.

    Refusals come in stages, each listing all of its problems: the request itself (stream,
    topics; no Kafka needed), then partitions on Kafka, then the per-partition ranges. Records
    are counted only when the plan is not refused and the total range is within ``count_cap``.
    """
    from rewind.kafka.client import KafkaOffsetClient
    from rewind.kafka.offsets import UnknownTopicError

    spec = validate_request(request, registry)
    now = now or datetime.now(timezone.utc)
    config = consumer_config(spec, bootstrap)
    own = client is None
    client = client or KafkaOffsetClient(config, timeout_s)
    try:
        topics = list(request.topics or spec.topics)
        available: dict[str, list[int] | None] = {}
        for topic in topics:
            try:
                available[topic] = [tp.partition for tp in client.partitions([topic])]
            except UnknownTopicError:
                available[topic] = None
        tps, problems = select_partitions(request, spec.topics, available)
        _refuse_if_errors(problems)
        earliest = client.earliest_offsets(tps)
        high = client.end_offsets(tps)
        stamps = {b.timestamp_ms for b in (request.start, request.end) if b.kind == "timestamp"}
        by_time = {ms: client.offsets_for_times({tp: ms for tp in tps}) for ms in sorted(stamps)}
        start = _resolve(request.start, tps, earliest, high, by_time.get(_ms(request.start), {}))
        end = _resolve(request.end, tps, earliest, high, by_time.get(_ms(request.end), {}))
        end_in_future = request.end.kind == "timestamp" and request.end.timestamp > now  # type: ignore[operator]
        parts = [decide_partition(tp, start[tp], end[tp], earliest[tp], high[tp],
                                  allow_beyond_retention=request.allow_beyond_retention,
                                  end_in_future=end_in_future) for tp in tps]
        _refuse_if_errors(p for part in parts for p in part.problems)
        if sum(p.offsets for p in parts) <= count_cap:
            parts = [apply_count(p, *count_records(config, p, timeout_s)) if p.offsets else p for p in parts]
        return ReplayPlan(request.stream, request.start.describe(), request.end.describe(), parts,
                          [p for part in parts for p in part.problems], request.allow_beyond_retention,
                          count_cap, now.isoformat())
    finally:
        if own:
            client.close()


def _ms(bound: Bound) -> int | None:
    return bound.timestamp_ms if bound.kind == "timestamp" else None
