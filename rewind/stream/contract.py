"""The transform contract: what a stream's code must provide so that Rewind can run, replay and prove it.

A registry entry names a class (``transform: package.module:ClassName``) that subclasses
``Transform``; Rewind creates it with no arguments. Everything else -- the sink's tables, how a
batch's rows reach them, replays, late routing -- reads what the class declares, so a stream is
a registry entry plus one class, and no file is found by its name (the sink used to look for a
``tables`` module beside the transform's).

Exactly-once needs the transform to be deterministic: the same Kafka records give the same rows,
in a micro-batch and in a replay's bounded read alike (a restarted batch re-runs on the same
offsets; a replay re-reads a range). Nothing in ``build`` may depend on processing time, random
numbers or external state that changes.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rewind.errors import Refused

if TYPE_CHECKING:
    import pandas as pd

    from rewind.sink.schema import TableSpec


class TransformRefused(Refused, ValueError):
    """A registry entry's transform cannot be used; the message names the stream, the class and what is missing."""


#: The columns of the Kafka records frame ``Transform.expect`` receives (``timestamp``: epoch ms).
RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")


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


class Transform(ABC):
    """The contract of a stream's transform (subclass it; Rewind calls these, nothing else).

    Output rows carry a ``kind`` column that names where each row goes; ``tables`` declares those
    tables and ``split`` sends a collected batch's rows to them. Rows of kind
    ``rewind.stream.late_routing.LATE_CANDIDATE`` (streaming only) are the rows the first stateful
    operator reads; the batch writer keeps exactly those the watermark drops and ``split`` writes
    them as dead letters (see ``rewind.stream.late_routing``).
    """

    @property
    @abstractmethod
    def tables(self) -> Sequence[TableSpec]:
        """The sink tables this stream writes (``rewind.sink.schema.TableSpec``): names, columns, the key
        and what a row with an existing key does (``on_conflict``: ``ignore`` keeps the first row,
        insert-once; ``replace`` keeps the last, an upsert). Every table gets a ``batch_id`` column."""

    @abstractmethod
    def build(self, source: Any, spec: Any) -> Any:
        """Kafka rows in (Spark's Kafka columns: key, value, topic, partition, offset, timestamp,
        timestampType), output rows out, with a ``kind`` column. Called with a streaming DataFrame
        for the stream (``source.isStreaming``) and with a bounded batch DataFrame for a replay of the
        same range: both must give the same rows for the same records (no watermark in a batch).
        ``spec`` is the stream's registry entry (durations, options)."""

    @abstractmethod
    def split(self, frame: pd.DataFrame, batch_id: int | None) -> dict[str, pd.DataFrame]:
        """One collected batch (pandas) -> one frame per table name of ``tables``, each with the table's
        columns and ``batch_id`` (None: written by a replay). Pure: no I/O."""

    @property
    @abstractmethod
    def identity(self) -> Identity:
        """Where each valid record is reflected (``Identity``): the proofs look for it there."""

    @property
    def dead_letter_table(self) -> str:
        """The table that holds records the stream refuses: Kafka coordinates (``topic``, ``partition``,
        ``offset``) as its key, ``reason``, and ``watermark`` for records behind it."""
        return "dead_letter"

    @abstractmethod
    def expect(self, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
        """What the stream does with each Kafka record, recomputed in pandas for the proofs.

        ``records`` has ``RECORD_COLUMNS`` (``key``/``value`` bytes or None). Return one row per record,
        same order, with: the ``Identity`` columns (None for a dead letter), ``reason`` (None: valid;
        else why it is a dead letter), ``event_time`` (UTC; NaT when unknown: never judged late) and,
        for ``Identity.version``, that column. Any other column that the identity table also has is
        reconciled: the sink's row must hold the value recomputed here (for ``latest`` tables, the
        value of the winning version). Must agree with ``build``: the proof holds the sink to it.
        """


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
                               "(tables, build, split); see docs/add-your-stream.md")
    try:
        transform = cls()
    except TypeError as exc:
        raise TransformRefused(f"{where}: {exc} (a transform class is created with no arguments and must "
                               "implement tables, build, split, identity and expect)") from exc
    check_declarations(transform, where)
    return transform


def check_declarations(transform: Transform, where: str) -> None:
    """Refuse a transform whose declarations disagree: an identity or dead-letter table it does not
    declare, identity columns its table lacks, a version that is not the ``latest`` table's."""
    tables = {t.name: t for t in transform.tables}
    ident = transform.identity
    if not isinstance(ident, Identity):
        raise TransformRefused(f"{where}: identity must be a rewind.stream.contract.Identity, "
                               f"got {type(ident).__name__}")
    table = tables.get(ident.table)
    if table is None:
        raise TransformRefused(f"{where}: identity table {ident.table!r} is not among its tables {sorted(tables)}")
    lacking = [c for c in ident.columns if c not in table.column_names]
    if not ident.columns or lacking:
        raise TransformRefused(f"{where}: identity columns {list(ident.columns)} are not all columns of table "
                               f"{table.name!r} (lacking {lacking}; it has {list(table.column_names)})")
    if (table.on_conflict == "latest") != (ident.version is not None) or \
            (ident.version is not None and ident.version != table.version):
        raise TransformRefused(f"{where}: identity version {ident.version!r} must be the version column of table "
                               f"{table.name!r} (on_conflict {table.on_conflict!r}, version {table.version!r}): "
                               "a 'latest' table needs it, other tables must not have one")
    dead = tables.get(transform.dead_letter_table)
    coords = ("topic", "partition", "offset", "reason")
    if dead is None or any(c not in dead.column_names for c in coords):
        raise TransformRefused(f"{where}: dead-letter table {transform.dead_letter_table!r} must be among its tables "
                               f"with columns {list(coords)} (tables: {sorted(tables)})")
