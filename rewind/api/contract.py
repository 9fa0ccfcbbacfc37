"""The transform contract: what a stream's code must provide so that Rewind can run, replay and prove it.

A registry entry names a class (``transform: package.module:ClassName``) that subclasses
``Transform``; Rewind creates it with no arguments. Two members are required: ``tables`` (the
sink tables, with their keys and conflict rules) and ``build`` (the PySpark code). Everything
else has a default or is derived: ``split`` routes rows by their ``kind``, table columns may come
from ``build``'s output schema (``rewind.driver.outputs``), ``identity`` is the first plain table's
key, and ``expect`` is optional (without it the proofs compare the sink with ``build`` run as a
bounded batch over the proved offsets). ``aggregates`` declares which tables hold aggregates over
which keys and window, so a replay recomputes each group it touches whole and the proofs check
their values (``rewind.api.declarations``). Transforms written against the five-member contract
(``tables``, ``build``, ``split``, ``identity``, ``expect``) keep working unchanged.

Exactly-once needs the transform to be deterministic: the same Kafka records give the same rows,
in a micro-batch and in a replay's bounded read alike (a restarted batch re-runs on the same
offsets; a replay re-reads a range). Nothing in ``build`` may depend on processing time, random
numbers or external state that changes.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rewind.api.declarations import MEASURE_FUNCTIONS, Aggregate, Identity, Measure
from rewind.api.late import LATE_CANDIDATE
from rewind.api.routing import route_by_kind
from rewind.errors import Refused

if TYPE_CHECKING:
    import pandas as pd

    from rewind.api.tables import TableSpec

__all__ = ["COORDS", "RECORD_COLUMNS", "Aggregate", "Identity", "Measure", "Transform", "TransformRefused",
           "check_dead_letter", "check_declarations", "check_late_candidates", "has_expect", "identity_of",
           "load_transform"]


class TransformRefused(Refused, ValueError):
    """A registry entry's transform cannot be used; the message names the stream, the class and what is missing."""


#: The columns of the Kafka records frame ``Transform.expect`` receives (``timestamp``: epoch ms).
RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")


