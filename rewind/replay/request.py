"""A replay request: what the engineer asked for, parsed and checked before Kafka is asked anything.

An on-call engineer asks for "stream S, from X to Y" (offsets, ISO timestamps with a zone, or
Spark-style per-partition JSON), optionally narrowed to topics and partitions. This module turns
that text into a ``ReplayRequest`` and refuses bad input with every problem at once
(``ReplayRefused``): a bound that is no bound, a timestamp without a zone, a range backwards, a
stream or topic the registry does not know. Only ``select_partitions`` needs to know what exists
on Kafka, and it is handed that as plain data by ``rewind.replay.planner``. Everything here is
pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rewind.kafka.types import EARLIEST, TP, KafkaSourceOptionError, offsets_from_json
from rewind.replay.problems import Problem, ReplayRefused, refuse, refuse_if_errors

BoundKind = Literal["offset", "timestamp", "offsets", "earliest", "latest"]


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
            raise refuse("bad_bound", f"{what} {raw}: offsets are >= 0 (use 'earliest' or 'latest' for the ends)")
        return Bound("offset", raw, offset=value)
    if raw.startswith("{"):
        try:
            offsets = offsets_from_json(raw, what)
        except KafkaSourceOptionError as exc:
            raise refuse("bad_bound", str(exc))
        bad = sorted(str(tp) for tp, o in offsets.items() if o < EARLIEST)
        if bad:
            raise refuse("bad_bound", f"{what}: offsets of {', '.join(bad)} are negative; use >= 0, "
                                      "-2 (earliest) or -1 (latest)")
        if not offsets:
            raise refuse("bad_bound", f'{what}: the JSON names no partition; expected {{"topic": {{"0": 12}}}}')
        return Bound("offsets", raw, offsets=dict(offsets))
    try:
        stamp = datetime.fromisoformat(raw)
    except ValueError:
        raise refuse("bad_bound", f"{what} {raw!r} is neither an offset (e.g. 1200), 'earliest'/'latest', an "
                                  "ISO 8601 timestamp with zone (e.g. 2026-11-22T03:00:00Z) nor per-partition "
                                  'JSON (e.g. {"topic": {"0": 12}})')
    if stamp.tzinfo is None or stamp.utcoffset() is None:
        example = raw + ("Z" if "T" in raw or " " in raw else "T00:00:00Z")
        raise refuse("timestamp_without_zone",
                     f"{what} {raw!r} has no time zone; add Z for UTC or an offset like +01:00 "
                     f"(e.g. {example})")
    return Bound("timestamp", raw, timestamp=stamp)


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
        refuse_if_errors(problems)
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
    refuse_if_errors(problems)
    return spec


def _stream_problems(registry: Any, stream: str, topics: Sequence[str] | None,
                     bounds: Sequence[Bound]) -> tuple[Any, list[Problem]]:
    from rewind.registry import RegistryError  # lazy: start-up of the CLI

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
