"""Delta tables for sink tables: Arrow schemas, the MERGE that applies a conflict rule, and the ledger.

Why MERGE for every table, "ignore" ones too: an append is idempotent only while no key is
written twice, and a key can come back (a replay's ``write_rows``, a re-planned batch, a duplicate
record past the stream's deduplication). ``MERGE ... WHEN NOT MATCHED INSERT`` keeps the first
row of a key ("ignore"), ``WHEN MATCHED UPDATE`` the last ("replace") or the highest version
("latest"): the SQL sink's rules, as SQL strings that delta-rs and delta-spark both take
(``merge_clauses``). Every name is back-quoted: the demo's columns ``key``, ``offset`` and
``partition`` are SQL keywords.

Column types: ``decimal(P,S)`` is Delta's decimal (Arrow ``decimal128(P, S)``), read back as
``decimal.Decimal``; timestamps are ``timestamp[us, UTC]`` (Delta's timestamp: microseconds).

The ledger is a Delta table too (``rewind_batches``: stream, batch_id, committed_at, rows_json,
source_offsets), merged on (stream, batch_id) after the batch's tables: the manifest written last.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from rewind.api.tables import TableSpec, decimal_of
from rewind.sink.convert import PreparedTable
from rewind.sink.errors import SinkRefused
from rewind.sink.kafka_ledger import LedgerEntry

__all__ = ["LEDGER_SCHEMA", "arrow_schema", "arrow_table", "arrow_type", "ledger_entries", "ledger_table",
           "merge_clauses", "quote"]

_TYPES: dict[str, pa.DataType] = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(),
                                  "double": pa.float64(), "timestamp": pa.timestamp("us", tz="UTC"),
                                  "binary": pa.binary()}
LEDGER_SCHEMA = pa.schema([pa.field("stream", pa.string(), False), pa.field("batch_id", pa.int64(), False),
                           pa.field("committed_at", pa.timestamp("us", tz="UTC"), False),
                           pa.field("rows_json", pa.string()), pa.field("source_offsets", pa.string())])
LEDGER_KEY = ("stream", "batch_id")


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow (Delta) type of a portable column type."""
    exact = decimal_of(kind)
    return pa.decimal128(*exact) if exact is not None else _TYPES[kind]


def quote(name: str) -> str:
    return f"`{name}`"


def arrow_schema(spec: TableSpec) -> pa.Schema:
    """The Delta schema of a sink table (nullability as declared; keys are never null)."""
    return pa.schema([pa.field(c.name, arrow_type(c.type), c.nullable and c.name not in spec.key)
                      for c in spec.columns])


def arrow_table(prepared: PreparedTable) -> pa.Table:
    """Prepared rows (converted, deduplicated by key) as an Arrow table of the spec's schema."""
    schema = arrow_schema(prepared.spec)
    columns = {}
    for f in schema:
        try:
            columns[f.name] = pa.array(prepared.columns[f.name], type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise SinkRefused(f"table {prepared.spec.name!r}, column {f.name!r}: {exc}") from None
    return pa.table(columns, schema=schema)


def merge_clauses(spec: TableSpec | None, target: str = "t", source: str = "s") -> tuple[str, str | None, bool]:
    """(join predicate, update condition or None, update at all?) of the MERGE applying ``spec``'s
    conflict rule; None as ``spec`` means the ledger (a re-planned batch replaces its entry)."""
    key = spec.key if spec is not None else LEDGER_KEY
    on = " AND ".join(f"{target}.{quote(k)} = {source}.{quote(k)}" for k in key)
    if spec is None or spec.on_conflict == "replace":
        return on, None, True
    if spec.on_conflict == "latest":
        assert spec.version is not None
        v = quote(spec.version)
        return on, f"{source}.{v} > {target}.{v}", True
    return on, None, False


def ledger_table(entries: list[LedgerEntry]) -> pa.Table:
    return pa.table({"stream": [e.stream for e in entries], "batch_id": [e.batch_id for e in entries],
                     "committed_at": [e.committed_at for e in entries],
                     "rows_json": [json.dumps(e.rows, sort_keys=True) for e in entries],
                     "source_offsets": [e.source_offsets for e in entries]}, schema=LEDGER_SCHEMA)


def ledger_entries(rows: Sequence[Mapping[str, Any]]) -> list[LedgerEntry]:
    out = []
    for r in rows:
        at = r["committed_at"]
        if isinstance(at, dt.datetime) and at.tzinfo is None:
            at = at.replace(tzinfo=dt.UTC)
        out.append(LedgerEntry(str(r["stream"]), int(r["batch_id"]), at, json.loads(r["rows_json"] or "{}"),
                               r["source_offsets"]))
    return out
