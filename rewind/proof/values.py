"""How a proof compares a sink's value with its recomputation: by the column's type, exactly.

Why one module: ``rewind verify``, the DQ proof and a replay's proof judge rows (record tables,
``rewind.proof.contract_frames``) and groups (aggregate tables, ``rewind.proof.aggregates``) with
the same rule, so a value is right or wrong in one place. The rule is the sink column's type
(``rewind.api.tables.Column``), not the dtype pandas happened to read:

- ``int``/``bigint``: exactly, as Python integers (never through float64, which holds integers
  exactly only up to 2**53: a total of 30,190,708 changed by one cent used to pass within 1e-6);
- ``decimal(P,S)``: exactly, as ``decimal.Decimal`` at the column's scale (a recomputation with
  more digits, e.g. a float sum, is rounded half-even to the scale the sink stores);
- ``string``: exactly (a trailing space is a difference); ``binary``: byte for byte;
- ``timestamp``: the same UTC instant at microseconds, the precision every sink stores;
- ``double``: within a relative tolerance of the larger magnitude (floor 1.0, so it is absolute
  for values below 1): ``TableSpec.tolerance`` per column, else ``DEFAULT_FLOAT_TOLERANCE``;
- a null equals only a null (null and 0 differ, null and "" differ).

Columns of unknown type (a frame with no table behind it) are compared by their values' own
types with the same rules (integers exactly, floats within the default tolerance).
Pure: pandas and numpy only.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

import numpy as np
import pandas as pd

from rewind.api.tables import decimal_of

#: The relative tolerance of a ``double`` column a table does not declare one for (sums of doubles
#: differ in their last bits with the order of summation; 1e-9 is far above that, far below a cent).
DEFAULT_FLOAT_TOLERANCE = 1e-9
#: Every sink stores times at microseconds (docs/sinks.md, "How values are stored").
TIME_UNIT = "us"

Kind = Literal["int", "decimal", "float", "time", "text", "bytes", "any"]


@dataclass(frozen=True)
class ValueRule:
    """How one column's values compare (``rule_of``): its kind, a decimal's scale, a double's tolerance."""

    kind: Kind
    scale: int | None = None
    tolerance: float = DEFAULT_FLOAT_TOLERANCE

    def describe(self) -> str:
        return {"int": "exact integer", "decimal": f"exact decimal at scale {self.scale}",
                "float": f"within relative {self.tolerance:g}", "time": "exact UTC instant at microseconds",
                "text": "exact text", "bytes": "exact bytes", "any": "by value type"}[self.kind]


ANY = ValueRule("any")


def rule_of(column_type: str | None, tolerance: float | None = None) -> ValueRule:
    """The rule of a sink column type (``int``, ``bigint``, ``decimal(P,S)``, ``double``, ...)."""
    if column_type is None:
        return ANY
    if column_type in ("int", "bigint"):
        return ValueRule("int")
    if column_type == "double":
        return ValueRule("float", tolerance=DEFAULT_FLOAT_TOLERANCE if tolerance is None else float(tolerance))
    if column_type == "timestamp":
        return ValueRule("time")
    if column_type == "string":
        return ValueRule("text")
    if column_type == "binary":
        return ValueRule("bytes")
    decimal_type = decimal_of(column_type)
    if decimal_type is not None:
        return ValueRule("decimal", scale=decimal_type[1])
    return ANY


def rules_for(table: Any) -> dict[str, ValueRule]:
    """Every column of a ``TableSpec`` -> its rule (with the tolerance the table declares, if any)."""
    tolerance_of = getattr(table, "tolerance_of", None)
    return {c.name: rule_of(c.type, tolerance_of(c.name) if tolerance_of else None) for c in table.columns}


