"""The replay planner's edge: ask Kafka what a request means, count the records, build the plan.

``plan_replay`` is the only place a replay plan touches Kafka: ListOffsets through
``KafkaOffsetClient`` (earliest, end, by timestamp) and ``iter_range`` for the record counts
(transaction markers take offsets and are never delivered, so only a read counts records
exactly). Every decision on the answers is ``rewind.replay.request``'s or ``rewind.replay.plan``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rewind.kafka.client_config import stream_consumer_config
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.kafka.reader import iter_range
from rewind.kafka.types import TP, OffsetRange, UnknownTopicError
from rewind.replay.plan import (
    DEFAULT_COUNT_CAP,
    PartitionPlan,
    ReplayPlan,
    apply_count,
    decide_partition,
    resolve_bound,
)
from rewind.replay.problems import refuse_if_errors
from rewind.replay.request import Bound, ReplayRequest, select_partitions, validate_request


def consumer_config(spec: Any, bootstrap: str) -> dict[str, Any]:
    """Consumer settings for look-ups and counts: the stream's own ``kafka.*`` source options
    (isolation level, security) so the plan counts what the stream itself would read."""

    return stream_consumer_config(spec.source.options, bootstrap, f"rewind-replay-plan-{spec.name}")


def count_records(config: Mapping[str, Any], plan: PartitionPlan,
                  timeout_s: float) -> tuple[int, int | None, int | None]:
    """(data records, first offset, last offset) in ``[start, end)`` by reading only offsets.

    Reading is the only exact way: transaction markers take offsets and are never delivered.
    """

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

    spec = validate_request(request, registry)
    now = now or datetime.now(UTC)
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
        refuse_if_errors(problems)
        earliest = client.earliest_offsets(tps)
        high = client.end_offsets(tps)
        stamps = {b.timestamp_ms for b in (request.start, request.end) if b.kind == "timestamp"}
        by_time: dict[int | None, Mapping[TP, int | None]] = {  # looked up by _ms(bound): None when not a timestamp
            ms: client.offsets_for_times({tp: ms for tp in tps}) for ms in sorted(stamps)}
        start = resolve_bound(request.start, tps, earliest, high, by_time.get(_ms(request.start), {}))
        end = resolve_bound(request.end, tps, earliest, high, by_time.get(_ms(request.end), {}))
        end_in_future = request.end.kind == "timestamp" and request.end.timestamp > now  # type: ignore[operator]
        parts = [decide_partition(tp, start[tp], end[tp], earliest[tp], high[tp],
                                  allow_beyond_retention=request.allow_beyond_retention,
                                  end_in_future=end_in_future) for tp in tps]
        refuse_if_errors(p for part in parts for p in part.problems)
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
