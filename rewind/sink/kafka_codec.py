"""A sink table's rows as Kafka records, and back: JSON a consumer in any language can read.

Why JSON and not Avro: no schema registry is needed to read Rewind's output topics, and every
column type maps to one JSON form. A record's key is the JSON array of the table's key values
(so one key always lands in one partition, which keeps a key's rows in write order: the first
row of an ``ignore`` table, the last of a ``replace`` one); its value is the JSON object of the
whole row. Binary values are base64 strings, timestamps ISO-8601 UTC strings with microseconds
("2024-05-01T10:00:00.000000Z"), nulls are JSON null. Decoding uses the table's column types to
turn them back, so ``read_table`` gives the SQL sink's dtypes. Pure: no I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator, Mapping
from typing import Any

from rewind.sink.convert import PreparedTable
from rewind.sink.schema import TableSpec

__all__ = ["decode_value", "encode_table", "json_value"]

_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def json_value(kind: str, v: Any) -> Any:
    """One converted column value (``rewind.sink.convert``: Python scalars, UTC datetimes) as JSON."""
    if v is None:
        return None
    if kind == "binary":
        return base64.b64encode(bytes(v)).decode("ascii")
    if kind == "timestamp":
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        return v.strftime(_TS_FORMAT)
    return v


def _from_json(kind: str, v: Any) -> Any:
    if v is None:
        return None
    if kind == "binary":
        return base64.b64decode(v)
    if kind == "timestamp":
        return dt.datetime.strptime(v, _TS_FORMAT).replace(tzinfo=dt.UTC)
    return v


def encode_table(prepared: PreparedTable) -> Iterator[tuple[bytes, bytes, dict[str, Any]]]:
    """(key bytes, value bytes, the row's JSON values) per row of a prepared table, in input order."""
    spec = prepared.spec
    kinds = {c.name: c.type for c in spec.columns}
    names = list(spec.column_names)
    for values in zip(*(prepared.columns[c] for c in names)):
        row = {n: json_value(kinds[n], v) for n, v in zip(names, values)}
        key = json.dumps([row[k] for k in spec.key], separators=(",", ":")).encode()
        yield key, json.dumps(row, separators=(",", ":")).encode(), row


def decode_value(spec: TableSpec, raw: bytes | None) -> dict[str, Any]:
    """A record's value -> the row (column -> Python value); ValueError for a value that is not one of
    this table's rows (a foreign producer wrote to the topic)."""
    if raw is None:
        raise ValueError("the record has no value")
    row = json.loads(raw)
    if not isinstance(row, Mapping):
        raise ValueError(f"the value is JSON {type(row).__name__}, not an object")
    kinds = {c.name: c.type for c in spec.columns}
    unknown = [k for k in row if k not in kinds]
    if unknown:
        raise ValueError(f"unknown column {unknown[0]!r} (table {spec.name!r} has {list(kinds)})")
    return {name: _from_json(kind, row.get(name)) for name, kind in kinds.items()}
