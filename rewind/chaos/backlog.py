"""A skewed restart's backlog: the partition and event time of each of its records (pure).

Why a module of its own: the skewed restart reproduces the outage after which the global
watermark runs past a lagging partition. Its segment of events is written while the stream is
down as unequal backlogs whose event times (and Kafka timestamps) are skewed across the
partitions by more than the watermark delay, straddling the watermark the stream stopped at.
`skew_backlog` lays that out from the fault's params (`rewind.chaos.schedule`); the producer
(`rewind.chaos.producer`) writes it, and the known set (`rewind.chaos.known_set.backlog_behind`)
predicts from the same plan how many records must end behind the watermark. Nothing here does
I/O or reads the clock.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rewind.chaos.schedule import ScheduleError

#: The skewed restart's backlog, in units of the stream's watermark delay: the lagging partition's
#: records span LAG_SPAN_DELAYS of event time, the others' LEAD_SPAN_DELAYS, and the others start
#: ``skew_delays`` (> 1) after the lagging partition's newest record.
LAG_SPAN_DELAYS = 0.5
LEAD_SPAN_DELAYS = 0.25


@dataclass(frozen=True)
class BacklogPlan:
    """Where and when each sequence number of a skewed restart's segment is written.

    The first ``lagging`` share of the sequence numbers goes to the lagging partition with the
    segment's oldest event times, evenly over ``[lag_from_ms, lag_to_ms]``; the rest round-robin
    over the other partitions, evenly over ``[lead_from_ms, lead_to_ms]``, which starts
    ``skew_delays`` watermark delays after the lagging partition's newest record. The lagging
    range straddles ``watermark_ms``, the watermark the stream had reached when it stopped, so its
    oldest records are behind it on arrival (Spark's stateful operators drop them: they must end
    as ``behind_watermark`` dead letters), and a catch-up that reads the backlog over several
    batches carries the watermark past more of them. Kafka timestamp = event time.
    """

    start_seq: int
    end_seq: int
    lagging_partition: int
    leading_partitions: tuple[int, ...]
    lagging_count: int
    watermark_ms: int
    delay_ms: int
    lag_from_ms: int
    lag_to_ms: int
    lead_from_ms: int
    lead_to_ms: int

    @property
    def newest_ms(self) -> int:
        return self.lead_to_ms

    def place(self, seq: int) -> tuple[int, int]:
        """(partition, event time = Kafka timestamp in ms) of sequence number ``seq``."""
        if not self.start_seq <= seq < self.end_seq:
            raise ValueError(f"seq {seq} is not in the backlog [{self.start_seq}, {self.end_seq})")
        i = seq - self.start_seq
        if i < self.lagging_count:
            return self.lagging_partition, _spread_ms(self.lag_from_ms, self.lag_to_ms, i, self.lagging_count)
        j, m = i - self.lagging_count, self.end_seq - self.start_seq - self.lagging_count
        return (self.leading_partitions[j % len(self.leading_partitions)],
                _spread_ms(self.lead_from_ms, self.lead_to_ms, j, m))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _spread_ms(lo: int, hi: int, i: int, n: int) -> int:
    return lo if n <= 1 else lo + (hi - lo) * i // (n - 1)


def skew_backlog(params: dict[str, Any], start_seq: int, end_seq: int, partitions: int, watermark_ms: int,
                 delay_ms: int) -> BacklogPlan:
    """The backlog of a skewed restart (pure): its fault's params, its segment's sequence numbers,
    the topic's partitions, the watermark the stream stopped at and its watermark delay."""
    if partitions < 2:
        raise ScheduleError(f"a skewed restart needs a topic of at least 2 partitions (this one has {partitions})")
    n = end_seq - start_seq
    if n < 2:
        raise ScheduleError(f"a skewed restart needs at least 2 events in its segment, got {n}")
    if delay_ms <= 0:
        raise ScheduleError("a skewed restart needs a stream with a watermark delay")
    lagging = int(params.get("lagging_partition", 0)) % partitions
    share, skew, behind = float(params["lagging_share"]), float(params["skew_delays"]), float(params["behind_share"])
    if skew <= 1.0:
        raise ScheduleError(f"skew_delays {skew} must be more than 1 watermark delay")
    lag_span, lead_span = round(LAG_SPAN_DELAYS * delay_ms), round(LEAD_SPAN_DELAYS * delay_ms)
    lag_from = watermark_ms - round(behind * lag_span)
    lag_to = lag_from + lag_span
    lead_from = lag_to + round(skew * delay_ms)
    return BacklogPlan(start_seq, end_seq, lagging, tuple(p for p in range(partitions) if p != lagging),
                       max(1, min(n - 1, round(n * share))), watermark_ms, delay_ms, lag_from, lag_to, lead_from,
                       lead_from + lead_span)