# --------------------------------------------------------------------------- nulls and plain values
def is_null(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    if isinstance(v, (float, np.floating)):
        return bool(np.isnan(v))
    if isinstance(v, decimal.Decimal):
        return v.is_nan()
    if isinstance(v, np.datetime64):
        return bool(np.isnat(v))
    return False


class _Bad:
    """A value that cannot be read as the column's kind: equal to nothing (so it is reported)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)


def _as_int(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        # a float holds every integer only up to 2**53: beyond, it cannot say which integer it means
        return int(f) if f.is_integer() and abs(f) <= 2 ** 53 else _Bad(v)
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else _Bad(v)
    if isinstance(v, str):
        try:
            return int(v.strip()) if v.strip() == v else _Bad(v)
        except ValueError:
            return _Bad(v)
    return _Bad(v)


def _as_decimal(v: Any, scale: int | None) -> Any:
    try:
        if isinstance(v, decimal.Decimal):
            d = v
        elif isinstance(v, (bool, np.bool_)):
            return _Bad(v)
        elif isinstance(v, (int, np.integer)):
            d = decimal.Decimal(int(v))
        elif isinstance(v, (float, np.floating)):
            d = decimal.Decimal(repr(float(v)))
        elif isinstance(v, str) and v.strip() == v:
            d = decimal.Decimal(v)
        else:
            return _Bad(v)
        if not d.is_finite():
            return _Bad(v)
        if scale is not None:
            with decimal.localcontext() as ctx:
                ctx.prec = 80
                d = d.quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_EVEN)
        return d
    except (decimal.InvalidOperation, ValueError):
        return _Bad(v)


def _as_float(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return _Bad(v)
    if isinstance(v, (int, float, np.integer, np.floating, decimal.Decimal)):
        return float(v)
    if isinstance(v, str) and v.strip() == v:
        try:
            return float(v)
        except ValueError:
            return _Bad(v)
    return _Bad(v)


def _as_time(v: Any) -> Any:
    if not isinstance(v, (datetime, date, pd.Timestamp, np.datetime64, str)):
        return _Bad(v)
    try:
        t = pd.Timestamp(v)
    except (ValueError, TypeError):
        return _Bad(v)
    t = t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
    return t.floor(TIME_UNIT).value  # ns since the epoch, at the sinks' precision


def _as_text(v: Any) -> Any:
    if isinstance(v, str):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return _Bad(v)
    return str(v.item() if isinstance(v, np.generic) else v)


def _as_bytes(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    return _Bad(v)


def plain(v: Any, rule: ValueRule = ANY) -> Any:
    """One non-null value as the plain Python value its rule compares (``_Bad`` if it is not one)."""
    kind = rule.kind
    if kind == "any":
        kind = _kind_of_value(v)
    if kind == "int":
        return _as_int(v)
    if kind == "decimal":
        return _as_decimal(v, rule.scale)
    if kind == "float":
        return _as_float(v)
    if kind == "time":
        return _as_time(v)
    if kind == "bytes":
        return _as_bytes(v)
    return _as_text(v)


def _kind_of_value(v: Any) -> Kind:
    if isinstance(v, (bool, np.bool_, int, np.integer)):
        return "int"
    if isinstance(v, decimal.Decimal):
        return "decimal"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, (datetime, date, pd.Timestamp, np.datetime64)):
        return "time"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "bytes"
    return "text"


def same_value(a: Any, b: Any, rule: ValueRule = ANY) -> bool:
    """One sink value ``a`` against its recomputation ``b`` under ``rule``."""
    a_null, b_null = is_null(a), is_null(b)
    if a_null or b_null:
        return a_null and b_null
    if rule.kind == "any":
        ka, kb = _kind_of_value(a), _kind_of_value(b)
        if ka != kb and {ka, kb} <= {"int", "decimal", "float"}:
            # mixed numbers of unknown column type: a float on either side means within tolerance,
            # else (int against decimal) exactly as decimals
            rule = ValueRule("float") if "float" in (ka, kb) else ValueRule("decimal")
        elif ka != kb and "time" in (ka, kb):
            rule = ValueRule("time")
        else:
            rule = ValueRule(ka)
    x, y = plain(a, rule), plain(b, rule)
    if isinstance(x, _Bad) or isinstance(y, _Bad):
        return False
    if rule.kind == "float":
        return _close(x, y, rule.tolerance)
    return bool(x == y)


def _close(x: float, y: float, tolerance: float) -> bool:
    if x == y:
        return True  # also +-inf
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
        return False
    return abs(x - y) <= tolerance * max(1.0, abs(x), abs(y))


def equal_values(a: pd.Series, b: pd.Series, rule: ValueRule = ANY) -> np.ndarray:
    """Element-wise ``same_value`` of two aligned series (sink, recomputation) under ``rule``.

    Fast paths where exactness is kept: two integer columns compare as int64, two float columns
    within the tolerance in numpy, two time columns as UTC nanoseconds floored to microseconds;
    everything else value by value.
    """
    a = a.reset_index(drop=True)
    b = b.reset_index(drop=True)
    n = len(a)
    if n == 0:
        return np.zeros(0, dtype=bool)
    a_null, b_null = a.isna().to_numpy(dtype=bool), b.isna().to_numpy(dtype=bool)
    both = a_null & b_null
    one = a_null ^ b_null
    kind = rule.kind
    if kind in ("int", "any") and _int_dtype(a) and _int_dtype(b):
        x = a.astype("Int64").to_numpy(dtype="int64", na_value=0)
        y = b.astype("Int64").to_numpy(dtype="int64", na_value=0)
        return both | (~a_null & ~b_null & (x == y))
    if kind in ("float", "any") and _float_dtype(a) and _float_dtype(b):
        x = a.to_numpy(dtype="float64", na_value=np.nan)
        y = b.to_numpy(dtype="float64", na_value=np.nan)
        tol = rule.tolerance
        with np.errstate(invalid="ignore"):
            close = (x == y) | (np.abs(x - y) <= tol * np.maximum(1.0, np.maximum(np.abs(x), np.abs(y))))
        return both | (~a_null & ~b_null & close)
    if kind in ("time", "any") and _time_dtype(a) and _time_dtype(b):
        x = _time_ns(a)
        y = _time_ns(b)
        return both | (~a_null & ~b_null & (x == y))
    out = np.fromiter((same_value(x, y, rule) for x, y in zip(a.tolist(), b.tolist())), dtype=bool, count=n)
    return (out & ~one) | both


def _time_ns(s: pd.Series) -> np.ndarray:
    """UTC nanoseconds at the sinks' precision (whatever unit the column holds: a sink reads ns,
    Arrow hands Spark's rows in us; an int64 view of either would count in its own unit)."""
    t = pd.to_datetime(s, utc=True).dt.as_unit("ns").dt.floor(TIME_UNIT)
    return t.array.asi8.copy()


def _int_dtype(s: pd.Series) -> bool:
    return pd.api.types.is_integer_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype)


