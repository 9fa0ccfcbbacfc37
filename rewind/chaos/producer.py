"""The chaos run's producer: a known set of events, released segment by segment as the faults advance.

Why a thread of its own: the run measures its progress in produced events, not wall-clock time
(`rewind.chaos.schedule`), so the injector releases each segment to this thread as a fault
starts and waits until it is written before the next fault may start. What it writes is the
known set (`rewind.chaos.known_set.ProducerKnobs`: ids ``chaos-SEQ``, with duplicates,
malformed and late records), through the demo producer (``rewind.demo.producer.produce``).
A skewed restart's segment is written by the same thread while the stream is down, as unequal
backlogs whose event times and Kafka timestamps are skewed across the partitions by more than
the watermark delay (`rewind.chaos.backlog.BacklogPlan`), so the records behind the watermark --
which the stream routes to the dead-letter table as ``behind_watermark`` -- are records of the
known set too. Every acknowledged record's coordinates are kept (``delivered``): the proof checks
that Kafka kept each of them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from rewind.chaos.backlog import BacklogPlan
from rewind.chaos.known_set import ProducerKnobs
from rewind.demo.producer import ProduceSpec, plan_record, produce

log = logging.getLogger(__name__)


class ChaosProducer(threading.Thread):
    """Sends sequence numbers 0..events-1 in chunks at `rate`, never past what was released.

    A segment queued as a backlog (`queue_backlog`) is sent at once, each sequence number to the
    partition and with the Kafka timestamp and event time its `BacklogPlan` gives (the same
    records as otherwise: ids, duplicates, malformed and late ones), so the known set holds.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, events: int, rate: float,
                 knobs: ProducerKnobs) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions, self.events, self.rate = bootstrap, topic, partitions, events, rate
        self.knobs = knobs
        self.chunk = int(min(5000, max(200, rate)))
        self.cond = threading.Condition()
        self.released = 0
        self.produced = 0  # sequence numbers done (sent or failed)
        self.acknowledged = 0
        self.delivered: list[tuple[str, int, int]] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.seconds = 0.0
        self.backlogs: dict[int, BacklogPlan] = {}  # start seq -> plan
        self.backlog_reports: dict[int, dict[str, Any]] = {}

    def queue_backlog(self, plan: BacklogPlan) -> None:
        with self.cond:
            if plan.start_seq < self.produced:
                raise RuntimeError(f"backlog from seq {plan.start_seq}: seq {self.produced} already produced")
            self.backlogs[plan.start_seq] = plan

    def release_to(self, n: int) -> None:
        with self.cond:
            self.released = max(self.released, min(n, self.events))
            self.cond.notify_all()

    def wait_produced(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.produced < min(n, self.events):
                left = deadline - time.monotonic()
                if left <= 0 or not self.is_alive():
                    return self.produced >= min(n, self.events)
                self.cond.wait(min(left, 1.0))
        return True

    def stop(self) -> None:
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()

    def run(self) -> None:

        k = self.knobs
        while self.produced < self.events and not self.stopping.is_set():
            with self.cond:
                while self.released <= self.produced and not self.stopping.is_set():
                    self.cond.wait(1.0)
                plan = self.backlogs.pop(self.produced, None)
                n = min(self.chunk, self.released - self.produced)
                n = min([n] + [s - self.produced for s in self.backlogs if s > self.produced])  # stop before one
            if self.stopping.is_set():
                break
            if plan is not None:
                n = plan.end_seq - plan.start_seq
                t = time.monotonic()
                try:
                    self.backlog_reports[plan.start_seq] = self._send_backlog(plan)
                except Exception as exc:  # noqa: BLE001
                    self.errors.append(f"backlog seq {plan.start_seq}..{plan.end_seq - 1}: {type(exc).__name__}: {exc}")
                    self.backlog_reports[plan.start_seq] = {"error": self.errors[-1]}
                    log.warning("chaos producer: %s", self.errors[-1])
                self.seconds += time.monotonic() - t
                with self.cond:
                    self.produced += n
                    self.cond.notify_all()
                continue
            spec = ProduceSpec(topic=self.topic, count=n, rate=self.rate, partitions=self.partitions,
                               id_prefix=k.id_prefix, start_seq=self.produced, keys=k.keys,
                               malformed_every=k.malformed_every, late_every=k.late_every,
                               late_by=timedelta(seconds=k.late_by_s), duplicate_every=k.duplicate_every)
            t = time.monotonic()
            try:
                report = produce(self.bootstrap, spec, keep_offsets=True)
                self.delivered += report.delivered
                self.acknowledged += len(report.delivered)
            except Exception as exc:  # noqa: BLE001 - a producer failure is reported, never hidden
                self.errors.append(f"seq {self.produced}..{self.produced + n - 1}: {type(exc).__name__}: {exc}")
                log.warning("chaos producer: %s", self.errors[-1])
            self.seconds += time.monotonic() - t
            with self.cond:
                self.produced += n
                self.cond.notify_all()

    def _send_backlog(self, plan: BacklogPlan) -> dict[str, Any]:
        """Every record of the plan's sequence numbers, unthrottled (a backlog is there already)."""
        from confluent_kafka import KafkaException, Producer


        k = self.knobs
        spec = ProduceSpec(topic=self.topic, count=plan.end_seq - plan.start_seq, partitions=self.partitions,
                           id_prefix=k.id_prefix, start_seq=plan.start_seq, keys=k.keys,
                           malformed_every=k.malformed_every, late_every=k.late_every,
                           late_by=timedelta(seconds=k.late_by_s), duplicate_every=k.duplicate_every)
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "enable.idempotence": True,
                             "compression.type": "none", "batch.num.messages": 5000})
        delivered: list[tuple[str, int, int]] = []
        errors: list[str] = []

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append((msg.topic(), msg.partition(), msg.offset()))

        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        sent: dict[int, int] = {}
        for seq in range(plan.start_seq, plan.end_seq):
            partition, ms = plan.place(seq)
            for _kind, key, value in plan_record(spec, seq, epoch + timedelta(milliseconds=ms)):
                while True:
                    try:
                        producer.produce(self.topic, value=value, key=key, partition=partition, timestamp=ms,
                                         on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.05)
                sent[partition] = sent.get(partition, 0) + 1
            producer.poll(0)
        remaining = producer.flush(60)
        self.delivered += delivered
        self.acknowledged += len(delivered)
        if remaining or errors:
            raise KafkaException(f"{remaining} records not delivered within 60 s, {len(errors)} failed"
                                 + (f"; first: {errors[0]}" if errors else ""))
        offsets: dict[int, list[int]] = {}
        for _t, p, o in delivered:
            lo_hi = offsets.setdefault(p, [o, o + 1])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], o), max(lo_hi[1], o + 1)
        return {"records": len(delivered), "by_partition": {str(p): n for p, n in sorted(sent.items())},
                "offsets": {str(p): r for p, r in sorted(offsets.items())}}
