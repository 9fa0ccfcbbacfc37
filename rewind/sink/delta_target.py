"""Where a Delta Lake sink writes: the ``delta://`` URL and ``sink.options``.

``url: delta:///ABSOLUTE/DIR`` (a local or shared file system): each table of the stream is the
Delta table ``DIR/<table_prefix><table>``, the ledger ``DIR/<table_prefix>rewind_batches``.

``options``: ``delta.*`` are table properties set when the sink creates a table
(``delta.appendOnly`` and the like); ``write_from`` in the sink entry says who writes the files
(``driver``: the driver writes through delta-rs; ``executors``: Spark's executors write them and
the driver commits, through delta-spark).

Why checked at registry load: exactly-once into Delta rests on the app id Rewind derives from the
stream (``txnAppId = rewind.<stream>``) and the batch id as ``txnVersion``; an option that sets its
own app id or version would let two writers share one, or a restarted one skip batches it never
wrote. Such options are refused before anything runs, naming the option and the fix. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from rewind.sink.errors import SinkRefused

__all__ = ["DeltaSinkTarget", "is_delta_url", "parse_delta_sink"]

#: Options that would take the batch identity out of Rewind's hands.
_IDENTITY_OPTIONS = ("txnAppId", "txnVersion", "delta.txnAppId", "delta.txnVersion", "queryId")


@dataclass(frozen=True)
class DeltaSinkTarget:
    """A Delta sink's root directory and the table properties of the tables it creates."""

    root: str
    properties: dict[str, str] = field(default_factory=dict)

    def table_path(self, physical_name: str) -> str:
        return f"{self.root.rstrip('/')}/{physical_name}"


def is_delta_url(url: str) -> bool:
    return url.strip().lower().startswith("delta:")


def needs_delta_spark(url: str, write_from: str) -> bool:
    """Whether a sink's driver needs delta-spark's jars and session extension: a Delta sink written from the
    executors (``rewind.driver.delta_writer``); delta-rs writes it from the driver otherwise."""
    return write_from == "executors" and is_delta_url(url)


def parse_delta_sink(url: str, options: Mapping[str, str] | None = None) -> DeltaSinkTarget:
    """The target of a ``delta://`` sink URL with its options, or SinkRefused naming what to change."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() != "delta" or parts.netloc or parts.query or parts.fragment \
            or not parts.path.startswith("/") or len(parts.path) < 2:
        raise SinkRefused(f"invalid Delta sink URL {url!r}: expected delta:///ABSOLUTE/DIR (three slashes: the "
                          "tables are DIR/<table>)")
    properties: dict[str, str] = {}
    for key, value in (options or {}).items():
        if key in _IDENTITY_OPTIONS:
            raise SinkRefused(f"sink option {key!r}: Rewind writes every batch with txnAppId=rewind.<stream> and "
                              "txnVersion=<batch id>, so that a re-run batch is recognised and a restarted "
                              "driver never skips one it did not write; remove the option")
        if not key.startswith("delta."):
            raise SinkRefused(f"unknown sink option {key!r} for a Delta sink: use delta.<table property> "
                              "(set on the tables the sink creates)")
        properties[key] = str(value)
    return DeltaSinkTarget(parts.path, properties)
