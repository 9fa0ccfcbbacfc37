"""The sink's column types without any service: decimal(P,S) parsing, the exact conversion of values
(quantized to the scale, refused rather than rounded), reading back, the Kafka JSON form, the Arrow
and SQL types, times at microseconds, and the per-column float tolerance a table declares.

The same values go through every real sink in tests/test_sink.py (SQLite, PostgreSQL),
tests/test_kafka_sink.py and tests/test_delta_sink.py (``harness.sink_data.MONEY``).
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from harness.sink_data import MONEY, money_rows
from sqlalchemy.dialects import postgresql, sqlite

from rewind.api.contract import TransformRefused
from rewind.api.tables import COLUMN_TYPES, Column, TableSpec, decimal_of
from rewind.sink.convert import exact_decimal, prepare_table, typed_frame
from rewind.sink.delta_tables import arrow_schema
from rewind.sink.dialects import spec_table
from rewind.sink.errors import SinkRefused
from rewind.sink.kafka_codec import decode_key, decode_value, encode_key, encode_table

UTC = dt.UTC


# --------------------------------------------------------------------------- the type
@pytest.mark.parametrize(("given", "stored", "exact"), [
    ("decimal(18,2)", "decimal(18,2)", (18, 2)), ("decimal(38,10)", "decimal(38,10)", (38, 10)),
    ("decimal(1,0)", "decimal(1,0)", (1, 0)), ("decimal(38,38)", "decimal(38,38)", (38, 38)),
    ("decimal(18, 2)", "decimal(18,2)", (18, 2)),  # Spark's DDL spacing: one canonical name kept
])
def test_decimal_types_parse_and_are_kept_canonical(given: str, stored: str, exact: tuple[int, int]) -> None:
    col = Column("fee", given)
    assert col.type == stored and decimal_of(col.type) == exact


@pytest.mark.parametrize("bad", ["decimal", "decimal(0,0)", "decimal(39,2)", "decimal(5,6)", "decimal(5)",
                                 "DECIMAL(5,2)", "numeric(5,2)", "decimal(-1,0)", "money"])
def test_bad_types_are_refused_naming_the_column_and_the_allowed_forms(bad: str) -> None:
    with pytest.raises(SinkRefused, match=r"column 'fee': unknown type .*'decimal\(P,S\)' with 1 <= P <= 38 "
                                          r"and 0 <= S <= P"):
        Column("fee", bad)


def test_decimal_of_is_none_for_every_other_type() -> None:
    assert all(decimal_of(t) is None for t in COLUMN_TYPES)
    assert decimal_of("decimal(39,0)") is None and decimal_of("decimal(3,4)") is None


# --------------------------------------------------------------------------- writing: exact or refused
@pytest.mark.parametrize(("value", "want"), [
    (Decimal("12.3"), "12.30"), ("12.30", "12.30"), (" -7 ", "-7.00"), (5, "5.00"), (np.int64(-3), "-3.00"),
    (0.1, "0.10"), (np.float64(2.5), "2.50"), (1e15, "1000000000000000.00"), (Decimal("1E+2"), "100.00"),
    (Decimal("-0.000"), "0.00"), ("9999999999999999.99", "9999999999999999.99"),
])
def test_values_become_decimals_at_the_scale(value: Any, want: str) -> None:
    got = exact_decimal(value, 18, 2)
    assert isinstance(got, Decimal) and str(got) == want and got.as_tuple().exponent == -2


@pytest.mark.parametrize(("value", "says"), [
    (Decimal("1.005"), "more than 2 digits after"), (0.1 + 0.2, "more than 2 digits after"),  # 0.30000000000000004
    ("10000000000000000", "more than 16 digits before"), (Decimal("-1E+16"), "more than 16 digits before"),
    (Decimal("1E+500"), "more than 16 digits before"), (Decimal("NaN"), "not a finite decimal"),
    (math.inf, "not a finite decimal"), ("12,30", "is not a decimal"), (True, "is not a decimal"),
    (b"12", "is not a decimal"),
])
def test_values_that_do_not_fit_are_refused_never_rounded(value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        exact_decimal(value, 18, 2)


def test_the_largest_decimal38_is_exact_beyond_pythons_28_digit_context() -> None:
    top = Decimal("9" * 28 + "." + "9" * 10)
    assert exact_decimal(top, 38, 10) == top and exact_decimal(top.copy_negate(), 38, 10) == top.copy_negate()
    assert exact_decimal(Decimal("0." + "0" * 37 + "1"), 38, 38) == Decimal("1E-38")
    with pytest.raises(ValueError, match="more than 28 digits before"):
        exact_decimal(Decimal("1" + "0" * 28), 38, 10)


def test_prepared_rows_name_table_column_and_value_and_sqlite_gets_canonical_text() -> None:
    rows = [{"id": 1, "fee": Decimal("1.5"), "amount": Decimal("1E-7")}, {"id": 2, "fee": float("nan")}]
    for_sqlite = prepare_table(MONEY, rows, sqlite_text=True)
    assert for_sqlite.columns["fee"] == ["1.50", None] and for_sqlite.columns["amount"] == ["0.0000001000", None]
    others = prepare_table(MONEY, rows, sqlite_text=False)
    assert others.columns["fee"] == [Decimal("1.50"), None] and isinstance(others.columns["amount"][0], Decimal)
    frame = pd.DataFrame({"id": [1, 2, 3], "fee": [1.25, None, 3.0], "amount": [Decimal("2"), None, "0.5"]})
    prepared = prepare_table(MONEY, frame, sqlite_text=False)  # a float64 column (NaN: null) and an object one
    assert prepared.columns["fee"] == [Decimal("1.25"), None, Decimal("3.00")]
    assert prepared.columns["amount"] == [Decimal("2.0000000000"), None, Decimal("0.5000000000")]
    with pytest.raises(SinkRefused, match=r"table 'money', column 'fee': Decimal\('0.001'\) does not fit "
                                          r"decimal\(18,2\)"):
        prepare_table(MONEY, [{"id": 1, "fee": Decimal("0.001")}], sqlite_text=True)


def test_a_collected_spark_decimal_column_arrives_as_decimals_not_floats() -> None:
    """Spark's toArrow() gives decimal(P,S) as Arrow decimal128(P,S) (checked on Spark 4.2);
    arrow_to_pandas keeps Decimal objects, and the sink takes them as they are."""
    from rewind.driver.batch_writer import arrow_to_pandas

    batch = pa.table({"id": pa.array([1, None], pa.int64()),
                      "fee": pa.array([Decimal("9999999999999999.99"), None], pa.decimal128(18, 2)),
                      "amount": pa.array([Decimal("-0.0000000001"), Decimal("1")], pa.decimal128(38, 10))})
    frame = arrow_to_pandas(batch)
    assert frame["fee"].dtype == object and frame["fee"].tolist() == [Decimal("9999999999999999.99"), None]
    assert frame["amount"].tolist() == [Decimal("-1E-10"), Decimal("1.0000000000")]
    prepared = prepare_table(MONEY, frame.fillna({"id": 2}), sqlite_text=False)
    assert prepared.columns["fee"] == [Decimal("9999999999999999.99"), None]


# --------------------------------------------------------------------------- reading back
def test_typed_frame_gives_decimals_at_the_scale_and_exact_ints() -> None:
    records = [(2**53 + 1, "12.3", Decimal("1"), "2024-05-01 10:00:00.000001"), (-(2**63), None, None, None)]
    types = {"id": "bigint", "fee": "decimal(18,2)", "amount": "decimal(38,10)", "at": "timestamp"}
    frame = typed_frame(records, ["id", "fee", "amount", "at"], types)
    assert frame["fee"].dtype == object and frame["fee"].tolist() == [Decimal("12.30"), None]
    assert str(frame["fee"][0]) == "12.30" and str(frame["amount"][0]) == "1.0000000000"
    assert frame["id"].tolist() == [2**53 + 1, -(2**63)]
    assert frame["at"][0] == pd.Timestamp("2024-05-01 10:00:00.000001", tz="UTC")
    assert typed_frame([], ["fee"], {"fee": "decimal(18,2)"})["fee"].dtype == object


# --------------------------------------------------------------------------- each sink's type
def test_sql_arrow_and_spark_types_of_a_decimal_column() -> None:
    table = spec_table(MONEY, sa.MetaData(), "")
    ddl = {d: str(sa.schema.CreateTable(table).compile(dialect=dialect))
           for d, dialect in {"sqlite": sqlite.dialect(), "postgresql": postgresql.dialect()}.items()}
    assert "fee TEXT" in ddl["sqlite"] and "amount TEXT" in ddl["sqlite"]  # never NUMERIC affinity: floats
    assert "fee NUMERIC(18, 2)" in ddl["postgresql"] and "amount NUMERIC(38, 10)" in ddl["postgresql"]
    assert "at TIMESTAMP WITH TIME ZONE" in ddl["postgresql"]
    schema = arrow_schema(MONEY)
    assert schema.field("fee").type == pa.decimal128(18, 2) and schema.field("amount").type == pa.decimal128(38, 10)
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")
    from rewind.driver.delta_writer import split_schema

    assert "`t0__fee` decimal(18,2)" in split_schema([MONEY])


# --------------------------------------------------------------------------- Kafka's JSON
def test_kafka_json_keeps_decimals_as_strings_and_bigints_as_integers() -> None:
    spec = TableSpec("k", (Column("id", "bigint", False), Column("fee", "decimal(38,10)", False),
                           Column("at", "timestamp")), key=("id", "fee"), on_conflict="ignore")
    ids = [2**53 + 1, 9_007_199_254_740_993 + 2, -(2**63), 2**63 - 1]
    rows = [{"id": i, "fee": Decimal("1E-7") if n == 0 else n, "at": dt.datetime(2024, 5, 1, 10, 0, 0, n, UTC)}
            for n, i in enumerate(ids)]
    records = list(encode_table(prepare_table(spec, rows, sqlite_text=False)))
    assert records[0] == (b'[9007199254740993,"0.0000001000"]',
                          b'{"id":9007199254740993,"fee":"0.0000001000","at":"2024-05-01T10:00:00Z"}')
    assert records[1][1] == b'{"id":9007199254740995,"fee":"1.0000000000","at":"2024-05-01T10:00:00.000001Z"}'
    for (key, value), row in zip(records, rows):
        back = decode_value(spec, value)
        assert back["id"] == row["id"] and isinstance(back["id"], int)
        assert back["fee"] == Decimal(row["fee"]) and isinstance(back["fee"], Decimal)
        assert back["at"] == row["at"]
        assert decode_key(spec, key) == {"id": row["id"], "fee": back["fee"]} and encode_key(spec, back) == key


# --------------------------------------------------------------------------- times: microseconds
def test_times_keep_microseconds_and_floor_nanoseconds_alike_for_every_sink() -> None:
    """SQLite gets text, the other sinks datetimes: both keep 1 us apart values and floor nanoseconds
    (towards the past, before 1970 too), so every sink holds the same instant."""
    spec = TableSpec("t", (Column("id", "int", False), Column("at", "timestamp")), ("id",), "ignore")
    given = pd.to_datetime(["2024-05-01 10:00:00.000001", "2024-05-01 10:00:00.000002",
                            "2024-05-01 10:00:00.000001999", "1969-12-31 23:59:59.999999500"], utc=True)
    frame = pd.DataFrame({"id": [1, 2, 3, 4], "at": given})
    text = prepare_table(spec, frame, sqlite_text=True).columns["at"]
    assert text == ["2024-05-01 10:00:00.000001", "2024-05-01 10:00:00.000002", "2024-05-01 10:00:00.000001",
                    "1969-12-31 23:59:59.999999"]
    aware = prepare_table(spec, frame, sqlite_text=False).columns["at"]
    assert [v.strftime("%Y-%m-%d %H:%M:%S.%f") for v in aware] == text
    assert all(v.tzinfo is not None and v.utcoffset() == dt.timedelta(0) for v in aware)


# --------------------------------------------------------------------------- tolerance
def _rates(**kwargs: Any) -> TableSpec:
    return TableSpec("rates", (Column("id", "string", False), Column("rate", "double"), Column("fx", "double"),
                               Column("n", "bigint"), Column("fee", "decimal(18,2)")), ("id",), "replace", **kwargs)


def test_tolerance_is_kept_sorted_and_hashable_and_read_per_column() -> None:
    spec = _rates(tolerance={"rate": 1e-6, "fx": 0})
    assert spec.tolerance == (("fx", 0.0), ("rate", 1e-6))
    assert spec.tolerance_of("rate") == 1e-6 and spec.tolerance_of("fx") == 0.0 and spec.tolerance_of("n") is None
    assert spec == _rates(tolerance=[("rate", 1e-6), ("fx", 0.0)])
    assert hash(spec) == hash(_rates(tolerance=spec.tolerance))
    assert _rates().tolerance == () and _rates().tolerance_of("rate") is None
    assert MONEY.tolerance_of("rate") == 1e-6 and MONEY.tolerance_of("fee") is None


@pytest.mark.parametrize(("tolerance", "says"), [
    ({"n": 1e-6}, r"table 'rates': tolerance on column 'n', a bigint column: only double columns.*remove it"),
    ({"fee": 1e-6}, r"column 'fee', a decimal\(18,2\) column: only double columns"),
    ({"rte": 1e-6}, r"table 'rates': tolerance names column 'rte', which it does not have.*fix the name"),
    ({"rate": -1e-6}, r"table 'rates': tolerance of column 'rate' is -1e-06; give a finite relative tolerance >= 0"),
    ({"rate": math.inf}, r"tolerance of column 'rate' is inf"), ({"rate": math.nan}, r"tolerance of column 'rate'"),
    ({"rate": True}, r"tolerance of column 'rate' is True"), ({"rate": "1e-6"}, r"tolerance of column 'rate'"),
    ("rate", r"tolerance must map column -> relative tolerance"),
])
def test_bad_tolerances_are_refused_naming_table_column_and_fix(tolerance: Any, says: str) -> None:
    with pytest.raises(SinkRefused, match=says):
        _rates(tolerance=tolerance)


def test_tolerance_on_a_key_column_is_refused() -> None:
    with pytest.raises(SinkRefused, match="key column 'k'"):
        TableSpec("t", (Column("k", "double", False),), ("k",), "ignore", tolerance={"k": 1e-9})


def test_tolerance_of_an_output_table_is_checked_and_kept_when_build_gives_its_columns() -> None:
    from rewind.driver.outputs import columns_from_schema, output_table

    declared = output_table("rates", key=("id",), tolerance={"rate": 1e-6, "n": 1e-3})  # columns unknown yet
    assert declared.tolerance_of("n") == 1e-3
    fields = [("id", "string"), ("rate", "double"), ("n", "long"), ("fee", "decimal(18,2)")]
    with pytest.raises(SinkRefused, match="tolerance on column 'n', a bigint column"):
        columns_from_schema(declared, fields, "stream s")
    ok = columns_from_schema(output_table("rates", key=("id",), tolerance={"rate": 1e-6}), fields, "stream s")
    assert ok.tolerance_of("rate") == 1e-6
    assert {c.name: c.type for c in ok.columns}["fee"] == "decimal(18,2)"  # exact, not a double


def test_spark_decimals_become_decimal_columns_with_their_precision() -> None:
    from rewind.driver.outputs import columns_from_schema, output_table, spark_type_name

    class Dec:  # pyspark's DecimalType(38, 10) as output_schemas sees it, without a Spark session
        def typeName(self) -> str:
            return "decimal"

        def simpleString(self) -> str:
            return "decimal(38,10)"

    assert spark_type_name(Dec()) == "decimal(38,10)"
    table = columns_from_schema(output_table("t", key=("id",)), [("id", "long"), ("v", "decimal(38,10)")], "s")
    assert [c.type for c in table.columns] == ["bigint", "decimal(38,10)", "bigint"]
    with pytest.raises(TransformRefused, match=r"column 'v' is a Spark decimal: name it with its precision"):
        columns_from_schema(output_table("t", key=("id",)), [("id", "long"), ("v", "decimal")], "s")


def test_the_shared_money_rows_prepare_on_every_path() -> None:
    for sqlite_text in (True, False):
        prepared = prepare_table(MONEY, money_rows(), sqlite_text=sqlite_text)
        assert prepared.submitted == len(money_rows())
