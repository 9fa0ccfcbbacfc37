"""The pure decisions of the Kafka source: where a read starts and ends, what data loss is, how much a batch takes.

Nothing here talks to Kafka or Spark, so every decision the source makes can be unit-tested with
plain dicts. The source (``source.py``) gathers facts through ``lookups.py`` (earliest and end
offsets, offsets for timestamps) and asks these functions what to do with them:

- resolving a starting/ending ``OffsetSpec`` (``rewind.kafka.options``) to concrete offsets;
- data loss: a start below the earliest retained offset or beyond the end, partitions that
  vanished; an error with the numbers under failOnDataLoss, else where Spark's connector goes on;
- rate limits: ``maxOffsetsPerTrigger`` split over the partitions' backlogs, exactly;
- planning: the offset ranges of one micro-batch or one batch read (Spark input partitions).

Offsets follow Spark's conventions (see ``rewind.kafka.types``): the offset of the next record to
read, ranges ``[from, until)``, -2 earliest and -1 latest in per-partition specs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

from rewind.kafka.options import OffsetSpec
from rewind.kafka.types import (
    EARLIEST,
    LATEST,
    TP,
    DataLossError,
    KafkaSourceOptionError,
    OffsetRange,
    Offsets,
)

log = logging.getLogger(__name__)


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
