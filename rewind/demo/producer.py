"""Demo event producer with fault injection (malformed, late and duplicate records).

Event ids are deterministic (``PREFIX-SEQ``), so a test can say exactly which
events must end up in the sink.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from rewind.demo.events import make_event, malformed_payload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProduceSpec:
    """What to send; every switch is 'one in N' (0 = never), so runs are reproducible."""

    topic: str
    count: int
    rate: float = 0.0  # events/s; 0 = as fast as the broker takes them
    partitions: int = 3
    id_prefix: str = "evt"
    start_seq: int = 0
    keys: int = 16
    malformed_every: int = 0
    late_every: int = 0
    late_by: timedelta = timedelta(hours=1)
    duplicate_every: int = 0
    transactional: bool = False
    transaction_size: int = 500
    keyless: bool = False  # no key: the client's default (sticky) partitioner picks the partition

    def validate(self) -> None:
        if not self.topic:
            raise ValueError("--topic is required")
        if self.count < 0:
            raise ValueError(f"--count must be >= 0, got {self.count}")
        if self.rate < 0:
            raise ValueError(f"--rate must be >= 0 (0 = unthrottled), got {self.rate}")
        if self.partitions < 1:
            raise ValueError(f"--partitions must be >= 1, got {self.partitions}")
        for name in ("malformed_every", "late_every", "duplicate_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
        if self.transaction_size < 1:
            raise ValueError("--transaction-size must be >= 1")


@dataclass
class ProduceReport:
    sent: int = 0
    events: int = 0
    malformed: int = 0
    late: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    delivered: list[tuple[str, int, int]] = field(default_factory=list)

    def summary(self) -> dict[str, float | int]:
        return {"sent": self.sent, "events": self.events, "malformed": self.malformed, "late": self.late,
                "duplicates": self.duplicates, "seconds": round(self.seconds, 3),
                "rate": round(self.sent / self.seconds, 1) if self.seconds else 0.0}


_COUNTERS = {"event": "events", "late": "late", "malformed": "malformed", "duplicate": "duplicates"}


def plan_record(spec: ProduceSpec, seq: int, now: datetime) -> list[tuple[str, bytes, bytes]]:
    """The records sent for sequence number ``seq``: (kind, key, value), duplicates included."""
    if spec.malformed_every and seq % spec.malformed_every == spec.malformed_every - 1:
        return [("malformed", f"bad{seq % spec.keys:03d}".encode(), malformed_payload(seq))]
    late = bool(spec.late_every) and seq % spec.late_every == spec.late_every - 1
    event = make_event(spec.id_prefix, seq, now - spec.late_by if late else now, spec.keys)
    out = [("late" if late else "event", event.key.encode(), event.encode())]
    if spec.duplicate_every and seq % spec.duplicate_every == spec.duplicate_every - 1:
        out.append(("duplicate", event.key.encode(), event.encode()))
    return out


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> int:
    """Create the topic if missing; return its partition count."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=10)
    if topic in meta.topics and not meta.topics[topic].error:
        have = len(meta.topics[topic].partitions)
        if have != partitions:
            log.warning("topic %s exists with %d partitions (asked for %d); using it as is", topic, have, partitions)
        return have
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(timeout=15)
    return partitions


def produce(bootstrap: str, spec: ProduceSpec, progress: Callable[[ProduceReport], None] | None = None,
            should_stop: Callable[[], bool] = lambda: False, keep_offsets: bool = False) -> ProduceReport:
    """Send ``spec.count`` sequence numbers; duplicates come on top of the count."""
    from confluent_kafka import KafkaException, Producer

    spec.validate()
    ensure_topic(bootstrap, spec.topic, spec.partitions)
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                               "compression.type": "none", "batch.num.messages": 5000}
    if spec.transactional:
        conf["transactional.id"] = f"rewind-producer-{spec.topic}-{spec.id_prefix}-{spec.start_seq}"
    producer = Producer(conf)
    report = ProduceReport()
    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        elif keep_offsets:
            report.delivered.append((msg.topic(), msg.partition(), msg.offset()))

    if spec.transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    start = time.monotonic()
    last_progress = start
    in_txn = 0
    for i in range(spec.count):
        if should_stop():
            break
        seq = spec.start_seq + i
        if spec.rate:
            delay = start + i / spec.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        for kind, key, value in plan_record(spec, seq, datetime.now(UTC)):
            while True:
                try:
                    producer.produce(spec.topic, value=value, key=None if spec.keyless else key,
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            report.sent += 1
            field_name = _COUNTERS[kind]
            setattr(report, field_name, getattr(report, field_name) + 1)
        producer.poll(0)
        in_txn += 1
        if spec.transactional and in_txn >= spec.transaction_size:
            producer.commit_transaction(30)
            producer.begin_transaction()
            in_txn = 0
        if progress and time.monotonic() - last_progress >= 1.0:
            last_progress = time.monotonic()
            report.seconds = last_progress - start
            progress(report)
    if spec.transactional:
        producer.commit_transaction(30)
    remaining = producer.flush(60)
    report.seconds = time.monotonic() - start
    if remaining:
        raise KafkaException(f"{remaining} records not delivered to {spec.topic} within 60 s (is the broker up?)")
    if errors:
        raise KafkaException(f"{len(errors)} records failed delivery to {spec.topic}; first: {errors[0]}")
    return report
