"""Comparing sink values with their recomputation: keys as text, Kafka coordinates, values within tolerance.

Why apart: the record proof (``rewind.proof.contract_frames``) and the aggregate proof
(``rewind.proof.aggregates``) compare the same way (floats within ``FLOAT_TOLERANCE`` of the larger
magnitude, times as UTC instants, both null equal), so a value is equal or not by one rule.
Pure: pandas and numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

FLOAT_TOLERANCE = 1e-6


def text_key(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Identity columns as one comparable text key (a sink reads ints as Int64, expect may give str)."""
    if not len(frame):
        return pd.Series([], dtype=object, index=frame.index)
    parts = [frame[c].map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA
                          else str(v)) for c in columns]
    out = parts[0].astype(object)
    for p in parts[1:]:
        out = out.combine(p, lambda a, b: None if a is None or b is None else f"{a}\x1f{b}")
    return out


def coords_of(frame: pd.DataFrame) -> pd.Series:
    if not len(frame):
        return pd.Series([], dtype=object, index=frame.index)
    return pd.Series(list(zip(frame["topic"].astype(str), pd.to_numeric(frame["partition"]).astype("int64"),
                              pd.to_numeric(frame["offset"]).astype("int64"))), index=frame.index, dtype=object)


def equal_values(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Reconciled values against their recomputation, vectorized: floats within tolerance, times as
    UTC instants, both null equal; anything else falls back to ``same_value`` per value."""
    a_null, b_null = a.isna().to_numpy(), b.isna().to_numpy()
    both = a_null & b_null
    try:
        if pd.api.types.is_datetime64_any_dtype(a) or pd.api.types.is_datetime64_any_dtype(b):
            eq = (pd.to_datetime(a, utc=True) == pd.to_datetime(b, utc=True)).to_numpy(dtype=bool)
            return both | eq
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            x = pd.to_numeric(a).astype("float64").to_numpy()
            y = pd.to_numeric(b).astype("float64").to_numpy()
            with np.errstate(invalid="ignore"):
                eq = (x == y) | (np.abs(x - y) <= FLOAT_TOLERANCE * np.maximum(1.0, np.abs(y)))  # x == y: inf
            return both | (eq & ~a_null & ~b_null)
    except (TypeError, ValueError):
        pass
    return np.fromiter((same_value(x, y) for x, y in zip(a, b)), dtype=bool, count=len(a))


def same_value(a: Any, b: Any) -> bool:
    """One reconciled value against its recomputation: floats within tolerance, times as UTC instants."""
    a_null = a is None or a is pd.NA or (isinstance(a, float) and np.isnan(a)) or a is pd.NaT
    b_null = b is None or b is pd.NA or (isinstance(b, float) and np.isnan(b)) or b is pd.NaT
    if a_null or b_null:
        return a_null and b_null
    if isinstance(a, (pd.Timestamp, np.datetime64)) or isinstance(b, (pd.Timestamp, np.datetime64)):
        ta, tb = pd.Timestamp(a), pd.Timestamp(b)
        ta = ta.tz_localize("UTC") if ta.tzinfo is None else ta
        tb = tb.tz_localize("UTC") if tb.tzinfo is None else tb
        return bool(ta == tb)
    if isinstance(a, (float, np.floating)) or isinstance(b, (float, np.floating)):
        try:
            return bool(abs(float(a) - float(b)) <= FLOAT_TOLERANCE * max(1.0, abs(float(b))))
        except (TypeError, ValueError):
            return False
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        return int(a) == int(b)
    return str(a) == str(b)
