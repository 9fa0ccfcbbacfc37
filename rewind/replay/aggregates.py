"""Aggregate tables after a replay: each group it touches recomputed from ALL its records, or left alone.

A replay reads a bounded range (some partitions, a slice of offsets), so the transform's aggregate
rows over it are partial: a group's other records lie outside the range. Writing them would
replace a whole total with a partial one (a replay of one partition of six overwrote 108 of 144
totals that way, and the old contract proof, which checked keys only, passed). So a replay never
writes the transform's aggregate rows. It learns from them (or from the identity rows, for an
aggregate with declared measures) WHICH groups the range touches, and afterwards recomputes each
of those groups by running the stream's own ``build`` as a bounded batch over every retained
record of every partition (``rewind.driver.bounded``), keeping only those groups' rows: the same
code as the stream, over all of a group's records. Only rows that differ are written
(``batch_id`` NULL: written by a replay).

Which groups: those the live stream has CLOSED (window end at or before the watermark of its last
committed batch) or already wrote; open ones stay with the live stream (it still holds them in its
state and will emit them whole). Records the stream routed as behind the watermark are left out
of the recomputation, as its operators left them out, unless this replay brings them back
(``rewind.replay.late``). Groups whose records retention may have deleted (a window that starts
before the first retained record's timestamp, where a partition lost records) are left alone and
reported: recomputing them would shrink them.

A row of a recomputed group that no record makes (every record of the group is still a dead letter,
or there is none: the old replay's partial totals made such rows out of late records) is removed:
the group's whole total is "no row". It is kept first in the replay's run dir (``removed-<table>.jsonl``);
a sink that cannot delete keeps it, and the proof names it. Rows a batch past the stream's last
committed one wrote are never removed: they may hold records past what the recomputation read.

Refused before anything is written (``refusals``): a ``replace`` table not declared an aggregate
(nothing says how to recompute it), and an aggregate without a window when retention has deleted
records (its groups span the whole history). Pure decisions here; ``rewind.replay.job`` does I/O.

Every group the replay touches falls in exactly one class, and the classes sum to the groups
touched (``group_fate``, from plain facts about the group; ``AggregateOutcome.check``):

- ``rewritten``: recomputed, and its row was missing or held other values: written;
- ``unchanged``: recomputed, and its row already held them;
- ``removed``: recomputed, no counted record makes it, and it had rows: deleted (a copy kept);
- ``left_alone``, with its reason (``REASONS``): ``open`` (the live stream has not closed it),
  ``past_retention``, ``all_late`` (recomputed, but no counted record makes it -- its records are
  late dead letters -- and it has no row: nothing to write nor remove), ``later_batch`` (no
  record makes it, and a row of it was written by a batch after the stream's last committed one),
  ``sink_cannot_delete`` (no record makes it, and the sink cannot delete its row);
- ``refused``: an aggregate without a window once retention deleted records; ``refusals`` refuses
  such a replay before anything is written, so a report that exists counts none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pandas as pd

from rewind.kafka.types import TP
from rewind.proof.aggregates import group_text, plain_value
from rewind.proof.values import ANY, equal_values
from rewind.replay.problems import Problem

EXAMPLES = 5


# The classes of a touched group: each falls in exactly one.
REWRITTEN, UNCHANGED, REMOVED, LEFT_ALONE, REFUSED = "rewritten", "unchanged", "removed", "left_alone", "refused"
CLASSES = (REWRITTEN, UNCHANGED, REMOVED, LEFT_ALONE, REFUSED)
# Why a group is left alone (the order the report lists them in).
OPEN, PAST_RETENTION, ALL_LATE, LATER_BATCH, CANNOT_DELETE = (
    "open", "past_retention", "all_late", "later_batch", "sink_cannot_delete")
REASONS = {
    OPEN: "left open for the live stream: not closed yet",
    PAST_RETENTION: "records possibly past retention",
    ALL_LATE: "all records late dead letters: no counted record makes it, and it has no row",
    LATER_BATCH: "no record makes it, but a batch after the stream's last committed one wrote its row",
    CANNOT_DELETE: "no record makes it, and the sink cannot delete its row: kept",
}


@dataclass(frozen=True)
class Fate:
    """The class of one touched group, and (left alone) why."""

    kind: str
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in CLASSES or (self.reason is not None) != (self.kind == LEFT_ALONE) or \
                (self.reason is not None and self.reason not in REASONS):
            raise ValueError(f"not a class of a touched group: {self.kind!r} (reason {self.reason!r})")


@dataclass(frozen=True)
class GroupFacts:
    """What a replay knows of one touched group, as plain data (``group_fate`` decides its class)."""

    start: pd.Timestamp | None = None  # its window's start (None: the aggregate has no window)
    in_sink: bool = False   # the sink held a row of it when the replay chose what to recompute
    made: bool = False      # the recomputation made a row of it (counted records only: late dead letters left out)
    differs: bool = False   # ... and that row was missing from the sink or held other values
    rows: int = 0           # rows of it in the sink when it was recomputed
    settled: int = 0        # of those, written by a replay or by a batch up to the stream's last committed one


def fate_before(start: pd.Timestamp | None, *, in_sink: bool, size: timedelta | None,
                horizon: pd.Timestamp | None, retained_from: pd.Timestamp | None) -> Fate | None:
    """A touched group's class decided before any recomputation; None: it is recomputed (pure).

    Recomputed: closed by the stream (window end at or before ``horizon``) or already in the sink.
    Left alone: a window starting before ``retained_from`` (records may be gone). An aggregate
    without a window (``size`` None) has every group closed (its rows change with every record),
    and is refused once retention deleted records (``refusals``)."""
    start = None if start is None or pd.isna(start) else start
    if size is None and retained_from is not None:
        return Fate(REFUSED)
    if retained_from is not None and (start is None or start < retained_from):
        return Fate(LEFT_ALONE, PAST_RETENTION)
    if size is None or in_sink or (horizon is not None and start is not None
                                   and start + pd.Timedelta(size) <= horizon):
        return None
    return Fate(LEFT_ALONE, OPEN)


def fate_after(*, made: bool, differs: bool, rows: int, settled: int, can_delete: bool) -> Fate:
    """A recomputed group's class (pure). A group with a row a later batch wrote keeps all its rows:
    that batch may hold records the recomputation did not read."""
    if made:
        return Fate(REWRITTEN if differs else UNCHANGED)
    if not rows:
        return Fate(LEFT_ALONE, ALL_LATE)
    if settled < rows:
        return Fate(LEFT_ALONE, LATER_BATCH)
    return Fate(REMOVED) if can_delete else Fate(LEFT_ALONE, CANNOT_DELETE)


def group_fate(facts: GroupFacts, *, size: timedelta | None, horizon: pd.Timestamp | None,
               retained_from: pd.Timestamp | None, can_delete: bool) -> Fate:
    """The one class of a touched group (pure)."""
    return fate_before(facts.start, in_sink=facts.in_sink, size=size, horizon=horizon,
                       retained_from=retained_from) or \
        fate_after(made=facts.made, differs=facts.differs, rows=facts.rows, settled=facts.settled,
                   can_delete=can_delete)


def to_recompute(touched: Mapping[str, pd.Timestamp | None], present: Iterable[str], *, size: timedelta | None,
                 horizon: pd.Timestamp | None, retained_from: pd.Timestamp | None) -> set[str]:
    """The ``touched`` groups (group -> window start) to recompute (pure); ``present``: those in the sink."""
    have = set(present)
    return {g for g, start in touched.items()
            if fate_before(start, in_sink=g in have, size=size, horizon=horizon, retained_from=retained_from) is None}


def classify(facts: Mapping[str, GroupFacts], *, size: timedelta | None, horizon: pd.Timestamp | None,
             retained_from: pd.Timestamp | None, can_delete: bool) -> dict[str, Fate]:
    """Each touched group (group -> its facts) -> its class (pure)."""
    return {g: group_fate(f, size=size, horizon=horizon, retained_from=retained_from, can_delete=can_delete)
            for g, f in facts.items()}


@dataclass
class AggregateOutcome:
    """What a replay did to one aggregate table: its touched groups counted by class.

    ``touched == rewritten + unchanged + removed + left_alone + refused`` and ``left_alone`` is the
    sum of ``left_alone_by`` (``check``). ``written``, ``recomputed`` and ``left_open`` are the
    names earlier reports used (see ``to_json``)."""

    table: str
    touched: int = 0        # groups the replayed records fall in
    rewritten: int = 0      # recomputed from all their records; missing or different: written
    unchanged: int = 0      # recomputed; already right: not written
    removed: int = 0        # recomputed; no record makes them: their rows deleted, kept in ``removed_to``
    left_alone: int = 0     # not written, for the reasons in ``left_alone_by``
    refused: int = 0        # no replay could keep them whole (``refusals``)
    left_alone_by: dict[str, int] = field(default_factory=dict)  # reason (``REASONS``) -> groups
    left_alone_examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> a few of its groups
    removed_rows: int = 0   # rows deleted (a group has one, unless the sink holds duplicates)
    removed_to: str | None = None
    horizon: str | None = None
    horizon_source: str = ""
    examples: list[dict[str, Any]] = field(default_factory=list)  # written or removed rows: before -> after

    @classmethod
    def of(cls, table: str, fates: Mapping[str, Fate], **kw: Any) -> "AggregateOutcome":
        """The counts of ``fates`` (every touched group -> its class): they sum to the groups touched."""
        out = cls(table, touched=len(fates), **kw)
        for group, fate in sorted(fates.items()):
            setattr(out, fate.kind, getattr(out, fate.kind) + 1)
            if fate.reason is not None:
                out.left_alone_by[fate.reason] = out.left_alone_by.get(fate.reason, 0) + 1
                shown = out.left_alone_examples.setdefault(fate.reason, [])
                if len(shown) < EXAMPLES:
                    shown.append(str(group).replace("\x1f", ", "))
        out.left_alone_by = {r: out.left_alone_by[r] for r in REASONS if r in out.left_alone_by}
        out.check()
        return out

    def classes_sum(self) -> int:
        return self.rewritten + self.unchanged + self.removed + self.left_alone + self.refused

    def check(self) -> None:
        """Raise ValueError unless every touched group is in exactly one class."""
        if self.classes_sum() != self.touched or sum(self.left_alone_by.values()) != self.left_alone:
            raise ValueError(f"aggregate {self.table}: {self.touched} groups touched, but the classes sum to "
                             f"{self.classes_sum()} ({classes_text(self.to_json())})")

    @property
    def written(self) -> int:
        return self.rewritten

    @property
    def recomputed(self) -> int:
        """Groups the recomputation made a row for (as earlier reports counted)."""
        return self.rewritten + self.unchanged

    @property
    def left_open(self) -> int:
        return self.left_alone_by.get(OPEN, 0)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "written": self.written, "recomputed": self.recomputed, "left_open": self.left_open}


def classes_text(w: Mapping[str, Any]) -> str:
    """``"252 groups touched = 108 rewritten + 108 unchanged + 36 left alone (...)"`` from an outcome's
    JSON: every class with groups in it, each left-alone reason its own term, so they visibly add up."""
    terms = [f"{w.get(REWRITTEN, 0)} rewritten", f"{w.get(UNCHANGED, 0)} unchanged"]
    if w.get(REMOVED):
        terms.append(f"{w[REMOVED]} removed (no record makes them; copies in {w.get('removed_to')})")
    for reason, n in (w.get("left_alone_by") or {}).items():
        if n:
            where = f"; copies in {w.get('removed_to')}" if reason == CANNOT_DELETE else ""
            terms.append(f"{n} left alone ({REASONS.get(reason, reason)}{where})")
    if w.get(REFUSED):
        terms.append(f"{w[REFUSED]} refused (no replay can recompute them whole)")
    text = f"{w.get('touched', 0)} groups touched = " + " + ".join(terms)
    total = sum(int(w.get(k) or 0) for k in CLASSES)
    if total != w.get("touched", 0) or sum((w.get("left_alone_by") or {}).values()) != w.get(LEFT_ALONE, 0):
        text += f" (THE CLASSES SUM TO {total}, NOT {w.get('touched', 0)})"
    return text


def refusals(tables: Sequence[Any], aggregates: Sequence[Any], earliest: Mapping[TP, int]) -> list[Problem]:
    """Why a replay of this stream cannot keep its aggregate tables whole (pure; empty: it can)."""
    declared = {a.table for a in aggregates}
    problems = [Problem("aggregate_undeclared",
                        f"table {t.name!r} is on_conflict 'replace' but not declared an aggregate (Transform."
                        "aggregates): a replay of part of its records would overwrite whole totals with partial "
                        "ones; declare it (docs/add-your-stream.md, 'Aggregates') and replay again")
                for t in tables if t.on_conflict == "replace" and t.name not in declared]
    truncated = sorted(tp for tp, first in earliest.items() if first > 0)
    for agg in aggregates:
        if not agg.window and truncated:
            tp = truncated[0]
            problems.append(Problem("aggregate_unbounded",
                                    f"aggregate table {agg.table!r} has no window: each group spans the whole history "
                                    f"of its keys, and retention deleted {tp.topic}[{tp.partition}] below offset "
                                    f"{earliest[tp]}, so no replay can recompute it whole; nothing was written"))
    return problems


def changed_rows(fresh: pd.DataFrame, current: pd.DataFrame, agg: Any, values: Sequence[str],
                 rules: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The recomputed rows that are missing from ``current`` or differ from it (pure), and a few
    examples (before -> after). ``rules``: the table's column rules (``rewind.proof.values.rules_for``),
    the proofs' own: a total off by one is rewritten, as the proof would fail it."""

    rules = rules or {}

    f = fresh.reset_index(drop=True).copy()
    f["_g"] = group_text(f, agg)
    c = current.reset_index(drop=True).copy()
    c["_g"] = group_text(c, agg)
    merged = f.merge(c[["_g", *[v for v in values if v in c.columns]]].drop_duplicates("_g"), on="_g", how="left",
                     suffixes=("", "_now"), indicator=True)
    differs = (merged["_merge"] == "left_only").to_numpy()
    for v in values:
        now = merged[f"{v}_now"] if f"{v}_now" in merged else pd.Series([None] * len(merged))
        differs |= ~equal_values(merged[v].reset_index(drop=True), now.reset_index(drop=True), rules.get(v, ANY))
    examples = []
    for i in [i for i, d in enumerate(differs) if d][:EXAMPLES]:
        before = None if merged["_merge"].iat[i] == "left_only" else {v: plain_value(merged[f"{v}_now"].iat[i])
                                                                      for v in values}
        examples.append({"group": str(merged["_g"].iat[i]).replace("\x1f", ", "), "before": before,
                         "after": {v: plain_value(merged[v].iat[i]) for v in values}})
    return f[differs].drop(columns=["_g"]).assign(batch_id=None), examples


