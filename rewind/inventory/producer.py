"""Inventory update producer with fault injection (malformed records, unknown SKUs, negative quantities).

Why versions are one global sequence (``version_start + seq``): every (sku, warehouse) then sees its
versions increase over a run and no two records share a version, so "the latest version wins"
has one answer whatever order the stream reads them in. Keyless records (``keyless=True``) spread
one key's versions over partitions, so the stream does read them out of order.

``python -m rewind.inventory.producer`` runs it (``rewind up`` starts it so); there the versions
start at the current time in microseconds, so a restarted producer's updates are newer than the
last run's.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from rewind.embedded.services import export_platform_env
from rewind.inventory.catalog import SIZE, sku_for
from rewind.kafka.topics import ensure_topic
from rewind.settings import resolve_bootstrap, services_dir

log = logging.getLogger(__name__)
WAREHOUSES = ("WH-AMS", "WH-BER", "WH-LIS", "WH-OSL", "WH-WAW")
MALFORMED_KINDS = ("not_json", "missing_field", "wrong_type", "no_zone", "bad_warehouse")


@dataclass
class InventoryReport:
    """What was sent, by kind (``stock``: valid updates)."""

    sent: int = 0
    stock: int = 0
    malformed: int = 0
    unknown: int = 0
    negative: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, float | int]:
        return {**asdict(self), "seconds": round(self.seconds, 3),
                "rate": round(self.sent / self.seconds, 1) if self.seconds else 0.0}


def _every(n: int, seq: int) -> bool:
    return bool(n) and seq % n == n - 1


def plan_record(seq: int, rng: random.Random, now: datetime, *, malformed_every: int = 0, unknown_every: int = 0,
                negative_every: int = 0, version_start: int = 1) -> tuple[str, bytes, bytes]:
    """Record ``seq``: (kind, key, value). ``rng`` draws the same three numbers for every record, so a
    record's content depends on the seed and its sequence number only (and ``now`` for its time)."""
    sku, warehouse = sku_for(rng.randrange(1, SIZE + 1)), WAREHOUSES[rng.randrange(len(WAREHOUSES))]
    quantity = rng.randrange(0, 500)
    doc: dict[str, object] = {"sku": sku, "warehouse": warehouse, "quantity": quantity,
                              "version": version_start + seq,
                              "updated_at": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}
    key = f"{sku}|{warehouse}".encode()
    if _every(malformed_every, seq):
        kind = MALFORMED_KINDS[(seq // malformed_every) % len(MALFORMED_KINDS)]
        if kind == "not_json":
            return "malformed", key, json.dumps(doc).encode()[:-7]
        if kind == "missing_field":
            del doc["version"]
        elif kind == "wrong_type":
            doc["quantity"] = "ten"
        elif kind == "no_zone":
            doc["updated_at"] = str(doc["updated_at"]).rstrip("Z")
        else:
            doc["warehouse"] = f"warehouse {warehouse[3:].lower()}"
        return "malformed", key, json.dumps(doc).encode()
    if _every(unknown_every, seq):
        doc["sku"] = sku_for(90_000 + seq % 10_000)
        return "unknown", key, json.dumps(doc).encode()
    if _every(negative_every, seq):
        doc["quantity"] = -1 - quantity
        return "negative", key, json.dumps(doc).encode()
    return "stock", key, json.dumps(doc).encode()


def produce_inventory(bootstrap: str, topic: str, count: int, partitions: int = 3, malformed_every: int = 0,
                      unknown_every: int = 0, negative_every: int = 0, keyless: bool = False, seed: int = 15, *,
                      rate: float = 0.0, version_start: int = 1,
                      should_stop: Callable[[], bool] = lambda: False,
                      progress: Callable[[InventoryReport], None] | None = None) -> InventoryReport:
    """Create ``topic`` if missing and send ``count`` records (``rate``/s, 0: as fast as the broker takes
    them) with the default producer settings and idempotence on; the report counts what was sent."""
    from confluent_kafka import KafkaException, Producer

    for name, n in (("count", count), ("malformed_every", malformed_every), ("unknown_every", unknown_every),
                    ("negative_every", negative_every), ("rate", rate)):
        if n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
    ensure_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rng = random.Random(seed)
    report = InventoryReport()
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    start = last_progress = time.monotonic()
    for seq in range(count):
        if should_stop():
            break
        if rate:
            delay = start + seq / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        kind, key, value = plan_record(seq, rng, datetime.now(UTC), malformed_every=malformed_every,
                                       unknown_every=unknown_every, negative_every=negative_every,
                                       version_start=version_start)
        while True:
            try:
                producer.produce(topic, value=value, key=None if keyless else key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        report.sent += 1
        setattr(report, kind, getattr(report, kind) + 1)
        if progress and time.monotonic() - last_progress >= 1.0:
            last_progress = time.monotonic()
            report.seconds = last_progress - start
            progress(report)
    remaining = producer.flush(60)
    report.seconds = time.monotonic() - start
    if remaining:
        raise KafkaException(f"{remaining} records not delivered to {topic} within 60 s (is the broker up?)")
    if errors:
        raise KafkaException(f"{len(errors)} records failed delivery to {topic}; first: {errors[0]}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rewind.inventory.producer``: send updates until the count is reached or SIGTERM/SIGINT."""

    p = argparse.ArgumentParser(prog="python -m rewind.inventory.producer", description=__doc__.split("\n")[0])
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--rate", type=float, default=0.0, help="records/s; 0 = as fast as possible")
    p.add_argument("--partitions", type=int, default=3, help="partitions when the topic is created")
    for fault in ("malformed", "unknown", "negative"):
        p.add_argument(f"--{fault}-every", type=int, default=0, metavar="N", help=f"one {fault} record in N")
    p.add_argument("--keyless", action="store_true", help="no keys: the client's sticky partitioner picks")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--version-start", type=int, default=None,
                   help="first version (default: now in microseconds, so a restart's versions are newer)")
    p.add_argument("--bootstrap", default=None, help="host:port (default: the embedded platform's)")
    args = p.parse_args(argv)

    export_platform_env(services_dir())  # a command line: the embedded platform's Kafka, when one runs
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    version_start = args.version_start if args.version_start is not None else time.time_ns() // 1000
    report = produce_inventory(resolve_bootstrap(args.bootstrap), args.topic, args.count, args.partitions,
                               args.malformed_every, args.unknown_every, args.negative_every, args.keyless,
                               args.seed, rate=args.rate, version_start=version_start, should_stop=lambda: bool(stop),
                               progress=lambda r: print(f"  sent {r.sent} ({r.sent / max(r.seconds, 1e-9):.0f}/s)",
                                                        file=sys.stderr, flush=True))
    print(json.dumps(report.summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