class Transform(ABC):
    """The contract of a stream's transform (subclass it; Rewind calls these, nothing else).

    Output rows carry a ``kind`` column that names the table each row goes to (``build`` may also
    return ``{table name: DataFrame}`` and Rewind adds the ``kind``). Rows of kind
    ``rewind.api.late.LATE_CANDIDATE`` (streaming only) are the rows the first stateful
    operator reads; the batch writer keeps exactly those the watermark drops and ``split`` writes
    them as dead letters (see ``rewind.driver.late_routing``).
    """

    @property
    @abstractmethod
    def tables(self) -> Sequence[TableSpec]:
        """The sink tables this stream writes (``rewind.api.tables.TableSpec``): names, columns, the key
        and what a row with an existing key does (``on_conflict``: ``ignore`` keeps the first row,
        insert-once; ``replace`` keeps the last, an upsert; ``latest`` keeps the highest version).
        Columns may be left empty (``rewind.driver.outputs.output_table``): they are then the columns
        ``build`` outputs for the table. Every table gets a ``batch_id`` column."""

    @abstractmethod
    def build(self, source: Any, spec: Any) -> Any:
        """Kafka rows in (Spark's Kafka columns: key, value, topic, partition, offset, timestamp,
        timestampType), output rows out: one DataFrame with a ``kind`` column, or a dict
        ``{table name: DataFrame}``. Called with a streaming DataFrame for the stream
        (``source.isStreaming``) and with a bounded batch DataFrame for a replay and a proof of the
        same range: both must give the same rows for the same records (no watermark in a batch).
        ``spec`` is the stream's registry entry (``spec.durations()["window"]``, ``["watermark_delay"]``)."""

    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        """One collected batch (pandas) -> one frame per table name of ``tables``, each with the table's
        columns and ``batch_id`` (None: written by a replay). Pure: no I/O. The default routes a row
        to the table its ``kind`` names (or ``kinds`` maps it to); late candidates go to the
        dead-letter table."""

        tables = self.__dict__.get("_resolved_tables") or self.tables  # columns from the output, once known
        return route_by_kind(frame, tables, batch_id, kinds=self.kinds, dead_letter_table=self.dead_letter_table)

    @property
    def kinds(self) -> Mapping[str, str]:
        """Output ``kind`` -> table name, for kinds that are not a table's own name (default split only)."""
        return {}

    @property
    def identity(self) -> Identity | None:
        """Where each valid record is reflected (``Identity``): the proofs look for it there. None
        (the default): the key of the first table that is neither the dead-letter table nor an
        aggregate (``identity_of``)."""
        return None

    @property
    def dead_letter_table(self) -> str:
        """The table that holds records the stream refuses: Kafka coordinates (``topic``, ``partition``,
        ``offset``) as its key, ``reason``, and ``watermark`` for records behind it."""
        return "dead_letter"

    @property
    def aggregates(self) -> Sequence[Aggregate]:
        """The tables whose rows are aggregates over keys and a window (``Aggregate``); default none.
        A replay recomputes each group it touches from all its records; the proofs compare each
        closed group with a recomputation from Kafka."""
        return ()

    def expect(self, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
        """Optional: what the stream does with each Kafka record, recomputed in pandas for the proofs.

        Without it, the proofs run ``build`` as a bounded batch over exactly the proved offsets and
        hold the sink to its rows (same code, no second implementation). With it, the per-record
        rules are checked by an independent implementation:

        ``records`` has ``RECORD_COLUMNS`` (``key``/``value`` bytes or None). Return one row per record,
        same order, with: the ``Identity`` columns (None for a dead letter), ``reason`` (None: valid;
        else why it is a dead letter), ``event_time`` (UTC; NaT when unknown: never judged late) and,
        for ``Identity.version``, that column. Any other column that the identity table also has is
        reconciled: the sink's row must hold the value recomputed here (for ``latest`` tables, the
        value of the winning version). Must agree with ``build``: the proof holds the sink to it.
        """
        raise NotImplementedError(f"{type(self).__name__} has no expect(): the proofs run build() instead")


def has_expect(transform: Transform) -> bool:
    """Whether the transform implements ``expect`` (else the proofs run ``build`` as a bounded batch)."""
    return type(transform).expect is not Transform.expect


def identity_of(transform: Transform) -> Identity:
    """The declared identity, else the key of the first table that is neither the dead-letter table
    nor an aggregate (with its version for a ``latest`` table)."""
    declared = transform.identity
    if declared is not None:
        return declared
    aggregated = {a.table for a in transform.aggregates}
    for table in transform.tables:
        if table.name != transform.dead_letter_table and table.name not in aggregated:
            return Identity(table.name, tuple(table.key), table.version)
    raise TransformRefused(f"{type(transform).__name__}: no table to hold a record's row (every table is the "
                           "dead-letter table or an aggregate); declare identity or a plain table")


def load_transform(spec: Any) -> Transform:
    """The registry entry's transform class, created; ``TransformRefused`` says what is wrong."""
    ref = spec.transform
    module_name, _, attr = ref.partition(":")
    where = f"stream {spec.name}: transform {ref!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TransformRefused(f"{where}: cannot import module {module_name!r}: {exc}") from exc
    except TransformRefused:
        raise
    except Refused as exc:  # a TableSpec refused when the module declares it (rewind.api.tables)
        raise TransformRefused(f"{where}: {exc}") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise TransformRefused(f"{where}: module {module_name!r} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Transform)):
        kind = "a function" if callable(cls) else type(cls).__name__
        raise TransformRefused(f"{where} is {kind}, not a class implementing rewind.api.contract.Transform "
                               "(tables and build); see docs/add-your-stream.md")
    try:
        transform = cls()
    except TypeError as exc:
        raise TransformRefused(f"{where}: {exc} (a transform class is created with no arguments and must "
                               "implement tables and build)") from exc
    try:
        check_declarations(transform, where)
    except TransformRefused:
        raise
    except Refused as exc:  # a TableSpec refused when ``tables`` builds it
        raise TransformRefused(f"{where}: {exc}") from exc
    return transform


def check_declarations(transform: Transform, where: str, tables: Sequence[TableSpec] | None = None) -> None:
    """Refuse a transform whose declarations disagree, or that the proofs could not use: an identity or
    dead-letter table it does not declare, identity columns its table lacks, a version that is not the
    ``latest`` table's, an identity table without Kafka coordinates when there is no ``expect()``, a
    dead-letter table not keyed by the coordinates or lacking ``reason`` (or ``watermark`` where records
    behind a watermark become dead letters), ``kinds`` that route rows nowhere, an aggregate whose
    table, key, kind or columns do not match. ``tables``: the tables with their columns resolved from
    the output (default: as declared; a table declared without columns is checked once they are
    known, ``rewind.driver.outputs.resolved_tables``). Each refusal is one line naming the fix."""
    by_name = {t.name: t for t in (transform.tables if tables is None else tables)}
    ident = identity_of(transform)
    if not isinstance(ident, Identity):
        raise TransformRefused(f"{where}: identity must be a rewind.api.contract.Identity, "
                               f"got {type(ident).__name__}")
    if isinstance(ident.columns, str):
        raise TransformRefused(f"{where}: identity columns must be a tuple of column names, not the string "
                               f"{ident.columns!r}: write columns=({ident.columns!r},)")
    table = by_name.get(ident.table)
    if table is None:
        raise TransformRefused(f"{where}: identity table {ident.table!r} is not among its tables {sorted(by_name)}")
    if ident.table == transform.dead_letter_table:
        raise TransformRefused(f"{where}: identity table {ident.table!r} is also the dead-letter table; a valid "
                               "record's row and a refused record's dead letter live in different tables: name "
                               "another table in identity, or another dead_letter_table")
    lacking = [c for c in ident.columns if c not in table.column_names]
    if not ident.columns or (table.columns and lacking):
        raise TransformRefused(f"{where}: identity columns {list(ident.columns)} are not all columns of table "
                               f"{table.name!r} (lacking {lacking}; it has {list(table.column_names)})")
    if (table.on_conflict == "latest") != (ident.version is not None) or \
            (ident.version is not None and ident.version != table.version):
        raise TransformRefused(f"{where}: identity version {ident.version!r} must be the version column of table "
                               f"{table.name!r} (on_conflict {table.on_conflict!r}, version {table.version!r}): "
                               "a 'latest' table needs it, other tables must not have one")
    if table.columns and not has_expect(transform) and not set(COORDS) <= set(table.column_names):
        raise TransformRefused(f"{where}: without expect(), the rows of identity table {table.name!r} must carry the "
                               f"Kafka coordinates {list(COORDS)} (the proof tells each record's row by them; it has "
                               f"{_shown(table)}): keep topic, partition and offset in what build() outputs for it "
                               "(and in its columns), or implement expect()")
    check_dead_letter(by_name.get(transform.dead_letter_table), transform.dead_letter_table, sorted(by_name), where,
                      late=LATE_FROM_AGGREGATES if transform.aggregates else None)
    check_kinds(transform, by_name, where)
    seen: set[str] = set()
    for agg in transform.aggregates:
        check_aggregate(agg, by_name, ident, where)
        if agg.table in seen:
            raise TransformRefused(f"{where}: aggregate table {agg.table!r} is declared twice in aggregates; declare "
                                   "each aggregate table once")
        seen.add(agg.table)
        check_aggregate_kind(transform, agg, where)


#: The Kafka coordinates of a record: the dead-letter table's key; the proofs tell records apart by them.
COORDS = ("topic", "partition", "offset")
#: Why a transform that declares aggregates has records behind a watermark (``check_dead_letter``'s ``late``).
LATE_FROM_AGGREGATES = ("it declares aggregates (a streaming aggregation keeps its state behind a watermark, and the "
                        "records Spark drops behind it become dead letters)")
#: Why a transform whose streaming ``build`` tags late candidates has records behind a watermark.
LATE_FROM_CANDIDATES = "its build() outputs late candidates (LATE_CANDIDATE) in a streaming query"


def _shown(table: TableSpec) -> list[str]:
    return [c for c in table.column_names if c != "batch_id"]


def check_dead_letter(dead: TableSpec | None, name: str, tables: Sequence[str], where: str,
                      late: str | None = None) -> None:
    """The dead-letter table as the proofs and the batch writer use it: among the tables, keyed by the
    Kafka coordinates (one dead letter per record), with the coordinates and a string ``reason``; a
    ``watermark`` column, if any, a timestamp. ``late``: why records behind a watermark reach it (None:
    not known to): then it needs the ``watermark`` column too, where the batch writer writes the
    watermark each was behind (``rewind.driver.late_routing.mark_behind``) and the proof reads it."""
    if dead is None:
        raise TransformRefused(f"{where}: dead-letter table {name!r} must be among its tables (tables: "
                               f"{sorted(tables)}); declare it (key {list(COORDS)}, columns {[*COORDS, 'reason']}) "
                               "or set dead_letter_table to one of them")
    if set(dead.key) != set(COORDS) or len(dead.key) != len(COORDS):
        raise TransformRefused(f"{where}: dead-letter table {name!r} must be keyed by the Kafka coordinates "
                               f"{list(COORDS)} (one dead letter per record), not {list(dead.key)}: set "
                               "key=('topic', 'partition', 'offset')")
    if not dead.columns:
        return  # columns from the output: checked once resolved
    types = {c.name: c.type for c in dead.columns}
    lacking = [c for c in (*COORDS, "reason") if c not in types]
    if lacking:
        raise TransformRefused(f"{where}: dead-letter table {name!r} must have columns {[*COORDS, 'reason']} (lacking "
                               f"{lacking}; it has {_shown(dead)}): add them to its columns, or to what build() "
                               "outputs for it (reason: why the record is refused)")
    if types["reason"] != "string":
        raise TransformRefused(f"{where}: dead-letter table {name!r}: column 'reason' must be a string, not "
                               f"{types['reason']} (the batch writer writes {'behind_watermark'!r} there): cast it "
                               "to string")
    if "watermark" in types and types["watermark"] != "timestamp":
        raise TransformRefused(f"{where}: dead-letter table {name!r}: column 'watermark' must be a timestamp, not "
                               f"{types['watermark']} (a late record's dead letter holds the watermark it was "
                               "behind): cast it to timestamp")
    if late and "watermark" not in types:
        raise TransformRefused(f"{where}: dead-letter table {name!r} has no 'watermark' column, but {late}: the batch "
                               "writer writes each with the watermark it was behind and the proof needs it to judge "
                               "them; add a nullable timestamp column 'watermark' (declared: Column('watermark', "
                               "'timestamp'); from the output: F.lit(None).cast('timestamp').alias('watermark') on "
                               "the dead letters build() returns)")


def check_late_candidates(transform: Transform, tables: Sequence[TableSpec], fields: Sequence[tuple[str, str]],
                          where: str) -> None:
    """A transform whose streaming ``build`` outputs late candidates, whose columns are ``fields``
    ((name, Spark type), ``rewind.driver.late_routing.streaming_candidates``): the batch writer keeps
    those behind the watermark by their ``event_time`` and writes them to the dead-letter table at
    their coordinates, with ``reason`` and ``watermark`` (``late_routing.mark_behind``)."""
    by_name = {t.name: t for t in tables}
    dead = by_name.get(transform.dead_letter_table)
    check_dead_letter(dead, transform.dead_letter_table, sorted(by_name), where, late=LATE_FROM_CANDIDATES)
    types = {name: kind for name, kind in fields}
    if types.get("event_time", "").split("(")[0] not in ("timestamp", "timestamp_ntz"):
        got = f"it is a Spark {types['event_time']}" if "event_time" in types else f"they have {sorted(types)}"
        raise TransformRefused(f"{where}: its late candidates (LATE_CANDIDATE) need an 'event_time' timestamp column "
                               f"(the batch writer keeps those behind the watermark by it; {got}): keep the "
                               "withWatermark column, named event_time, on the rows you tag with "
                               "late_routing.candidates()")
    lacking = [c for c in COORDS if c not in types]
    if lacking:
        raise TransformRefused(f"{where}: its late candidates (LATE_CANDIDATE) lack the Kafka coordinates {lacking} "
                               f"(they become dead letters keyed by them; they have {sorted(types)}): keep topic, "
                               "partition and offset on the rows you tag with late_routing.candidates()")
    filled = {*types, "reason", "watermark", "batch_id"}
    required = [c.name for c in dead.columns if not c.nullable and c.name not in filled] if dead else []
    if required:
        raise TransformRefused(f"{where}: dead-letter table {transform.dead_letter_table!r}: column {required[0]!r} "
                               "is NOT NULL, but the late candidates (LATE_CANDIDATE) that become dead letters do not "
                               "carry it: make it nullable, or output it on the rows you tag with "
                               "late_routing.candidates()")


def check_kinds(transform: Transform, tables: Mapping[str, TableSpec], where: str) -> None:
    """With the default ``split``, ``kinds`` must route to tables it has, and late candidates to the
    dead-letter table (a row of a kind routed to no table is written nowhere)."""

    if type(transform).split is not Transform.split:
        return
    kinds = transform.kinds
    for kind, name in kinds.items():
        if name not in tables:
            raise TransformRefused(f"{where}: kinds maps {kind!r} to {name!r}, which is not among its tables "
                                   f"{sorted(tables)} (rows of that kind would be written nowhere): map it to one "
                                   "of them")
    if kinds.get(LATE_CANDIDATE, transform.dead_letter_table) != transform.dead_letter_table:
        raise TransformRefused(f"{where}: kinds maps {LATE_CANDIDATE!r} to {kinds[LATE_CANDIDATE]!r}: records behind "
                               f"the watermark are dead letters, proven in the dead-letter table "
                               f"{transform.dead_letter_table!r}; remove that entry")


def check_aggregate_kind(transform: Transform, agg: Aggregate, where: str) -> None:
    """With the default ``split``, the kind a replay and a proof select an aggregate's rows by
    (``Aggregate.kind``, default the table's name) must be a kind that is routed to its table."""
    if type(transform).split is not Transform.split:
        return
    kinds = transform.kinds
    routed = sorted({agg.table, *(k for k, name in kinds.items() if name == agg.table)})
    if agg.kind is None and len(routed) > 1:
        others = [k for k in routed if k != agg.table]
        raise TransformRefused(f"{where}: aggregate table {agg.table!r}: its rows come as kind {others[0]!r} (kinds), "
                               f"but the Aggregate names no kind, so replays and proofs would select rows of kind "
                               f"{agg.table!r}: add kind={others[0]!r} to the Aggregate")
    if agg.kind is not None and kinds.get(agg.kind, agg.kind) != agg.table:
        raise TransformRefused(f"{where}: aggregate table {agg.table!r}: its kind {agg.kind!r} is not routed to it "
                               f"(kinds routes {routed} there): add {agg.kind!r}: {agg.table!r} to kinds, or fix the "
                               "Aggregate's kind")


def check_aggregate(agg: Any, tables: Mapping[str, TableSpec], ident: Identity, where: str) -> None:
    """One ``Aggregate`` against the tables: a ``replace`` table keyed by its group, with its columns."""
    if not isinstance(agg, Aggregate):
        raise TransformRefused(f"{where}: aggregates must be rewind.api.contract.Aggregate, "
                               f"got {type(agg).__name__}")
    table = tables.get(agg.table)
    if table is None:
        raise TransformRefused(f"{where}: aggregate table {agg.table!r} is not among its tables {sorted(tables)}")
    if agg.table == ident.table:
        raise TransformRefused(f"{where}: aggregate table {agg.table!r} is also the identity table; a record's row "
                               "and a group's row live in different tables")
    if table.on_conflict != "replace":
        raise TransformRefused(f"{where}: aggregate table {agg.table!r} must have on_conflict 'replace' (a recomputed "
                               f"group overwrites its row), not {table.on_conflict!r}")
    if set(table.key) != set(agg.group_columns):
        raise TransformRefused(f"{where}: aggregate table {agg.table!r} must be keyed by its group "
                               f"{list(agg.group_columns)} (the window column and the keys), not {list(table.key)}")
    for m in agg.measures:
        if m.function not in MEASURE_FUNCTIONS:
            raise TransformRefused(f"{where}: aggregate table {agg.table!r}: measure {m.column!r} uses "
                                   f"{m.function!r}; use one of {list(MEASURE_FUNCTIONS)}")
    if not table.columns:
        return  # columns from the output: checked once resolved
    wanted = [*agg.group_columns, *(m.column for m in agg.measures)]
    for column in wanted:
        if column not in table.column_names:
            raise TransformRefused(f"{where}: aggregate table {agg.table!r} has no column {column!r} (it has "
                                   f"{[c for c in table.column_names if c != 'batch_id']}); fix the Aggregate "
                                   "declaration or the table's columns")
    if agg.window:
        kind = {c.name: c.type for c in table.columns}[agg.window]
        if kind != "timestamp":
            raise TransformRefused(f"{where}: aggregate table {agg.table!r}: window column {agg.window!r} must be a "
                                   f"timestamp (the window's start), not {kind}: output F.window(...).start as it "
                                   "(or cast it to timestamp)")
