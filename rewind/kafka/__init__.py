"""Rewind's Kafka source for PySpark (``format("rewind_kafka")``) and its offset look-ups.

- ``rewind.kafka.source.KafkaDataSource``: the Python Data Source (batch and streaming);
- ``rewind.kafka.client``: ``true_end_offsets``, ``earliest_offsets``, ``KafkaOffsetClient``;
- ``rewind.kafka.offsets``: the pure decisions (option parsing, rate limits, data loss).

Submodules are imported lazily so that importing ``rewind.kafka.offsets`` needs neither
PySpark nor confluent-kafka.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KafkaDataSource", "true_end_offsets", "earliest_offsets"]


def __getattr__(name: str) -> Any:
    if name == "KafkaDataSource":
        from rewind.kafka.source import KafkaDataSource

        return KafkaDataSource
    if name in ("true_end_offsets", "earliest_offsets"):
        from rewind.kafka import client

        return getattr(client, name)
    raise AttributeError(name)
