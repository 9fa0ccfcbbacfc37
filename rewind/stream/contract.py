"""The transform contract: what a stream's code must provide so that Rewind can run, replay and prove it.

A registry entry names a class (``transform: package.module:ClassName``) that subclasses
``Transform``; Rewind creates it with no arguments. Two members are required: ``tables`` (the
sink tables, with their keys and conflict rules) and ``build`` (the PySpark code). Everything
else has a default or is derived: ``split`` routes rows by their ``kind``, table columns may come
from ``build``'s output schema (``rewind.stream.outputs``), ``identity`` is the first plain table's
key, and ``expect`` is optional (without it the proofs compare the sink with ``build`` run as a
bounded batch over the proved offsets). ``aggregates`` declares which tables hold aggregates over
which keys and window, so a replay recomputes each group it touches whole and the proofs check
their values (``rewind.stream.declarations``). Transforms written against the five-member contract
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

from rewind.errors import Refused
from rewind.stream.declarations import MEASURE_FUNCTIONS, Aggregate, Identity, Measure

if TYPE_CHECKING:
    import pandas as pd

    from rewind.sink.schema import TableSpec

__all__ = ["RECORD_COLUMNS", "Aggregate", "Identity", "Measure", "Transform", "TransformRefused",
           "check_declarations", "has_expect", "identity_of", "load_transform"]


class TransformRefused(Refused, ValueError):
    """A registry entry's transform cannot be used; the message names the stream, the class and what is missing."""


#: The columns of the Kafka records frame ``Transform.expect`` receives (``timestamp``: epoch ms).
RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")


class Transform(ABC):
    """The contract of a stream's transform (subclass it; Rewind calls these, nothing else).

    Output rows carry a ``kind`` column that names the table each row goes to (``build`` may also
    return ``{table name: DataFrame}`` and Rewind adds the ``kind``). Rows of kind
    ``rewind.stream.late_routing.LATE_CANDIDATE`` (streaming only) are the rows the first stateful
    operator reads; the batch writer keeps exactly those the watermark drops and ``split`` writes
    them as dead letters (see ``rewind.stream.late_routing``).
    """

    @property
    @abstractmethod
    def tables(self) -> Sequence[TableSpec]:
        """The sink tables this stream writes (``rewind.sink.schema.TableSpec``): names, columns, the key
        and what a row with an existing key does (``on_conflict``: ``ignore`` keeps the first row,
        insert-once; ``replace`` keeps the last, an upsert; ``latest`` keeps the highest version).
        Columns may be left empty (``rewind.stream.outputs.output_table``): they are then the columns
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
        from rewind.stream.routing import route_by_kind

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
    cls = getattr(module, attr, None)
    if cls is None:
        raise TransformRefused(f"{where}: module {module_name!r} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Transform)):
        kind = "a function" if callable(cls) else type(cls).__name__
        raise TransformRefused(f"{where} is {kind}, not a class implementing rewind.stream.contract.Transform "
                               "(tables and build); see docs/add-your-stream.md")
    try:
        transform = cls()
    except TypeError as exc:
        raise TransformRefused(f"{where}: {exc} (a transform class is created with no arguments and must "
                               "implement tables and build)") from exc
    check_declarations(transform, where)
    return transform


def check_declarations(transform: Transform, where: str, tables: Sequence[TableSpec] | None = None) -> None:
    """Refuse a transform whose declarations disagree: an identity or dead-letter table it does not
    declare, identity columns its table lacks, a version that is not the ``latest`` table's, an
    aggregate whose table, key or columns do not match. ``tables``: the tables with their columns
    resolved from the output (default: as declared; a table declared without columns is checked
    once they are known, ``rewind.stream.outputs.resolved_tables``)."""
    by_name = {t.name: t for t in (transform.tables if tables is None else tables)}
    ident = identity_of(transform)
    if not isinstance(ident, Identity):
        raise TransformRefused(f"{where}: identity must be a rewind.stream.contract.Identity, "
                               f"got {type(ident).__name__}")
    table = by_name.get(ident.table)
    if table is None:
        raise TransformRefused(f"{where}: identity table {ident.table!r} is not among its tables {sorted(by_name)}")
    lacking = [c for c in ident.columns if c not in table.column_names]
    if not ident.columns or (table.columns and lacking):
        raise TransformRefused(f"{where}: identity columns {list(ident.columns)} are not all columns of table "
                               f"{table.name!r} (lacking {lacking}; it has {list(table.column_names)})")
    if (table.on_conflict == "latest") != (ident.version is not None) or \
            (ident.version is not None and ident.version != table.version):
        raise TransformRefused(f"{where}: identity version {ident.version!r} must be the version column of table "
                               f"{table.name!r} (on_conflict {table.on_conflict!r}, version {table.version!r}): "
                               "a 'latest' table needs it, other tables must not have one")
    dead = by_name.get(transform.dead_letter_table)
    coords = ("topic", "partition", "offset", "reason")
    if dead is None or (dead.columns and any(c not in dead.column_names for c in coords)):
        raise TransformRefused(f"{where}: dead-letter table {transform.dead_letter_table!r} must be among its tables "
                               f"with columns {list(coords)} (tables: {sorted(by_name)})")
    for agg in transform.aggregates:
        check_aggregate(agg, by_name, ident, where)


def check_aggregate(agg: Any, tables: Mapping[str, TableSpec], ident: Identity, where: str) -> None:
    """One ``Aggregate`` against the tables: a ``replace`` table keyed by its group, with its columns."""
    if not isinstance(agg, Aggregate):
        raise TransformRefused(f"{where}: aggregates must be rewind.stream.contract.Aggregate, "
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
                                   f"timestamp (the window's start), not {kind}")