def sink_rows(current: pd.DataFrame, agg: Any, *, last_batch: int | None) -> tuple[dict[str, int], dict[str, int]]:
    """Per group of ``current``: its rows, and of those the settled ones (pure): written by a replay
    (``batch_id`` NULL) or by a batch up to ``last_batch``, the stream's last committed one (None:
    only a replay's rows are settled). A later batch's row may hold records a recomputation did not read."""

    if not len(current):
        return {}, {}
    groups = group_text(current, agg)
    settled = pd.Series(True, index=current.index)
    if "batch_id" in current:
        batch = pd.to_numeric(current["batch_id"], errors="coerce")
        settled = batch.isna() if last_batch is None else batch.isna() | (batch <= last_batch)
    return groups.value_counts().to_dict(), groups[settled.to_numpy()].value_counts().to_dict()


@dataclass
class Decision:
    """What a replay does to one aggregate table (``decide``)."""

    fates: dict[str, Fate]       # every touched group -> its class
    write: pd.DataFrame          # the rows of ``rewritten`` groups
    unmade: pd.DataFrame         # the sink's rows no record makes (``removed`` or kept): copied first
    remove: pd.DataFrame         # of those, the rows of ``removed`` groups: deleted
    examples: list[dict[str, Any]]  # a few written rows: before -> after


