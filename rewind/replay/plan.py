"""The replay plan: the exact Kafka range ``[start, end)`` per partition a replay reads, and why.

The plan turns a parsed request (``rewind.replay.request``), once resolved against Kafka, into
exact offsets per topic-partition, the number of DATA records each range holds (transaction
markers take offsets too, so ``end - start`` over-counts), and problems that say what to change.
Anything that would make a replay wrong (data already deleted, a range past the end) refuses the
whole plan with ``ReplayRefused`` listing every such problem, before any Spark job could start.

Everything here is a pure decision over plain data (``resolve_bound``, ``decide_partition``,
``apply_count``, ``format_plan``); ``rewind.replay.planner`` asks Kafka and hands the answers in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rewind.kafka.types import EARLIEST, LATEST, TP, offsets_json_text, offsets_to_json
from rewind.replay.problems import Problem, Severity
from rewind.replay.request import Bound

DEFAULT_COUNT_CAP = 2_000_000  # offsets read to count records exactly; above it counts are upper bounds


def resolve_bound(bound: Bound, tps: Sequence[TP], earliest: Mapping[TP, int], high: Mapping[TP, int],
                  by_time: Mapping[TP, int | None]) -> dict[TP, int]:
    """The offset ``bound`` means in each partition, given its earliest and end offsets and, for a
    timestamp, the first offset at or after it (None: no record that late, so the end)."""
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
            out[tp] = earliest[tp] if value == EARLIEST else high[tp] if value == LATEST else value
    return out


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
