"""What a transform declares beside its PySpark code: where a record lands, and which tables are aggregates.

Why declarations and not code: the sink, the replay and the proofs read them to know what a row
*is*. A row of an insert-once table stands for a record (``Identity``); a row of an aggregate table
stands for a group of records (``Aggregate``: a window of event time by some keys), so it is only
right when it was computed from every record of its group. A replay that rewrites a group from
part of its records (one partition, a slice of offsets) writes a partial total; declaring the
table an aggregate lets Rewind recompute each group it touches from all of them, and lets every
proof compare each closed group's values with a recomputation from Kafka.

Pure data, no Spark: ``rewind.api.contract`` checks the declarations against the tables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

#: Functions a measure may name (``Aggregate.measures``), over a column of ``expect()``'s rows.
MEASURE_FUNCTIONS = ("count", "sum", "min", "max")
_MEASURE_RE = re.compile(r"^\s*(count)\s*(?:\(\s*\*?\s*\))?\s*$"
                         r"|^\s*(sum|min|max)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


@dataclass(frozen=True)
class Identity:
    """Where a valid Kafka record is reflected in the output, so a proof can find it.

    ``table``: the output table (a name among ``Transform.tables``) that holds one row per identity.
    ``columns``: the record's identity in that table (a dedup key such as an event id, an entity
    key, or the Kafka coordinates ``("topic", "partition", "offset")``). ``version``: for a table
    whose ``on_conflict`` is ``latest`` (the latest state of an entity wins), the column that
    orders an identity's states; the row must hold the highest version any valid record carries.
    """

    table: str
    columns: tuple[str, ...]
    version: str | None = None


@dataclass(frozen=True)
class Measure:
    """One value column of an aggregate as a function of its group's records: ``count`` of them, or
    ``sum``/``min``/``max`` of a column of ``expect()``'s rows."""

    column: str
    function: str
    source: str | None = None

    @classmethod
    def parse(cls, column: str, text: str) -> Measure:
        m = _MEASURE_RE.match(str(text))
        if not m:
            raise ValueError(f"measure {column!r}: {text!r} is not one of count, sum(COLUMN), min(COLUMN), "
                             "max(COLUMN)")
        return cls(column, "count") if m.group(1) else cls(column, m.group(2), m.group(3))


@dataclass(frozen=True)
class Aggregate:
    """A table whose rows are aggregates: one row per group, its values a function of every record in it.

    ``table``: the aggregate table (its ``on_conflict`` must be ``replace``: a recomputed group
    overwrites the row). ``keys``: the group-by columns beside the window (e.g. ``("merchant",)``).
    ``window``: the column holding the window's start (a tumbling window of event time, as Spark's
    ``F.window(...).start``); None for a group over the whole history of its keys, which no bounded
    range can recompute once retention has deleted records. The table's key must be the window
    column and the keys. ``size``: the window's length (None: the registry's ``window``).
    ``kind``: the ``kind`` of the transform's output rows for this table (None: the table's name).

    ``measures`` (optional): the value columns as functions of the group's records, e.g.
    ``{"event_count": "count", "amount_sum": "sum(amount)"}``, over the rows of ``expect()`` (one
    per distinct identity, placed in a window by ``event_time``). Given them and an ``expect()``,
    the proofs recompute the groups in pandas, without Spark; otherwise they run ``build`` as a
    bounded batch over the group's records (``rewind.proof.batch_build``).
    """

    table: str
    keys: tuple[str, ...]
    window: str | None = "window_start"
    size: timedelta | None = None
    kind: str | None = None
    measures: Any = field(default=())
    event_time: str = "event_time"

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        raw = self.measures
        if isinstance(raw, Mapping):
            parsed = tuple(Measure.parse(str(c), t) for c, t in raw.items())
        else:
            parsed = tuple(m if isinstance(m, Measure) else Measure(*m) for m in raw)
        object.__setattr__(self, "measures", parsed)

    @property
    def group_columns(self) -> tuple[str, ...]:
        """What names a group: the window's start (if windowed) and the keys, i.e. the table's key."""
        return ((self.window,) if self.window else ()) + self.keys

    @property
    def output_kind(self) -> str:
        return self.kind or self.table

    def window_size(self, spec: Any) -> timedelta | None:
        """The window's length: ``size``, else the registry's ``window`` (None when not windowed)."""
        if not self.window:
            return None
        return self.size or spec.durations()["window"]
