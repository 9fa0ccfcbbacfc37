"""The inventory stream's transform: parse in the JVM, route bad records, join the catalog.

Why this shape: the stream is stateless. Each Kafka record becomes one row, either a stock update
(kind ``stock``: the sink keeps the highest version per (sku, warehouse), ``on_conflict="latest"``)
or a dead letter (kind ``dead``, with a reason). There is no watermark and no stateful operator,
so nothing is dropped as late, a restarted batch gives the same rows, and a replay's bounded
batch read (``rewind.replay``) runs the very same plan.

The JSON is parsed by Spark's ``from_json`` (no Python UDF: no rows cross to a Python worker), with
a corrupt-record column so that any record Jackson cannot convert whole is ``malformed``, and the
catalog (``rewind.inventory.catalog``) is a static DataFrame broadcast to the join. ``expect``
recomputes the same verdicts in pandas with ``rewind.inventory.rules``, which states the rules
and mirrors the parser's corners; the proof holds the sink to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from rewind.api import Identity, Transform
from rewind.inventory import rules
from rewind.inventory.catalog import load_catalog
from rewind.inventory.tables import DEAD_LETTER, KINDS, STOCK, TABLES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import Column, DataFrame

    from rewind.api import TableSpec

#: The column ``from_json`` fills with the raw text of a record it could not convert whole.
CORRUPT = "_rewind_corrupt_record"
JSON_SCHEMA = ("sku STRING, warehouse STRING, quantity BIGINT, version BIGINT, updated_at STRING, "
               f"{CORRUPT} STRING")
#: Jackson's leniencies that Python's json module does not share are turned off (see rules).
JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "allowSingleQuotes": "false",
                "allowNonNumericNumbers": "false", "allowComments": "false", "allowUnquotedFieldNames": "false",
                "allowNumericLeadingZeros": "false", "allowBackslashEscapingAnyCharacter": "false",
                "allowUnquotedControlChars": "false"}
OUTPUT_COLUMNS = [
    ("kind", "string"), ("sku", "string"), ("warehouse", "string"), ("quantity", "bigint"), ("version", "bigint"),
    ("updated_at", "timestamp"), ("product_name", "string"), ("category", "string"), ("stock_value", "double"),
    ("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("kafka_timestamp", "timestamp"),
    ("reason", "string"), ("raw_value", "string"), ("watermark", "timestamp"),
    # No row here is a late candidate; ``event_time`` stays in the rows (the batch writer's late-record filter
    # once needed it to resolve, and no longer does: a transform without it runs, tests/test_smallest_stream.py).
    ("event_time", "timestamp"),
]
#: What ``expect`` returns (``RECORD_COLUMNS`` order is kept: one row per record).
EXPECT_COLUMNS = ("sku", "warehouse", "version", "reason", "event_time", "updated_at", "quantity",
                  "product_name", "category", "stock_value")


class InventoryTransform(Transform):
    """Stock levels per (sku, warehouse): latest version wins; malformed, unknown SKUs and negative
    quantities are dead letters."""

    @property
    def tables(self) -> Sequence[TableSpec]:
        return TABLES

    def build(self, source: DataFrame, spec: Any) -> DataFrame:
        return build(source)

    @property
    def kinds(self) -> dict[str, str]:
        return KINDS  # the contract's default split routes by these

    @property
    def identity(self) -> Identity:
        return Identity(table=STOCK.name, columns=("sku", "warehouse"), version="version")

    @property
    def dead_letter_table(self) -> str:
        return DEAD_LETTER.name

    def expect(self, records: pd.DataFrame, spec: Any) -> pd.DataFrame:
        return expect(records)


def _malformed(value: Column, doc: Column, updated_at: Column) -> Column:
    """True unless the record parsed whole with every field present and well-formed (rules' order)."""
    from pyspark.sql import functions as F

    whole = "^{}\\z"  # Java's \z is the very end of the text ($ also matches before a final newline)
    bad = (value.isNull() | ~F.is_valid_utf8(value) | doc.isNull() | doc[CORRUPT].isNotNull()
           | ~doc["warehouse"].rlike(whole.format(rules.WAREHOUSE_RE))
           | ~doc["updated_at"].rlike(whole.format(rules.UPDATED_AT_RE)) | updated_at.isNull())
    for name in rules.FIELDS:
        bad = bad | doc[name].isNull()
    return F.coalesce(bad, F.lit(True))  # a NULL anywhere in the test (a NULL field) is malformed too


def build(source: DataFrame) -> DataFrame:
    """Kafka rows in, one tagged output row per record out (see the module docstring)."""
    from pyspark.sql import functions as F

    catalog = source.sparkSession.createDataFrame(load_catalog()).withColumnRenamed("sku", "catalog_sku")
    value = F.col("value")
    text = F.when(F.is_valid_utf8(value), value.cast("string"))
    parsed = source.select("topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"), "value",
                           F.from_json(text, JSON_SCHEMA, JSON_OPTIONS).alias("doc"))
    doc = F.col("doc")
    updated_at = F.try_to_timestamp(doc["updated_at"], F.lit(rules.SPARK_TIME_FORMAT))
    parsed = parsed.select("*", _malformed(value, doc, updated_at).alias("malformed"),
                           doc["sku"].alias("sku"), doc["warehouse"].alias("warehouse"),
                           doc["quantity"].alias("quantity"), doc["version"].alias("version"),
                           updated_at.alias("updated_at"))
    joined = parsed.join(F.broadcast(catalog), F.col("sku") == F.col("catalog_sku"), "left")
    reason = (F.when(F.col("malformed"), F.lit(rules.MALFORMED))
              .when(F.col("catalog_sku").isNull(), F.lit(rules.UNKNOWN_SKU))
              .when(F.col("quantity") < 0, F.lit(rules.NEGATIVE_QUANTITY)))
    out = joined.select(
        F.when(reason.isNull(), F.lit("stock")).otherwise(F.lit("dead")).alias("kind"),
        "sku", "warehouse",
        # Never NULL: the batch writer collects with Arrow's to_pandas, which turns an integer column
        # holding a NULL into doubles (a quantity past 2**53 would lose digits). Dead letters do not
        # keep these columns, so their 0 goes nowhere.
        F.coalesce("quantity", F.lit(0)).alias("quantity"), F.coalesce("version", F.lit(0)).alias("version"),
        "updated_at", "product_name", "category",
        (F.col("quantity").cast("double") * F.col("unit_price")).alias("stock_value"),
        "topic", "partition", "offset", "kafka_timestamp", reason.alias("reason"),
        F.when(reason.isNotNull(), F.make_valid_utf8(value.cast("string"))).alias("raw_value"),
        F.lit(None).cast("timestamp").alias("watermark"), F.col("updated_at").alias("event_time"))
    return out.select(*[F.col(name).cast(typ).alias(name) for name, typ in OUTPUT_COLUMNS])