def decide(touched: Mapping[str, pd.Timestamp | None], present: Iterable[str], fresh: pd.DataFrame,
           current: pd.DataFrame, agg: Any, values: Sequence[str], *, size: timedelta | None,
           horizon: pd.Timestamp | None, retained_from: pd.Timestamp | None, last_batch: int | None,
           can_delete: bool, rules: Mapping[str, Any] | None = None) -> Decision:
    """The class of every ``touched`` group (group -> window start) and the rows that follow (pure).

    ``present``: the touched groups the sink held when the replay chose what to recompute
    (``to_recompute``); ``fresh``: the recomputation's rows of those groups (empty: none recomputed);
    ``current``: the sink's table read after the recomputation (empty when none was)."""

    have = set(present)
    changed, examples = changed_rows(fresh, current, agg, values, rules) if len(fresh) else (fresh, [])
    made, differs = set(group_text(fresh, agg)), set(group_text(changed, agg))
    held, settled = sink_rows(current, agg, last_batch=last_batch)
    facts = {g: GroupFacts(start, in_sink=g in have, made=g in made, differs=g in differs, rows=held.get(g, 0),
                           settled=settled.get(g, 0)) for g, start in touched.items()}
    fates = classify(facts, size=size, horizon=horizon, retained_from=retained_from, can_delete=can_delete)

    def rows_of(frame: pd.DataFrame, *wanted: Fate) -> pd.DataFrame:
        groups = {g for g, f in fates.items() if f in wanted}
        return frame[group_text(frame, agg).isin(groups).to_numpy()] if len(frame) else frame

    return Decision(fates, rows_of(changed, Fate(REWRITTEN)),
                    rows_of(current, Fate(REMOVED), Fate(LEFT_ALONE, CANNOT_DELETE)), rows_of(current, Fate(REMOVED)),
                    examples)
