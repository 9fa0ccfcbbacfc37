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
from typing import TYPE_CHECKING, Any

from rewind.errors import Refused

if TYPE_CHECKING:
    import pandas as pd

    from rewind.sink.schema import TableSpec


class TransformRefused(Refused, ValueError):
    """A registry entry's transform cannot be used; the message names the stream, the class and what is missing."""


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
        return cls()
    except TypeError as exc:
        raise TransformRefused(f"{where}: {exc} (a transform class is created with no arguments and must "
                               "implement tables, build and split)") from exc
