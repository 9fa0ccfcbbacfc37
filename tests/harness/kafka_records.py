"""Producing test records on the real broker and keeping what the delivery reports said: the
shared helpers of ``test_source_conformance.py`` and ``test_kafka_client.py``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

Coord = tuple[str, int, int]                         # (topic, partition, offset)
Record = tuple[bytes | None, bytes | None]           # (key, value)
Delivered = dict[Coord, Record]


class DeliveryLog:
    """What the producer's delivery reports said: coordinates, key and value of every record."""

    def __init__(self) -> None:
        self.records: Delivered = {}
        self.errors: list[Any] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.records[(msg.topic(), msg.partition(), msg.offset())] = (msg.key(), msg.value())


def produce(bootstrap: str, topic: str, n: int, partitions: int | Callable[[int], int] | None, *,
            start: int = 0, keyed: bool = True, timestamp: Callable[[int], int] | None = None,
            idempotent: bool = False, flush_every: int = 500, pause: float = 0.0) -> Delivered:
    """``n`` records ``v{i}`` (key ``k{i}`` unless keyless). ``partitions``: a count (round robin),
    a function of ``i``, or None for the client's default partitioner; ``timestamp``: CreateTime
    of record ``i`` in ms (else the producer's clock); ``pause``: seconds to wait after each flush
    (the sticky partitioner moves on to another partition after ``sticky.partitioning.linger.ms``)."""
    log = DeliveryLog()
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if idempotent:
        conf["enable.idempotence"] = True
    producer = Producer(conf)
    for i in range(start, start + n):
        kwargs: dict[str, Any] = {"value": f"v{i}".encode(), "on_delivery": log}
        if keyed:
            kwargs["key"] = f"k{i}".encode()
        if isinstance(partitions, int):
            kwargs["partition"] = i % partitions
        elif partitions is not None:
            kwargs["partition"] = partitions(i)
        if timestamp is not None:
            kwargs["timestamp"] = timestamp(i)
        producer.produce(topic, **kwargs)
        if (i - start + 1) % flush_every == 0:
            producer.flush(30)
            time.sleep(pause)
    assert producer.flush(30) == 0
    assert not log.errors and len(log.records) == n, log.errors
    return log.records


@dataclass
class Transactions:
    committed: Delivered = field(default_factory=dict)
    aborted: Delivered = field(default_factory=dict)


def produce_transactions(bootstrap: str, topic: str, partitions: int, plan: Iterable[tuple[bool, int]],
                         tx: Transactions | None = None, producer: Producer | None = None) -> Transactions:
    """One transaction per ``(commit, per_partition)`` of ``plan``, each writing ``per_partition``
    records to every partition and ending in a commit or an abort (both leave a marker, so data
    offsets have gaps; an aborted transaction's records stay in the log)."""
    tx = tx or Transactions()
    producer = producer or transactional_producer(bootstrap, topic)
    for n, (commit, per_partition) in enumerate(plan):
        log = DeliveryLog()
        producer.begin_transaction()
        for p in range(partitions):
            for i in range(per_partition):
                producer.produce(topic, key=f"t{n}-{p}-{i}".encode(), value=f"{'c' if commit else 'a'}{n}".encode(),
                                 partition=p, on_delivery=log)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
        assert not log.errors and len(log.records) == partitions * per_partition
        (tx.committed if commit else tx.aborted).update(log.records)
    return tx


def transactional_producer(bootstrap: str, topic: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    return producer


def delete_before(bootstrap: str, topic: str, offsets: Mapping[int, int]) -> None:
    """Delete every record below ``offsets[partition]`` (as retention would): DeleteRecords."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, p, off) for p, off in offsets.items()],
                                   request_timeout=30)
    for fut in futures.values():
        fut.result(timeout=30)
