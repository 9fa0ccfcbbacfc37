"""Rows in -> driver-ready Python values; database values out -> frames with fixed dtypes. The hot path.

Why: drivers take Python scalars only (sqlite3 and psycopg2 reject numpy.int64), missing values
arrive as None/NaN/NA/NaT, and timestamps must be UTC. Rows reach the sink as pandas frames
(a batch collected with ``toArrow().to_pandas()``) or lists of dicts. Conversion happens before the transaction
starts, so a value that cannot be converted fails the call (SinkRefused) before any write: all or
nothing. A number column refuses a value that is not one (SQLite would store the text as it
is); other values are passed through and left to the database to judge.

Why column-wise with fast paths by dtype: this runs on every row of every batch. On SQLite the
converted tuples go straight to sqlite3's executemany, because SQLAlchemy's per-row parameter
processing would double the time; so values must be driver-ready here, and a column whose values
already have the right Python class costs one pass over a list. Measured (``docs/benchmarks.md``,
before the move to Apache Kafka): Spark's rate source shaped into the demo's rows goes through the
same writer and SQLite sink at 125,064 rows/s, 1.49x a raw Kafka consumer; in the demo stream the
sink transaction is 2.35 s of 27 s for 500,000 events. The sink path is not the limit.

Reading goes the other way (``typed_frame``): every database hands back the same dtypes.

Decimals (``decimal(P,S)``) are exact end to end: a value (``decimal.Decimal``, int, a literal such
as "12.30", a float by its shortest repr, ``Decimal(repr(f))``) becomes a ``Decimal`` at the column's
scale, and one that would need rounding to fit the scale or has more than P-S digits before the
point is refused (``SinkRefused``): never rounded silently. For SQLite (``sqlite_text``) it is
written as its canonical text ("12.30", never an exponent): SQLite has no decimal type, and a
NUMERIC column would keep it as an 8-byte float. Times are kept at microseconds on every sink
(finer parts of a pandas Timestamp are floored, towards the past; docs/sinks.md).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rewind.api.tables import Column, TableSpec, decimal_of
from rewind.sink.contract import Rows
from rewind.sink.errors import SinkRefused

__all__ = ["PreparedTable", "chunks", "decimal_text", "dedupe_index", "exact_decimal", "prepare_rows",
           "prepare_table", "read_decimal", "typed_frame"]


# --------------------------------------------------------------------------- one value
def _is_null(v: Any) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def _conv_string(v: Any) -> Any:
    if _is_null(v):
        return None
    return str(v) if isinstance(v, str) else v  # str subclasses (numpy.str_) -> str


def _conv_int(v: Any) -> Any:
    if _is_null(v):
        return None
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        if not float(v).is_integer():
            raise ValueError(f"{v!r} is not an integer")
        return int(v)
    try:  # an integer literal ("42"), a Decimal; anything else is refused here, not by the database
        number = float(v)
        if number.is_integer():
            return int(v) if isinstance(v, str) else int(number)
    except (TypeError, ValueError):
        pass
    raise ValueError(f"{v!r} is not an integer")


def _conv_double(v: Any) -> Any:
    if _is_null(v):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    try:  # a numeric literal ("1.5"), a Decimal; anything else is refused here, not by the database
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{v!r} is not a number") from None


def _conv_binary(v: Any) -> Any:
    if _is_null(v):
        return None
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return v


#: Quantizing to a column's scale: enough digits for any decimal(38,S) value, so a value that does not
#: fit raises InvalidOperation (refused) instead of being rounded by the default 28-digit context.
_DECIMAL_CONTEXT = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_EVEN, traps=[decimal.InvalidOperation])


def _as_decimal(v: Any) -> decimal.Decimal:
    """A value -> the Decimal it stands for, exactly (floats by their shortest repr: 0.1 is 0.1)."""
    if isinstance(v, decimal.Decimal):
        d = v
    elif isinstance(v, (bool, np.bool_)):
        raise ValueError(f"{v!r} is not a decimal")
    elif isinstance(v, (int, np.integer)):
        d = decimal.Decimal(int(v))
    elif isinstance(v, (float, np.floating)):
        d = decimal.Decimal(repr(float(v)))
    elif isinstance(v, str):
        try:
            d = decimal.Decimal(v.strip())
        except decimal.InvalidOperation:
            raise ValueError(f"{v!r} is not a decimal") from None
    else:
        raise ValueError(f"{v!r} is not a decimal (expected Decimal, int, float or a literal like '12.30')")
    if not d.is_finite():
        raise ValueError(f"{v!r} is not a finite decimal")
    return d


def exact_decimal(v: Any, precision: int, scale: int) -> decimal.Decimal:
    """``v`` as a Decimal with exactly ``scale`` digits after the point; ValueError (naming the value)
    if that needs rounding or leaves more than ``precision - scale`` digits before the point."""
    d = _as_decimal(v)
    kind = f"decimal({precision},{scale})"
    try:
        q = d.quantize(decimal.Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
    except decimal.InvalidOperation:
        raise ValueError(f"{v!r} does not fit {kind}: more than {precision - scale} digits before the point") from None
    if q != d:
        raise ValueError(f"{v!r} does not fit {kind}: it has more than {scale} digits after the point "
                         "(refused, not rounded: round it in build() if that is meant)")
    if q.is_zero():
        return q.copy_abs()  # -0.00 -> 0.00: one key, one text
    if q.adjusted() >= precision - scale:
        raise ValueError(f"{v!r} does not fit {kind}: more than {precision - scale} digits before the point")
    return q


def decimal_text(d: decimal.Decimal) -> str:
    """The canonical text of a Decimal at its scale: plain notation ("0.0000001000", never "1.000E-7")."""
    return format(d, "f")


def read_decimal(v: Any, scale: int) -> decimal.Decimal | None:
    """A stored decimal (Decimal, canonical text, or a number) -> a Decimal at ``scale`` (None for null)."""
    if _is_null(v):
        return None
    d = v if isinstance(v, decimal.Decimal) else _as_decimal(v)
    return d.quantize(decimal.Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)


@functools.lru_cache(maxsize=256)
def _decimal_converter(precision: int, scale: int, sqlite_text: bool) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if _is_null(v):
            return None
        q = exact_decimal(v, precision, scale)
        return decimal_text(q) if sqlite_text else q

    return conv


def _converter(col: Column, sqlite_text: bool) -> Callable[[Any], Any]:
    """The value converter of a column (a decimal's depends on its precision, scale and the target)."""
    found = _CONVERTERS.get(col.type)
    if found is not None:
        return found
    precision, scale = decimal_of(col.type) or (0, 0)
    return _decimal_converter(precision, scale, sqlite_text)


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": _conv_string, "int": _conv_int, "bigint": _conv_int,
    "double": _conv_double, "binary": _conv_binary,
}
#: The Python class a column's values usually already have (then no conversion call is needed).
_NATIVE: dict[str, type] = {"string": str, "int": int, "bigint": int, "double": float, "binary": bytes}


