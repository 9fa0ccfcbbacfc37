"""Event-time alignment at admission (Flink's watermark alignment), for the Python source.

Why: Spark's watermark is the maximum event time seen over all partitions minus the delay. When
one partition holds a backlog of older records (a restart after an outage, a burst the sticky
partitioner put on one partition) and the others carry newer ones, reading them side by side
runs the watermark past the lagging partition's records, and every stateful operator drops them
(Rewind routes them to the dead-letter table, but they are lost to the results). Aligned
admission plans each micro-batch so that no partition is read further ahead, in Kafka
timestamps, than the slowest partition's next record plus ``maxDriftMs``: the slow partition
catches up first, and the watermark cannot pass its records.

Options (streaming reads of ``format("rewind_kafka")`` only; off when ``maxDriftMs`` is absent):

- ``eventTimeAlignment.maxDriftMs``: how far (ms of Kafka timestamp) any partition may run ahead
  of the slowest; keep it below the stream's watermark delay.
- ``eventTimeAlignment.idleTimeoutMs``: a partition with nothing to read whose last record is
  older than this (default 60000) is idle and holds nobody back.

Spark's own connector plans its batches in the JVM and offers no such hook: there, late routing
(``rewind.driver.late_routing``) still catches every record the watermark passes.

Pure: the source gathers the facts (the timestamp of each partition's next record, or of its last
one when it has nothing to read; the first offset past the horizon) and these functions decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rewind.kafka.types import TP, KafkaSourceOptionError, Offsets

MAX_DRIFT = "eventtimealignment.maxdriftms"
IDLE_TIMEOUT = "eventtimealignment.idletimeoutms"
OPTIONS = (MAX_DRIFT, IDLE_TIMEOUT)
DEFAULT_IDLE_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class Alignment:
    max_drift_ms: int
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS


def parse_alignment(opts: Mapping[str, str], streaming: bool) -> Alignment | None:
    """The alignment options (``opts`` with lower-case keys), or None when alignment is off."""
    given = [k for k in OPTIONS if k in opts]
    if not given:
        return None
    if not streaming:
        raise KafkaSourceOptionError(f"option '{given[0]}' is only valid for streaming queries (a batch read "
                                     "reads its whole range at once)")
    if MAX_DRIFT not in opts:
        raise KafkaSourceOptionError("option 'eventTimeAlignment.idleTimeoutMs' needs 'eventTimeAlignment.maxDriftMs' "
                                     "(alignment is off without a drift bound)")

    def ms(key: str, label: str, minimum: int) -> int:
        try:
            value = int(str(opts[key]).strip())
        except ValueError:
            raise KafkaSourceOptionError(f"option '{label}': expected milliseconds, got {opts[key]!r}") from None
        if value < minimum:
            raise KafkaSourceOptionError(f"option '{label}': must be >= {minimum} ms, got {value}")
        return value

    drift = ms(MAX_DRIFT, "eventTimeAlignment.maxDriftMs", 0)
    idle = ms(IDLE_TIMEOUT, "eventTimeAlignment.idleTimeoutMs", 1) if IDLE_TIMEOUT in opts else DEFAULT_IDLE_TIMEOUT_MS
    return Alignment(drift, idle)


def probe_positions(start: Mapping[TP, int], ends: Mapping[TP, int]) -> dict[TP, int]:
    """Which record's timestamp tells each partition's progress: its next record when it has a
    backlog, else its last record (nothing at all for an empty partition)."""
    out: dict[TP, int] = {}
    for tp, end in ends.items():
        begin = start.get(tp, end)
        if begin < end:
            out[tp] = begin
        elif end > 0:
            out[tp] = end - 1
    return out


def horizon_ms(start: Mapping[TP, int], ends: Mapping[TP, int], stamps: Mapping[TP, int | None], now_ms: int,
               align: Alignment) -> int | None:
    """The latest Kafka timestamp any partition may be read to in this batch: the slowest active
    partition's next record plus the drift. A partition with nothing to read whose last record is
    older than the idle timeout is idle (left out); None when no partition is active or a
    timestamp needed is unknown (then admission is not limited this time)."""
    active: list[int] = []
    for tp, end in ends.items():
        ts = stamps.get(tp)
        backlog = start.get(tp, end) < end
        if ts is None:
            if backlog:
                return None  # a partition with records whose time is unknown: do not guess
            continue
        if not backlog and now_ms - ts > align.idle_timeout_ms:
            continue
        active.append(ts)
    return min(active) + align.max_drift_ms if active else None


def cap_ends(start: Mapping[TP, int], ends: Mapping[TP, int], first_past: Mapping[TP, int | None]) -> Offsets:
    """End offsets capped at the first record past the horizon (``first_past``: the first offset
    whose timestamp is after it, None when there is none); never behind the start."""
    out: Offsets = {}
    for tp, end in ends.items():
        cap = first_past.get(tp)
        begin = start.get(tp, end)
        out[tp] = end if cap is None else max(min(end, cap), min(begin, end))
    return out
