"""A money ledger stream with every column type the proofs compare: the mutation matrix's stream.

Records (JSON): ``{"id": str, "account": str, "cents": int (up to ~2**53 + 10), "fee": "12.34"
(decimal text, two places), "rate": float, "tip": int or null, "ts": ISO time with microseconds
and +00:00, "note": str, "seq": int}``. A record that is not JSON, lacks a field or holds one of the
wrong shape is a dead letter ``malformed``; one with negative cents is a dead letter
``negative_cents``. Both transforms declare their tables with explicit columns
(``TableSpec``/``Column``), implement ``expect()`` (pandas: the proofs need no Spark) and declare
the aggregate's ``measures``:

- ``PaymentsLedger``: an insert-once table ``payments`` keyed by ``id`` (with the Kafka
  coordinates), the aggregate ``account_totals`` (``replace``: per account per window the count,
  the sum of cents as a bigint, the sum of fees as ``decimal(38,10)``, the sum of rates as a
  double) and ``dead_letter`` (with ``watermark``).
- ``BalancesLedger``: a ``latest`` table ``balances`` keyed by ``account`` with version ``seq``
  (the newest record of each account), the same aggregate and dead letters.

``build`` (Spark) and ``expect`` (pandas) agree record by record: the same validity rules (one
regular expression per shaped field, matched against the whole text on both sides), exact
integers and decimals, times at microseconds.
"""

from __future__ import annotations

import decimal
import json
import re
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from rewind.api import LATE_CANDIDATE, Aggregate, Column, Identity, TableSpec, Transform

RECORD = ("id STRING, account STRING, cents BIGINT, fee STRING, rate DOUBLE, tip BIGINT, ts STRING, note STRING, "
          "seq BIGINT")
FEE_RE = r"-?[0-9]{1,16}\.[0-9]{2}"
TS_RE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}\+00:00"
REQUIRED = ("id", "account", "cents", "fee", "rate", "ts", "note", "seq")
MALFORMED, NEGATIVE = "malformed", "negative_cents"
RATE_TOLERANCE = 1e-6
COORDS = (Column("topic", "string", False), Column("partition", "int", False), Column("offset", "bigint", False),
          Column("kafka_timestamp", "timestamp"))
#: What every row of a record carries (payments, balances).
VALUES = (Column("cents", "bigint", False), Column("fee", "decimal(18,2)", False), Column("rate", "double", False),
          Column("tip", "bigint"), Column("event_time", "timestamp", False), Column("note", "string", False))

PAYMENTS = TableSpec("payments", (Column("id", "string", False), Column("account", "string", False), *VALUES,
                                  Column("seq", "bigint", False), *COORDS, Column("batch_id", "bigint")),
                     key=("id",), on_conflict="ignore", tolerance={"rate": RATE_TOLERANCE})
BALANCES = TableSpec("balances", (Column("account", "string", False), Column("seq", "bigint", False),
                                  Column("id", "string", False), *VALUES, *COORDS, Column("batch_id", "bigint")),
                     key=("account",), on_conflict="latest", version="seq", tolerance={"rate": RATE_TOLERANCE})
TOTALS = TableSpec("account_totals", (Column("window_start", "timestamp", False), Column("window_end", "timestamp"),
                                      Column("account", "string", False), Column("payments", "bigint"),
                                      Column("cents_total", "bigint"), Column("fee_total", "decimal(38,10)"),
                                      Column("rate_sum", "double"), Column("batch_id", "bigint")),
                   key=("window_start", "account"), on_conflict="replace")
DEAD_LETTER = TableSpec("dead_letter", (*COORDS[:3], COORDS[3], Column("reason", "string", False),
                                        Column("raw_value", "string"), Column("watermark", "timestamp"),
                                        Column("batch_id", "bigint")),
                        key=("topic", "partition", "offset"), on_conflict="ignore")
TOTALS_AGGREGATE = Aggregate("account_totals", keys=("account",),
                             measures={"payments": "count", "cents_total": "sum(cents)", "fee_total": "sum(fee)",
                                       "rate_sum": "sum(rate)"})