# --------------------------------------------------------------------------- one column
def _timestamps_utc(values: pd.Series, sqlite_text: bool) -> list[Any]:
    """datetime/Timestamp/ISO-string values -> UTC (naive values are taken as UTC).

    PostgreSQL gets aware datetimes (timestamptz). SQLite has no time zones, and
    its rows bypass SQLAlchemy's per-row bind processing for speed, so for it
    `sqlite_text=True` renders UTC text in SQLAlchemy's own SQLite DATETIME
    format ("YYYY-MM-DD HH:MM:SS.ffffff"), which SQLAlchemy reads back.
    """
    if values.dtype == object:
        bad = [v for v in values if not _is_null(v) and not isinstance(v, (dt.datetime, dt.date, str, np.datetime64))]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a timestamp (expected datetime, pandas Timestamp or ISO string)")
    elif not (pd.api.types.is_datetime64_any_dtype(values.dtype) or values.isna().all()):
        raise ValueError(f"values of dtype {values.dtype} are not timestamps")
    if values.dtype == object:
        ts = pd.to_datetime(values, utc=True, format="mixed")
    else:
        ts = pd.to_datetime(values, utc=True)
    if sqlite_text:
        text = np.datetime_as_string(ts.dt.tz_localize(None).to_numpy(dtype="datetime64[us]"), unit="us")
        return [None if t == "NaT" else t[:10] + " " + t[11:] for t in text.tolist()]
    out = ts.array.to_pydatetime().tolist() if len(ts) else []
    return [None if v is None or v is pd.NaT else v for v in out]