def _float_dtype(s: pd.Series) -> bool:
    return pd.api.types.is_float_dtype(s.dtype)


def _time_dtype(s: pd.Series) -> bool:
    return pd.api.types.is_datetime64_any_dtype(s.dtype)


# --------------------------------------------------------------------------- keys and coordinates
def key_text(v: Any, rule: ValueRule = ANY) -> str | None:
    """One key value as the text two sides agree on (None for a null): integers without a float's
    ``.0``, decimals normalised, times as UTC ISO at microseconds, bytes in hex, text as it is."""
    if is_null(v):
        return None
    x = plain(v, rule)
    if isinstance(x, _Bad):
        return f"\x00{x.value!r}"  # a value of the wrong kind matches no proper key
    kind = rule.kind if rule.kind != "any" else _kind_of_value(v)
    if rule.kind == "any" and kind == "float" and float(x).is_integer() and abs(x) <= 2 ** 53:
        return str(int(x))  # a key of unknown type read as float (a column with a null) names the integer
    if kind == "time":
        return pd.Timestamp(x, tz="UTC").isoformat()
    if kind == "decimal":
        return format(x.normalize() if x != 0 else decimal.Decimal(0), "f")
    if kind == "bytes":
        return x.hex()
    if kind == "float":
        return repr(x)
    return str(x)


def text_key(frame: pd.DataFrame, columns: Sequence[str],
             rules: Mapping[str, ValueRule] | None = None) -> pd.Series:
    """Identity columns as one comparable text key per row (None when a part is null)."""
    if not len(frame):
        return pd.Series([], dtype=object, index=frame.index)
    rules = rules or {}
    parts = [[key_text(v, rules.get(c, ANY)) for v in frame[c].tolist()] for c in columns]
    out = [None if any(p is None for p in row) else "\x1f".join(row)  # type: ignore[arg-type]
           for row in zip(*parts)]
    return pd.Series(out, dtype=object, index=frame.index)


def coords_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's Kafka coordinates ``(topic, partition, offset)`` as exact Python values."""
    if not len(frame):
        return pd.Series([], dtype=object, index=frame.index)
    return pd.Series(list(zip(frame["topic"].astype(str), pd.to_numeric(frame["partition"]).astype("int64"),
                              pd.to_numeric(frame["offset"]).astype("int64"))), index=frame.index, dtype=object)


def shown(v: Any) -> Any:
    """A value as plain Python for a message: None for nulls, ISO for times, text for decimals and bytes."""
    if is_null(v):
        return None
    if isinstance(v, (pd.Timestamp, datetime)):
        return pd.Timestamp(v).isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return v.item() if isinstance(v, np.generic) else v
