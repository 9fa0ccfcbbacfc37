"""The one rule every proof compares values by (``rewind.proof.values``), on every damage it claims to catch.

Pure: no Kafka, no Spark. Each case holds a sink value and its recomputation in the dtypes the
proofs really meet (a sink reads ``Int64``, ``datetime64[ns, UTC]``, ``Decimal`` objects; ``expect()``
and Arrow give ``int64``, ``float64``, ``datetime64[us, UTC]``, naive times, Python objects), damages the
sink by one unit of its type and requires the comparison to fail, and requires the undamaged value
to pass. The old rule (everything numeric through float64 within 1e-6) passed 30,190,708 against
30,190,709; every ``+1`` case below fails on it.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from rewind.api.tables import Column, TableSpec
from rewind.proof.values import (
    ANY,
    DEFAULT_FLOAT_TOLERANCE,
    ValueRule,
    equal_values,
    key_text,
    rule_of,
    rules_for,
    same_value,
    text_key,
)

INT = rule_of("bigint")
MAGNITUDES = [1, 10 ** 6, 30_190_708, 10 ** 12, 2 ** 53 + 1, 2 ** 63 - 2, -(2 ** 63)]


def both_ways(sink: pd.Series, recomputed: pd.Series, rule: ValueRule) -> list[bool]:
    """The vectorised and the per-value answers (they must agree)."""
    fast = equal_values(sink, recomputed, rule).tolist()
    slow = [same_value(a, b, rule) for a, b in zip(sink.tolist(), recomputed.tolist())]
    assert fast == slow, (fast, slow)
    return fast


@pytest.mark.parametrize("n", MAGNITUDES, ids=lambda n: f"{n:_}")
@pytest.mark.parametrize("recomputed_dtype", ["int64", "Int64", "object"])
def test_an_integer_off_by_one_fails_at_every_magnitude(n: int, recomputed_dtype: str) -> None:
    sink = pd.Series([n, n], dtype="Int64")
    damaged = pd.Series([n, n + 1 if n < 2 ** 63 - 1 else n - 1], dtype="Int64")
    recomputed = pd.Series([n, n], dtype=recomputed_dtype)
    assert both_ways(sink, recomputed, INT) == [True, True]
    assert both_ways(damaged, recomputed, INT) == [True, False]
    assert both_ways(damaged, recomputed, ANY) == [True, False]  # no declared type: still exact


def test_a_float_recomputation_of_an_integer_counts_only_where_a_float_can_say_which() -> None:
    assert same_value(30_190_708, 30_190_708.0, INT)
    assert not same_value(30_190_709, 30_190_708.0, INT)
    # above 2**53 a float stands for several integers: it proves none of them
    assert not same_value(2 ** 53 + 1, float(2 ** 53 + 1), INT)
    assert not same_value(2 ** 53 + 1, 2 ** 53 + 1.5, INT)
    sink = pd.Series([10 ** 12 + 1, 7], dtype="Int64")
    assert both_ways(sink, pd.Series([1e12, 7.0]), INT) == [False, True]


def test_a_decimals_last_digit_and_its_scale() -> None:
    rule = rule_of("decimal(18,2)")
    assert rule.kind == "decimal" and rule.scale == 2
    sink = pd.Series([Decimal("301907.08"), Decimal("0.10"), Decimal("-5.00"), None], dtype=object)
    recomputed = pd.Series([Decimal("301907.08"), Decimal("0.1"), -5, None], dtype=object)
    assert both_ways(sink, recomputed, rule) == [True, True, True, True]
    damaged = sink.copy()
    damaged[0] = Decimal("301907.09")
    assert both_ways(damaged, recomputed, rule) == [False, True, True, True]
    wide = rule_of("decimal(38,10)")
    big = Decimal("1234567890123456789012345678.0123456789")
    assert same_value(big, big, wide) and not same_value(big + Decimal("1e-10"), big, wide)
    # a float recomputation is taken at the column's scale (what the sink stores), not as a float
    assert same_value(Decimal("0.30"), 0.1 + 0.2, rule)
    assert not same_value(Decimal("0.31"), 0.1 + 0.2, rule)


def test_a_float_beyond_its_tolerance_fails_and_within_it_passes() -> None:
    rule = rule_of("double")
    assert rule.tolerance == DEFAULT_FLOAT_TOLERANCE == 1e-9
    x = 1234.5678
    sink = pd.Series([x, x * (1 + 1e-12), x * (1 + 1e-8), 0.0, np.inf])
    recomputed = pd.Series([x, x, x, 1e-12, np.inf])
    assert both_ways(sink, recomputed, rule) == [True, True, False, True, True]
    loose = rule_of("double", 1e-6)  # what TableSpec(tolerance={"rate": 1e-6}) declares
    assert both_ways(sink, recomputed, loose) == [True, True, True, True, True]
    assert not same_value(x * (1 + 1e-5), x, loose)


def test_the_declared_tolerance_reaches_the_rule_and_only_doubles_have_one() -> None:
    table = TableSpec("t", (Column("id", "string", nullable=False), Column("n", "bigint"), Column("rate", "double"),
                            Column("at", "timestamp"), Column("fee", "decimal(18,2)"), Column("raw", "binary")),
                      key=("id",), on_conflict="ignore", tolerance={"rate": 1e-6})
    rules = rules_for(table)
    assert rules["rate"] == ValueRule("float", tolerance=1e-6)
    assert rules["n"].kind == "int" and rules["at"].kind == "time" and rules["id"].kind == "text"
    assert rules["fee"] == ValueRule("decimal", scale=2) and rules["raw"].kind == "bytes"


@pytest.mark.parametrize("unit", ["ns", "us"])
def test_a_time_one_microsecond_off_fails_whatever_unit_and_zone_each_side_holds(unit: str) -> None:
    rule = rule_of("timestamp")
    t = pd.Timestamp("2026-11-28T14:42:22.005001Z")
    sink = pd.Series([t, t + pd.Timedelta("1us"), pd.NaT], dtype="datetime64[ns, UTC]")
    recomputed = pd.Series([t, t, pd.NaT], dtype=f"datetime64[{unit}, UTC]")
    assert both_ways(sink, recomputed, rule) == [True, False, True]
    naive = pd.Series([t.tz_localize(None).to_pydatetime(), t.tz_localize(None).to_pydatetime(), None], dtype=object)
    assert both_ways(sink, naive, rule) == [True, False, True]  # a naive time is UTC
    # nanoseconds below the sinks' precision are not a difference (every sink stores microseconds)
    assert same_value(t + pd.Timedelta("999ns"), t, rule)


def test_null_equals_only_null() -> None:
    for rule in (INT, rule_of("double"), rule_of("decimal(10,2)"), rule_of("string"), ANY):
        assert same_value(None, None, rule) and same_value(np.nan, None, rule)
        assert not same_value(None, 0, rule) and not same_value(0, None, rule)
    assert both_ways(pd.Series([0, None], dtype="Int64"), pd.Series([None, 0], dtype="Int64"), INT) == [False, False]
    assert not same_value("", None, rule_of("string"))


def test_text_and_bytes_exactly() -> None:
    text = rule_of("string")
    sink = pd.Series(["m-17", "m-17 ", "M-17", "é"], dtype=object)
    recomputed = pd.Series(["m-17", "m-17", "m-17", "é"], dtype=object)
    assert both_ways(sink, recomputed, text) == [True, False, False, True]
    raw = rule_of("binary")
    assert same_value(b"\x00\x01", bytearray(b"\x00\x01"), raw) and not same_value(b"\x00\x01", b"\x00\x02", raw)


def test_keys_as_text_keep_what_tells_them_apart() -> None:
    rules = {"n": INT, "fee": rule_of("decimal(18,2)"), "at": rule_of("timestamp"), "s": rule_of("string")}
    a = pd.DataFrame({"n": pd.Series([2 ** 53 + 1], dtype="Int64"), "fee": [Decimal("1.10")],
                      "at": pd.to_datetime(["2026-01-01T00:00:00.000001Z"], utc=True), "s": ["x "]})
    b = pd.DataFrame({"n": [2 ** 53 + 1], "fee": [Decimal("1.1")],
                      "at": [pd.Timestamp("2026-01-01T00:00:00.000001")], "s": ["x "]})
    assert text_key(a, list(rules), rules).tolist() == text_key(b, list(rules), rules).tolist()
    assert key_text(2 ** 53 + 1, INT) != key_text(2 ** 53, INT)
    assert key_text("x ", rules["s"]) != key_text("x", rules["s"])
    assert key_text(None, INT) is None
    # a key column read with a null becomes float: its integers still name themselves
    assert key_text(5.0) == key_text(5) == "5"


def test_a_literal_from_expect_names_its_number_exactly_and_other_kinds_never_match() -> None:
    assert same_value(7, "7", INT)  # an integer literal from expect() names the integer
    assert not same_value(7, "7.0", INT) and not same_value(7, " 7", INT) and not same_value(7, b"7", INT)
    assert same_value(7.0, "7", rule_of("double")) and not same_value(7.0, "7 ", rule_of("double"))
    assert not same_value(b"7", "7", rule_of("string")) and not same_value("7", 7.5, rule_of("decimal(9,1)"))