def _column_values(series: pd.Series, col: Column, sqlite_text: bool) -> list[Any]:
    """One DataFrame column -> a list of driver-ready Python values (fast paths by dtype)."""
    if col.type == "timestamp":
        return _timestamps_utc(series, sqlite_text)
    kind = series.dtype.kind if isinstance(series.dtype, np.dtype) else "extension"  # Int64 etc. hold pd.NA
    if col.type in ("int", "bigint") and kind in ("i", "u"):
        return series.tolist()  # numpy ints -> Python ints, no nulls possible
    if col.type in ("int", "bigint") and isinstance(series.dtype, pd.core.dtypes.dtypes.BaseMaskedDtype) \
            and series.dtype.kind in ("i", "u"):
        return series.to_numpy(dtype=object, na_value=None).tolist()  # Int64 & co: ints and None, 10x faster
    if col.type == "double" and kind == "f":
        return [None if v != v else v for v in series.tolist()]
    conv: Callable[[Any], Any]  # a local name: one lookup per column, not per value
    if col.type == "string" and kind == "O":
        conv = _conv_string
        return [v if v.__class__ is str else conv(v) for v in series.tolist()]
    if col.type == "binary" and kind == "O":
        conv = _conv_binary
        return [v if v.__class__ is bytes else conv(v) for v in series.tolist()]
    conv = _converter(col, sqlite_text)
    return [conv(v) for v in series.tolist()]


def _list_values(values: list[Any], col: Column, sqlite_text: bool) -> list[Any]:
    """One column of a list of dicts -> driver-ready Python values."""
    if col.type == "timestamp":
        return _timestamps_utc(pd.Series(values, dtype=object), sqlite_text)
    if col.type not in _NATIVE:  # a decimal: every value is quantized to the scale
        conv = _converter(col, sqlite_text)
        return [conv(v) for v in values]
    conv, native = _CONVERTERS[col.type], _NATIVE[col.type]
    return [v if v.__class__ is native and v == v else conv(v) for v in values]  # v == v: NaN -> None


# --------------------------------------------------------------------------- one call's rows
@dataclass
class PreparedTable:
    """One table's rows, validated and converted, ready for the driver."""

    spec: TableSpec
    columns: dict[str, list[Any]]  # every spec column, deduplicated by key, in input order
    submitted: int  # rows handed in (before deduplication)

    def records(self) -> list[dict[str, Any]]:
        names = list(self.spec.column_names)
        return [dict(zip(names, vals)) for vals in zip(*(self.columns[c] for c in names))]

    def tuples(self, order: Sequence[str]) -> list[tuple[Any, ...]]:
        return list(zip(*(self.columns[c] for c in order)))


def prepare_rows(specs: Mapping[str, TableSpec], rows: Mapping[str, Rows], *,
                 sqlite_text: bool) -> dict[str, PreparedTable]:
    """Validate and convert every table's rows before the transaction starts (all or nothing)."""
    if not isinstance(rows, Mapping):
        raise SinkRefused(f"rows must map table name -> rows, not {type(rows).__name__}")
    unknown = [t for t in rows if t not in specs]
    if unknown:
        raise SinkRefused(f"unknown table(s) {unknown}: this sink has {sorted(specs)}")
    return {name: prepare_table(specs[name], rows[name], sqlite_text=sqlite_text) for name in specs if name in rows}