def ledger_record(i: int, base: datetime, accounts: int = 5) -> dict[str, Any]:
    """The ``i``-th valid record: account ``a{i % accounts}``; cents by account at the magnitudes the
    matrix damages (a0: 1 or 0, so some groups total 1 and some 0; a1: 10**6..; a2: 10**12..; a3:
    2**53 + 1.., past what a double holds exactly; a4: small); ``tip`` null, 0 or ``i`` by turns;
    event time ``base + 5 s * i`` plus a fraction of a second, at microseconds."""
    account = i % accounts
    step = (i // accounts) % 7
    cents = [int(step in (0, 5)), 10**6 + step, 10**12 + step, 2**53 + 1 + step, (i * 37) % 1000][account % 5]
    return {"id": f"p-{i:05d}", "account": f"a{account}", "cents": cents, "fee": f"{(i * 13) % 5000 / 100:.2f}",
            "rate": round(0.5 + (i * 7919) % 1000 / 997.0, 12), "tip": [None, 0, i][i % 3],
            "ts": (base + timedelta(seconds=5 * i, microseconds=(i * 104729) % 1000000)).isoformat(
                timespec="microseconds"), "note": f"payment {i} for a{account}", "seq": i}


# --------------------------------------------------------------------------- pandas: the proofs' side
def judge(value: bytes | None) -> tuple[str | None, dict[str, Any]]:
    """One record's (reason, fields): reason None for a valid one (the rules of the module docstring)."""
    try:
        doc = json.loads(value.decode("utf-8")) if value is not None else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return MALFORMED, {}
    if not isinstance(doc, dict) or any(doc.get(k) is None for k in REQUIRED):
        return MALFORMED, {}
    ints = [doc["cents"], doc["seq"], *([doc["tip"]] if doc.get("tip") is not None else [])]
    strings = [doc["id"], doc["account"], doc["fee"], doc["ts"], doc["note"]]
    if any(isinstance(v, bool) or not isinstance(v, int) for v in ints) or \
            any(not isinstance(v, str) for v in strings) or isinstance(doc["rate"], bool) or \
            not isinstance(doc["rate"], (int, float)) or \
            not re.fullmatch(FEE_RE, doc["fee"]) or not re.fullmatch(TS_RE, doc["ts"]):
        return MALFORMED, {}
    fields = {"id": doc["id"], "account": doc["account"], "cents": doc["cents"], "fee": decimal.Decimal(doc["fee"]),
              "rate": float(doc["rate"]), "tip": doc.get("tip"), "event_time": pd.Timestamp(doc["ts"]),
              "note": doc["note"], "seq": doc["seq"]}
    return (NEGATIVE if doc["cents"] < 0 else None), fields


def expect_frame(records: pd.DataFrame) -> pd.DataFrame:
    """``Transform.expect``: each record's reason and the values its row must hold (None for a dead letter)."""
    judged = [judge(v) for v in records["value"]]
    valid = [reason is None for reason, _ in judged]

    def column(name: str) -> list[Any]:
        return [fields.get(name) if ok else None for (_, fields), ok in zip(judged, valid)]

    return pd.DataFrame({
        "id": pd.Series(column("id"), dtype=object), "account": pd.Series(column("account"), dtype=object),
        "seq": pd.Series(column("seq"), dtype="Int64"), "reason": pd.Series([r for r, _ in judged], dtype=object),
        "event_time": pd.to_datetime(pd.Series(column("event_time"), dtype=object), utc=True),
        "cents": pd.Series(column("cents"), dtype="Int64"), "fee": pd.Series(column("fee"), dtype=object),
        "rate": pd.Series(column("rate"), dtype="float64"), "tip": pd.Series(column("tip"), dtype="Int64"),
        "note": pd.Series(column("note"), dtype=object)})


# --------------------------------------------------------------------------- Spark: the stream
def parsed(source: Any) -> tuple[Any, Any]:
    """(valid rows with ``event_time`` and the coordinates, dead letters) of the Kafka rows."""
    from pyspark.sql import functions as F

    p = F.from_json(F.col("value").cast("string"), RECORD)
    rows = source.select(p.alias("p"), "topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"),
                         F.col("value").cast("string").alias("raw_value"))
    whole = "^{}\\z"
    ok = F.lit(True)
    for name in REQUIRED:
        ok = ok & F.col(f"p.{name}").isNotNull()
    ok = F.coalesce(ok & F.col("p.fee").rlike(whole.format(FEE_RE)) & F.col("p.ts").rlike(whole.format(TS_RE)),
                    F.lit(False))
    reason = F.when(~ok, F.lit(MALFORMED)).when(F.col("p.cents") < 0, F.lit(NEGATIVE))
    rows = rows.withColumn("reason", reason)
    valid = rows.filter(F.col("reason").isNull()).select(
        "p.id", "p.account", "p.cents", F.col("p.fee").cast("decimal(18,2)").alias("fee"), "p.rate", "p.tip",
        F.to_timestamp("p.ts").alias("event_time"), "p.note", "p.seq", "topic", "partition", "offset",
        "kafka_timestamp")
    dead = rows.filter(F.col("reason").isNotNull()).select(
        "topic", "partition", "offset", "kafka_timestamp", "reason", "raw_value",
        F.lit(None).cast("timestamp").alias("watermark"))
    return valid, dead


def totals_of(rows: Any, spec: Any) -> Any:
    from pyspark.sql import functions as F

    seconds = int(spec.durations()["window"].total_seconds())
    return (rows.groupBy(F.window("event_time", f"{seconds} seconds"), "account")
            .agg(F.count("*").alias("payments"), F.sum("cents").alias("cents_total"),
                 F.sum("fee").cast("decimal(38,10)").alias("fee_total"), F.sum("rate").alias("rate_sum"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "account",
                    "payments", "cents_total", "fee_total", "rate_sum"))


def outputs(source: Any, spec: Any, identity_table: str) -> dict[str, Any]:
    """What both transforms' ``build`` returns: the identity table's rows (one per distinct id), totals,
    dead letters, and (streaming) the late candidates."""
    valid, dead = parsed(source)
    delay = int(spec.durations()["watermark_delay"].total_seconds())
    valid = valid.withWatermark("event_time", f"{delay} seconds")
    distinct = valid.dropDuplicatesWithinWatermark(["id"]) if source.isStreaming else valid.dropDuplicates(["id"])
    out = {identity_table: distinct, "account_totals": totals_of(distinct, spec), "dead_letter": dead}
    if source.isStreaming:
        out[LATE_CANDIDATE] = valid
    return out


class PaymentsLedger(Transform):
    """Insert-once payments keyed by id, per-account window totals, dead letters."""

    tables = (PAYMENTS, TOTALS, DEAD_LETTER)
    aggregates = (TOTALS_AGGREGATE,)

    def build(self, source: Any, spec: Any) -> Any:
        return outputs(source, spec, "payments")

    def expect(self, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
        return expect_frame(records)


class BalancesLedger(Transform):
    """Each account's newest record (``latest`` by ``seq``), the same totals and dead letters."""

    tables = (BALANCES, TOTALS, DEAD_LETTER)
    aggregates = (TOTALS_AGGREGATE,)
    identity = Identity("balances", ("account",), version="seq")

    def build(self, source: Any, spec: Any) -> Any:
        return outputs(source, spec, "balances")

    def expect(self, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
        return expect_frame(records)
