"""The inventory stream's sink tables and how one output batch splits into them.

Why a ``latest`` table: a stock level is an entity's state, not an event. Records of one
(sku, warehouse) arrive out of order (keyless records spread over partitions, a replay of an
older range after newer batches), so the row must hold the highest version seen, whichever
batch commits last; the sink's ``on_conflict="latest"`` does that in one idempotent upsert.
"""

from __future__ import annotations

from rewind.api import Column, TableSpec

STOCK = TableSpec(
    name="stock",
    columns=(Column("sku", "string", False), Column("warehouse", "string", False),
             Column("quantity", "bigint", False), Column("version", "bigint", False),
             Column("updated_at", "timestamp", False), Column("product_name", "string"),
             Column("category", "string"), Column("stock_value", "double"),  # quantity * the catalog's unit_price
             Column("topic", "string", False), Column("partition", "int", False), Column("offset", "bigint", False),
             Column("kafka_timestamp", "timestamp"), Column("batch_id", "bigint")),
    key=("sku", "warehouse"), on_conflict="latest", version="version")
#: Same shape as every stream's dead letters: the Kafka coordinates are the key, the first verdict stays.
DEAD_LETTER = TableSpec(
    name="dead_letter",
    columns=(Column("topic", "string", False), Column("partition", "int", False), Column("offset", "bigint", False),
             Column("kafka_timestamp", "timestamp"), Column("reason", "string", False),
             Column("raw_value", "string"), Column("batch_id", "bigint"),
             Column("watermark", "timestamp")),  # always NULL here: the stream has no watermark
    key=("topic", "partition", "offset"), on_conflict="ignore")
TABLES = (STOCK, DEAD_LETTER)
#: Output row kind -> table, for the contract's default split.
KINDS = {"stock": STOCK.name, "dead": DEAD_LETTER.name}
