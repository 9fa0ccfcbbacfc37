"""Which sink a stream writes to: Kafka topics for ``kafka://``, Delta tables for ``delta://``, SQL otherwise."""

from __future__ import annotations

from typing import Any

from rewind.api.contract import load_transform
from rewind.driver.outputs import resolved_tables
from rewind.registry import StreamSpec
from rewind.sink.delta import DeltaSink
from rewind.sink.delta_target import is_delta_url, parse_delta_sink
from rewind.sink.kafka import TransactionalKafkaSink
from rewind.sink.kafka_target import is_kafka_url, parse_kafka_sink
from rewind.sink.sql import ExactlyOnceSqlSink

__all__ = ["open_sink"]


def open_sink(spec: StreamSpec, transform: Any = None, spark: Any = None) -> Any:
    """The stream's sink, with the tables its transform declares (``rewind.api.contract``; columns
    left to the output are resolved from ``build``'s schema, ``rewind.driver.outputs``): Kafka
    topics for a ``kafka://`` URL, Delta tables for ``delta://``, SQL tables otherwise."""

    transform = transform or load_transform(spec)
    tables = resolved_tables(transform, spec, spark)
    if is_delta_url(spec.sink.url):

        return DeltaSink(parse_delta_sink(spec.sink.url, spec.sink.options), spec.name, tables,
                         table_prefix=spec.sink.table_prefix)
    if is_kafka_url(spec.sink.url):

        return TransactionalKafkaSink(parse_kafka_sink(spec.sink.url, spec.sink.options), spec.name,
                                      tables, table_prefix=spec.sink.table_prefix,
                                      dead_letter_table=transform.dead_letter_table)

    return ExactlyOnceSqlSink(spec.sink.url, spec.name, tables, table_prefix=spec.sink.table_prefix)