def expect(records: pd.DataFrame) -> pd.DataFrame:
    """``Transform.expect``: each record's verdict recomputed in pandas (``rules.judge``, the catalog)."""
    catalog = load_catalog().set_index("sku")
    skus = frozenset(catalog.index)
    verdicts = [rules.judge(v, skus) for v in records["value"]]
    valid = [v.reason is None for v in verdicts]

    def column(name: str) -> list[Any]:
        return [getattr(v, name) if ok else None for v, ok in zip(verdicts, valid)]

    sku = pd.Series(column("sku"), dtype=object)
    quantity = pd.Series(column("quantity"), dtype="Int64")
    stamps = pd.to_datetime(pd.Series(column("updated_at"), dtype=object), utc=True).astype("datetime64[us, UTC]")
    price = sku.map(catalog["unit_price"]).astype("float64")  # NaN for a dead letter (its sku is None)
    out = pd.DataFrame({
        "sku": sku,
        "warehouse": pd.Series(column("warehouse"), dtype=object),
        "version": pd.Series(column("version"), dtype="Int64"),
        "reason": pd.Series([v.reason for v in verdicts], dtype=object),
        "event_time": stamps,
        "updated_at": stamps,
        "quantity": quantity,
        "product_name": sku.map(catalog["product_name"]).astype(object),
        "category": sku.map(catalog["category"]).astype(object),
        # quantity as a double times the price, like Spark's bigint -> double cast and multiply
        "stock_value": quantity.astype("float64").to_numpy(na_value=float("nan")) * price.to_numpy(),
    })
    out["product_name"] = out["product_name"].where(out["product_name"].notna(), None)
    out["category"] = out["category"].where(out["category"].notna(), None)
    return out[list(EXPECT_COLUMNS)]