def prepare_table(spec: TableSpec, rows: Rows | None, *, sqlite_text: bool) -> PreparedTable:
    """One table's rows -> PreparedTable: columns known, keys and non-nullable columns present,
    values converted (``sqlite_text``: timestamps and decimals as SQLite text), repeated keys deduplicated."""
    columns: dict[str, list[Any]] = {}
    if rows is None:
        n = 0
    elif isinstance(rows, pd.DataFrame):
        extra = [c for c in rows.columns if c not in spec.column_names]
        if extra:
            raise SinkRefused(f"table {spec.name!r}: unknown column {extra[0]!r} (columns: {list(spec.column_names)})")
        if rows.columns.duplicated().any():
            dupes = list(rows.columns[rows.columns.duplicated()])
            raise SinkRefused(f"table {spec.name!r}: duplicate DataFrame columns {dupes}")
        n = len(rows)
        for col in spec.columns:
            if col.name in rows.columns:
                try:
                    columns[col.name] = _column_values(rows[col.name], col, sqlite_text)
                except (ValueError, TypeError) as e:
                    raise SinkRefused(f"table {spec.name!r}, column {col.name!r}: {e}") from None
    else:
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
            raise SinkRefused(f"table {spec.name!r}: rows must be a DataFrame or a list of dicts, "
                              f"not {type(rows).__name__}")
        present: set[str] = set()
        for i, r in enumerate(rows):
            if not isinstance(r, Mapping):
                raise SinkRefused(f"table {spec.name!r}: row {i} is a {type(r).__name__}, not a mapping")
            present.update(r.keys())
        extra = sorted((c for c in present if c not in spec.column_names), key=str)
        if extra:
            raise SinkRefused(f"table {spec.name!r}: unknown column {extra[0]!r} (columns: {list(spec.column_names)})")
        n = len(rows)
        for col in spec.columns:
            if col.name in present:
                try:
                    columns[col.name] = _list_values([r.get(col.name) for r in rows], col, sqlite_text)
                except (ValueError, TypeError) as e:
                    raise SinkRefused(f"table {spec.name!r}, column {col.name!r}: {e}") from None
    if n == 0:
        return PreparedTable(spec, {c: [] for c in spec.column_names}, 0)
    for col in spec.columns:
        required = col.name in spec.key or not col.nullable
        if col.name not in columns:
            if required:
                what = "key column" if col.name in spec.key else "non-nullable column"
                raise SinkRefused(f"table {spec.name!r}: rows are missing {what} {col.name!r}")
            columns[col.name] = [None] * n
        elif required:
            for i, v in enumerate(columns[col.name]):
                if v is None:
                    what = "key column" if col.name in spec.key else "non-nullable column"
                    raise SinkRefused(f"table {spec.name!r}: row {i} has no value for {what} {col.name!r}")
    names = list(spec.column_names)
    try:
        keep = dedupe_index(spec, [columns[k] for k in spec.key], n,
                            columns[spec.version] if spec.version else None)
    except TypeError as e:  # an unhashable key value (a list, a dict) cannot be a key
        raise SinkRefused(f"table {spec.name!r}: bad key value: {e}") from None
    if keep is not None:
        columns = {c: [columns[c][i] for i in keep] for c in names}
    return PreparedTable(spec, {c: columns[c] for c in names}, n)


def dedupe_index(spec: TableSpec, key_columns: list[list[Any]], n: int,
                 version_column: list[Any] | None = None) -> list[int] | None:
    """Row positions to keep when keys repeat inside one input, or None if all keys are unique.

    The conflict rule applies inside the input too: "ignore" keeps the first row of
    a key, "replace" the last, "latest" the highest version (the first of equal ones).
    (PostgreSQL would also reject one upsert statement
    that touches a key twice.)
    """
    keys: list[Any] = key_columns[0] if len(key_columns) == 1 else list(zip(*key_columns))
    if len(set(keys)) == n:
        return None
    position: dict[Any, int] = {}
    if spec.on_conflict == "ignore":
        for i, k in enumerate(keys):
            position.setdefault(k, i)
    elif spec.on_conflict == "latest":
        versions = version_column
        assert versions is not None, "on_conflict 'latest' needs the version column"
        for i, k in enumerate(keys):
            j = position.get(k)
            if j is None or versions[i] > versions[j]:
                position[k] = i
    else:
        for i, k in enumerate(keys):
            position[k] = i
    return sorted(position.values())


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


# --------------------------------------------------------------------------- reading back
def typed_frame(records: list[Any], names: Sequence[str], types: Mapping[str, str]) -> pd.DataFrame:
    """Database rows -> a frame with the same dtypes on every database: Int64 for ints, float64
    for doubles, datetime64[ns, UTC] for timestamps, object holding ``decimal.Decimal`` at the
    column's scale (None for null) for decimals (``types``: column -> portable type)."""
    df = pd.DataFrame.from_records(records, columns=list(names))
    position = {n: i for i, n in enumerate(names)}
    for col, kind in types.items():
        if kind in ("int", "bigint"):
            # from the rows themselves: a column with a NULL was float64 above, rounding past 2**53
            df[col] = pd.array([r[position[col]] for r in records], dtype="Int64")
        elif kind == "double":
            df[col] = df[col].astype("float64")
        elif kind == "timestamp":
            df[col] = pd.to_datetime(df[col], utc=True)
        elif (exact := decimal_of(kind)) is not None:
            scale = exact[1]
            df[col] = pd.Series([read_decimal(r[position[col]], scale) for r in records], index=df.index,
                                dtype=object)
    return df
