"""What the inventory stream does with one Kafka record, in plain Python: the rules ``expect`` applies.

Why a second statement of the rules (the first is the Spark plan of ``rewind.inventory.transform``):
the proof must recompute every record without the code under test, and the stream must parse in
the JVM (``from_json``, no Python UDF). So this module mirrors exactly what Spark's JSON parser
(Jackson, through ``from_json`` in PERMISSIVE mode with a corrupt-record column) accepts, and
``tests/test_inventory.py`` holds the two to the same verdicts on a corpus of odd payloads.

A record is ``malformed`` unless all of these hold, in this order of checks:

- the value is present and valid UTF-8; its first JSON value (after JSON whitespace; whatever
  follows it is ignored, as Jackson ignores it) parses strictly: no NaN/Infinity, no single
  quotes, no comments, no control characters in strings, no leading zeros, no number of more
  than 1,000 digits;
- it is an object holding ``sku``, ``warehouse``, ``quantity``, ``version`` and ``updated_at``,
  none null (names are case-sensitive; a repeated name: the last one counts, but every
  occurrence of ``quantity`` or ``version`` must be an integer or null, as Spark converts each);
- ``quantity`` and ``version`` are JSON integers within int64 (not 5.0, not "5", not true);
- ``warehouse`` is a string ``WH-`` + 1 to 16 of ``A-Z0-9``;
- ``updated_at`` is a string ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (years 1900-2099) naming a real instant.

Then ``unknown_sku`` when ``sku`` is not a string of the catalog (Spark turns a non-string token
into its JSON text, never a catalog SKU), then ``negative_quantity`` when ``quantity < 0``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MALFORMED = "malformed"
UNKNOWN_SKU = "unknown_sku"
NEGATIVE_QUANTITY = "negative_quantity"
REASONS = (MALFORMED, UNKNOWN_SKU, NEGATIVE_QUANTITY)
FIELDS = ("sku", "warehouse", "quantity", "version", "updated_at")
INTEGER_FIELDS = ("quantity", "version")
#: Regular expression bodies, anchored by each side its own way (Java: ``^...\z``; Python: fullmatch).
WAREHOUSE_RE = r"WH-[A-Z0-9]{1,16}"
UPDATED_AT_RE = r"(19|20)[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z"
#: ``updated_at``'s format for Spark (``try_to_timestamp``) and for Python (``strptime``, the Z cut off).
SPARK_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"
PY_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
#: Jackson's ``StreamReadConstraints.maxNumberLength`` (Spark's JSON parser keeps the default).
MAX_NUMBER_DIGITS = 1000
_JSON_WS = " \t\n\r"
_WAREHOUSE = re.compile(WAREHOUSE_RE)
_UPDATED_AT = re.compile(UPDATED_AT_RE)


@dataclass(frozen=True)
class Verdict:
    """One record: ``reason`` None for a stock update, else why it is a dead letter. The fields are
    set whenever they were read (a ``negative_quantity`` record still has its sku and quantity)."""

    reason: str | None
    sku: str | None = None
    warehouse: str | None = None
    quantity: int | None = None
    version: int | None = None
    updated_at: datetime | None = None


class _Object(dict[str, Any]):
    """A JSON object that remembers every (name, value) pair, repeats included."""

    pairs: list[tuple[str, Any]]


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    obj.pairs = pairs
    return obj


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-numeric number {name}")  # Spark parses with allowNonNumericNumbers=false


def _number(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """Jackson refuses a number of more than ``MAX_NUMBER_DIGITS`` digits (integer, fraction and
    exponent digits together), even in a field the schema does not read: so does this parser."""
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_DIGITS and sum(c.isdigit() for c in text) > MAX_NUMBER_DIGITS:
            raise ValueError("number too long")
        return convert(text)
    return parse


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_refuse_constant, parse_int=_number(int),
                            parse_float=_number(float))


def first_json_value(text: str) -> Any:
    """The first JSON value of ``text`` (leading JSON whitespace skipped, the rest ignored, like
    Jackson in ``from_json``); raises ValueError when it does not parse."""
    start = len(text) - len(text.lstrip(_JSON_WS))
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc
    return value


def _is_int64(value: Any) -> bool:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def parse_updated_at(value: Any) -> datetime | None:
    """``updated_at`` as a UTC datetime, or None when it is not one (see the module docstring)."""
    if not isinstance(value, str) or not _UPDATED_AT.fullmatch(value):
        return None
    try:
        return datetime.strptime(value[:-1], PY_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def judge(value: bytes | None, catalog: Collection[str]) -> Verdict:
    """The stream's verdict on one Kafka record value (``catalog``: the SKUs the catalog holds)."""
    if value is None:
        return Verdict(MALFORMED)
    try:
        doc = first_json_value(value.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return Verdict(MALFORMED)
    if not isinstance(doc, _Object):
        return Verdict(MALFORMED)
    for name, v in doc.pairs:  # Spark converts every occurrence: one that is not an integer fails the record
        if name in INTEGER_FIELDS and v is not None and not _is_int64(v):
            return Verdict(MALFORMED)
    if any(doc.get(f) is None for f in FIELDS):
        return Verdict(MALFORMED)
    warehouse, updated_at = doc["warehouse"], parse_updated_at(doc["updated_at"])
    if not isinstance(warehouse, str) or not _WAREHOUSE.fullmatch(warehouse) or updated_at is None:
        return Verdict(MALFORMED)
    sku = doc["sku"]
    read = Verdict(None, sku if isinstance(sku, str) else None, warehouse, doc["quantity"], doc["version"], updated_at)
    if not isinstance(sku, str) or sku not in catalog:
        return Verdict(UNKNOWN_SKU, read.sku, warehouse, read.quantity, read.version, updated_at)
    if read.quantity is not None and read.quantity < 0:
        return Verdict(NEGATIVE_QUANTITY, sku, warehouse, read.quantity, read.version, updated_at)
    return read
