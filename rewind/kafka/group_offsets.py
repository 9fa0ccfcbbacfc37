"""A stream's progress as a Kafka consumer group, so Kafka's own tools (``kafka-consumer-groups``, Burrow,
a platform team's lag exporter) see its lag.

Why: Spark's Kafka connector tracks offsets in its checkpoint and commits none to Kafka, so to those
tools a Rewind stream is invisible. After each committed batch, its end offsets are committed to the
group ``rewind-<stream>`` (``consumer_group``): where the sink is Kafka, inside the batch's own
transaction (``send_offsets_to_transaction``: the offsets and the batch's records commit together);
for other sinks, with ``AdminClient.alter_consumer_group_offsets`` once the batch has committed
(``GroupOffsets``, from the progress listener: the batch is in the sink and in Spark's commit log).

Nothing reads these offsets back: the stream resumes from its checkpoint (Spark's connector ignores
group offsets; Rewind's Python source assigns partitions and seeks, under its own ``groupIdPrefix``),
and the group never has members, so no consumer of it starts from them. The group name is kept apart
from every group Rewind's own clients use (``rewind-sink-*``, ``rewind-lag-*``, ``rewind-kafka-source``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]  # topic -> partition (as text) -> next offset to read
TIMEOUT_S = 15.0


def consumer_group(stream: str) -> str:
    """The consumer group a stream's committed offsets go to: ``rewind-<stream>``."""
    return f"rewind-{stream}"


def end_offsets(source_offsets: str | None) -> Offsets:
    """A batch's end offsets from its ledger identity (``BatchWriter.source_offsets``: ``{"start", "end",
    "watermark_ms"}``, ``end`` one source's offsets or a list of them); {} when unknown."""
    if not source_offsets:
        return {}
    try:
        end = json.loads(source_offsets).get("end")
    except (ValueError, AttributeError):
        return {}
    return merged(end if isinstance(end, list) else [end])


def merged(sources: list[Any]) -> Offsets:
    """Several sources' ``{topic: {partition: offset}}`` as one (non-numeric entries dropped)."""
    out: Offsets = {}
    for src in sources:
        if not isinstance(src, Mapping):
            continue
        for topic, parts in src.items():
            if isinstance(parts, Mapping):
                for part, off in parts.items():
                    if str(part).lstrip("-").isdigit() and isinstance(off, int) and off >= 0:
                        out.setdefault(str(topic), {})[str(part)] = off
    return out


def progress_end_offsets(progress: Any) -> Offsets:
    """A batch progress's end offsets over its sources (Spark's ``{"topic": {"0": 42}}`` text each)."""
    found = []
    for src in progress.sources or []:
        try:
            found.append(json.loads(src.endOffset) if isinstance(src.endOffset, str) else src.endOffset)
        except (TypeError, ValueError):
            continue
    return merged(found)


def topic_partitions(offsets: Offsets) -> list[Any]:
    """confluent-kafka ``TopicPartition``s for a commit (sorted: one order in logs and requests)."""
    from confluent_kafka import TopicPartition

    return [TopicPartition(t, int(p), int(o)) for t, parts in sorted(offsets.items())
            for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))]


def read_group(bootstrap: str, group: str, client: Mapping[str, str] | None = None) -> Offsets:
    """The group's committed offsets (what ``kafka-consumer-groups --describe`` shows as CURRENT-OFFSET)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            # require_stable: offsets committed in a transaction become visible once its markers are written,
            # a moment after the commit returns; the broker holds the answer until then (KIP-447)
            answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                       require_stable=True)[group].result(TIMEOUT_S)
            break
        except KafkaException as exc:  # a broker just started loads its groups first: ask again
            error = exc.args[0] if exc.args else None
            loading = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.NOT_COORDINATOR)
            again = getattr(error, "retriable", lambda: False)() or getattr(error, "code", lambda: None)() in loading
            if not again or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    out: Offsets = {}
    for tp in answer.topic_partitions:
        if tp.offset >= 0:
            out.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset
    return out


class GroupOffsets:
    """Commits a stream's batch end offsets to its group with the AdminClient (sinks other than Kafka).

    Best effort: a failure is logged and the next batch commits again (offsets only grow), because
    a monitoring aid must never stop the stream. ``submit`` hands the offsets to a thread of its own,
    so a slow or unreachable broker never holds up the progress listener (and the status heartbeat)."""

    def __init__(self, bootstrap: str, client: Mapping[str, str], group: str) -> None:
        self.config: dict[str, Any] = {"bootstrap.servers": bootstrap, **client}
        self.group = group
        self.last: Offsets = {}
        self._admin: Any = None
        self._pending: Offsets | None = None
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, offsets: Offsets) -> None:
        """Commit ``offsets`` soon, in the background (a newer submit replaces one not yet sent)."""
        with self._lock:
            self._pending = offsets
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"group-offsets-{self.group}", daemon=True)
                self._thread.start()
        self._wake.set()

    def flush(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until what was submitted has been sent: a driver that
        stops leaves its group where its last batch ended, not one batch behind. False: timed out."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("consumer group %s: the last batch's offsets not sent within %.0fs", self.group,
                                timeout)
                    return False
                self._idle.wait(left)
        return True

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                offsets, self._pending = self._pending, None
                self._busy = True
            try:
                if offsets:
                    self.commit(offsets)
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()

    def commit(self, offsets: Offsets) -> bool:
        """Commit ``offsets`` unless they are what was committed last; True when committed now."""
        if not offsets or offsets == self.last:
            return False
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient

        try:
            if self._admin is None:
                self._admin = AdminClient(self.config)
            request = ConsumerGroupTopicPartitions(self.group, topic_partitions(offsets))
            self._admin.alter_consumer_group_offsets([request])[self.group].result(TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            log.warning("consumer group %s: offsets not committed (%s); the next batch tries again", self.group, exc)
            return False
        self.last = offsets
        return True
