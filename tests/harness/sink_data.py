"""The sink tests' tables and rows: events (insert-once), dead letters, window totals (replace), stock (latest),
money (exact values: decimals, bigints past 2**53, times at microseconds).

One definition for every sink's tests (SQL, Kafka, Delta, staging and the commit-point suite), so a
behaviour proven on one sink is proven on the same data on the others.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pandas as pd

from rewind.api.tables import LEDGER_TABLE, Column, TableSpec

UTC = dt.UTC
T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=UTC)

EVENTS = TableSpec(
    "events",
    (Column("topic", "string", nullable=False), Column("partition", "int", nullable=False),
     Column("offset", "bigint", nullable=False), Column("key", "binary"), Column("value", "binary"),
     Column("timestamp", "timestamp"), Column("amount", "double"), Column("batch_id", "bigint")),
    key=("topic", "partition", "offset"), on_conflict="ignore")
DEAD_LETTER = TableSpec(
    "dead_letter",
    (Column("topic", "string", nullable=False), Column("partition", "int", nullable=False),
     Column("offset", "bigint", nullable=False), Column("error", "string"), Column("raw", "binary")),
    key=("topic", "partition", "offset"), on_conflict="ignore")
WINDOWS = TableSpec(
    "window_results",
    (Column("window_start", "timestamp", nullable=False), Column("window_end", "timestamp"),
     Column("user", "string", nullable=False), Column("count", "bigint"), Column("total", "double")),
    key=("window_start", "user"), on_conflict="replace")
TABLES = (EVENTS, DEAD_LETTER, WINDOWS)
STATE = TableSpec("stock", (Column("sku", "string", False), Column("qty", "bigint"),
                            Column("version", "bigint", False), Column("batch_id", "bigint")),
                  key=("sku",), on_conflict="latest", version="version")


#: Values every sink must store exactly: decimals at their scale, bigints past 2**53, times at microseconds.
MONEY = TableSpec("money", (Column("id", "bigint", False), Column("fee", "decimal(18,2)"),
                            Column("amount", "decimal(38,10)"), Column("at", "timestamp"), Column("rate", "double")),
                  key=("id",), on_conflict="ignore", tolerance={"rate": 1e-6})
FEE_MAX = Decimal("9999999999999999.99")  # decimal(18,2): 16 digits before the point, 2 after
AMOUNT_MAX = Decimal("9" * 28 + "." + "9" * 10)  # decimal(38,10); copy_negate(): unary minus rounds to 28 digits
#: the rows written (as given) -> what every sink must read back: (fee, amount, at)
MONEY_CASES: list[tuple[dict[str, Any], tuple[Decimal | None, Decimal | None, pd.Timestamp | None]]] = [
    ({"id": 2**53 + 1, "fee": FEE_MAX, "amount": AMOUNT_MAX, "at": T0 + dt.timedelta(microseconds=1), "rate": 0.1},
     (FEE_MAX, AMOUNT_MAX, pd.Timestamp("2024-05-01 10:00:00.000001", tz="UTC"))),
    ({"id": -(2**63), "fee": -FEE_MAX, "amount": AMOUNT_MAX.copy_negate(), "at": T0 + dt.timedelta(microseconds=2)},
     (-FEE_MAX, AMOUNT_MAX.copy_negate(), pd.Timestamp("2024-05-01 10:00:00.000002", tz="UTC"))),
    ({"id": 2**63 - 1, "fee": "0", "amount": Decimal("-0.0"), "at": T0},
     (Decimal("0.00"), Decimal("0E-10"), pd.Timestamp(T0))),
    # trailing zeros kept at the scale; a float by its shortest repr; an int; nanoseconds floored
    ({"id": 9_007_199_254_740_993 + 1, "fee": "12.30", "amount": 0.1, "rate": 2.5,
      "at": pd.Timestamp("2024-05-01 10:00:00.000001999", tz="UTC")},
     (Decimal("12.30"), Decimal("0.1000000000"), pd.Timestamp("2024-05-01 10:00:00.000001", tz="UTC"))),
    ({"id": 7, "fee": 5, "amount": Decimal("1E-10"), "at": None}, (Decimal("5.00"), Decimal("0.0000000001"), None)),
    ({"id": 8, "fee": None, "amount": None}, (None, None, None)),
]


def money_rows() -> list[dict[str, Any]]:
    return [dict(row) for row, _ in MONEY_CASES]


def check_money(frame: pd.DataFrame) -> None:
    """``frame`` (a sink's ``read_table("money")``) holds ``money_rows()`` exactly: ids as Python ints,
    decimals as ``Decimal`` at the column's scale (None for null), times at the microsecond."""
    assert str(frame["id"].dtype) == "Int64" and str(frame["at"].dtype) == "datetime64[ns, UTC]"
    assert frame["fee"].dtype == object and frame["amount"].dtype == object
    got = {int(r["id"]): r for r in frame.to_dict("records")}
    assert sorted(got) == sorted(row["id"] for row, _ in MONEY_CASES), "every bigint key read back exactly"
    for row, (fee, amount, at) in MONEY_CASES:
        have = got[row["id"]]
        for column, want, scale in (("fee", fee, 2), ("amount", amount, 10)):
            value = have[column]
            if want is None:
                assert value is None, (row["id"], column, value)
            else:
                assert isinstance(value, Decimal) and value == want, (row["id"], column, value, want)
                assert value.as_tuple().exponent == -scale, (row["id"], column, value)  # "12.30", not "12.3"
        assert (pd.isna(have["at"]) if at is None else have["at"] == at), (row["id"], have["at"], at)


def events(start: int, n: int, *, batch_id: int = 0, value: bytes = b"v", partitions: int = 3) -> list[dict[str, Any]]:
    return [
        {"topic": "orders", "partition": i % partitions, "offset": i, "key": f"k{i}".encode(), "value": value,
         "timestamp": T0 + dt.timedelta(seconds=i), "amount": i * 0.5, "batch_id": batch_id}
        for i in range(start, start + n)
    ]


def dead_letters(start: int, n: int) -> list[dict[str, Any]]:
    return [{"topic": "orders", "partition": 0, "offset": i, "error": "bad json", "raw": b"{"}
            for i in range(start, start + n)]


def windows(users: list[str], count: int) -> pd.DataFrame:
    return pd.DataFrame({
        "window_start": pd.Timestamp(T0), "window_end": pd.Timestamp(T0 + dt.timedelta(minutes=1)),
        "user": users, "count": count, "total": float(count) * 1.5,
    })


def counts(sink: Any) -> dict[str, int]:
    """Rows per table of a sink, the ledger's (all streams) included."""
    return {name: len(sink.read_table(name)) for name in [*sink.specs, LEDGER_TABLE]}
