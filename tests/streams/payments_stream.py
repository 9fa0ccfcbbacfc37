"""A payments stream written the way a Spark user writes one: ``build`` and table declarations only.

No ``split`` (rows are routed by the dict's keys), no ``expect`` (the proofs run ``build`` as a
bounded batch), no ``identity`` (the first plain table's key), no columns (they come from what
``build`` returns). Records: ``{"payment_id": str, "merchant": str, "amount": number, "ts": ISO time}``;
a per-merchant, per-window total is an aggregate over the registry's ``window``, in dollars (a double)
and in micro-dollars (a bigint: totals of billions, which a proof must compare exactly).

``PaymentsWithExpect`` is the same stream with an ``expect()``: the proofs then judge each record by
an independent pandas recomputation instead of running ``build``; its reports must be the same.
"""

from __future__ import annotations

from typing import Any

from rewind.api import LATE_CANDIDATE, Aggregate, Transform, output_table

RECORD = "payment_id STRING, merchant STRING, amount DOUBLE, ts STRING"


class PaymentsTransform(Transform):
    tables = (output_table("payments", key=("payment_id",)),
              output_table("merchant_totals", key=("window_start", "merchant"), on_conflict="replace"),
              output_table("dead_letter", key=("topic", "partition", "offset")))
    aggregates = (Aggregate("merchant_totals", keys=("merchant",)),)

    def build(self, source: Any, spec: Any) -> Any:
        from pyspark.sql import functions as F

        d = spec.durations()  # the registry's window and watermark delay
        p = F.from_json(F.col("value").cast("string"), RECORD)
        rows = source.select(p.alias("p"), "topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"))
        rows = rows.select("p.payment_id", "p.merchant", "p.amount", F.to_timestamp("p.ts").alias("event_time"),
                           "topic", "partition", "offset", "kafka_timestamp")
        ok = (F.col("payment_id").isNotNull() & F.col("merchant").isNotNull() & F.col("amount").isNotNull()
              & F.col("event_time").isNotNull())
        valid = rows.filter(ok).withWatermark("event_time", f"{int(d['watermark_delay'].total_seconds())} seconds")
        payments = (valid.dropDuplicatesWithinWatermark(["payment_id"]) if source.isStreaming
                    else valid.dropDuplicates(["payment_id"]))
        totals = (payments.groupBy(F.window("event_time", f"{int(d['window'].total_seconds())} seconds"), "merchant")
                  .agg(F.sum("amount").alias("total"), F.count("*").alias("payments"),
                       F.sum((F.col("amount") * 1_000_000).cast("long")).alias("total_micros"))
                  .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                          "merchant", "total", "payments", "total_micros"))
        dead = rows.filter(~ok).select("topic", "partition", "offset", "kafka_timestamp",
                                       F.lit("malformed").alias("reason"),
                                       F.lit(None).cast("timestamp").alias("watermark"))
        out = {"payments": payments, "merchant_totals": totals, "dead_letter": dead}
        if source.isStreaming:  # the rows the first stateful operator reads: late ones become dead letters
            out[LATE_CANDIDATE] = valid
        return out


class Undeclared(PaymentsTransform):
    """The same stream with its totals not declared an aggregate (how the old contract let one write it)."""

    aggregates = ()


class PaymentsWithExpect(PaymentsTransform):
    """The same stream with ``expect()``: each record recomputed in pandas, as ``build`` reads it."""

    def expect(self, records: Any, spec: Any) -> Any:
        import json

        import pandas as pd

        out = []
        for value in records["value"]:
            try:
                doc = json.loads(value)
                pid, merchant, amount = doc.get("payment_id"), doc.get("merchant"), doc.get("amount")
                at = pd.Timestamp(doc.get("ts"))
                ok = (isinstance(pid, str) and isinstance(merchant, str) and isinstance(amount, (int, float))
                      and not isinstance(amount, bool) and at.tzinfo is not None)
            except (ValueError, TypeError, AttributeError):
                ok = False
            out.append({"payment_id": pid, "merchant": merchant, "amount": float(amount), "event_time": at,
                        "reason": None} if ok else {"payment_id": None, "merchant": None, "amount": None,
                                                    "event_time": pd.NaT, "reason": "malformed"})
        frame = pd.DataFrame(out, columns=["payment_id", "merchant", "amount", "event_time", "reason"])
        frame["event_time"] = pd.to_datetime(frame["event_time"], utc=True)
        return frame
