"""Kafka look-ups through confluent-kafka (librdkafka): partitions, earliest and end offsets, times.

The look-ups are the Admin/ListOffsets answers Kafka gives: earliest and end offsets from
ListOffsets (for a ``read_committed`` consumer, librdkafka's default, the end is the last stable
offset: records of an open transaction are not readable yet), times from ListOffsets by
timestamp. They ride through a broker restart or a leader change (retried until their timeout)
and stop at once on rejected credentials (see ``client_errors``).

Public entry points:
- ``KafkaOffsetClient`` (one cached consumer, the driver's): ``partitions``, ``earliest_offsets``,
  ``end_offsets``, ``offsets_for_times``;
- ``true_end_offsets`` / ``earliest_offsets``: one-shot helpers;
- ``check_reachable``: a bootstrap that does not answer, rejected credentials, a listener that
  expects another security protocol, or a missing topic, as one clear error before Spark starts.

Reading records is ``rewind.kafka.reader``; the settings every client gets, ``client_config``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from rewind.kafka.client_config import base_consumer_config
from rewind.kafka.client_errors import ClientErrors, last_reason, raise_if_rejected, retriable
from rewind.kafka.types import TP, KafkaTimeoutError, KafkaUnreachable, Offsets, UnknownTopicError


def topic_partitions(tps: Iterable[TP], offsets: Mapping[TP, int] | None = None) -> list[TopicPartition]:
    """confluent-kafka's form of ``tps`` (at ``offsets``, when given)."""
    if offsets is None:
        return [TopicPartition(tp.topic, tp.partition) for tp in tps]
    return [TopicPartition(tp.topic, tp.partition, int(offsets[tp])) for tp in tps]


class KafkaOffsetClient:
    """Driver-side look-ups through one lazily created consumer, reused across micro-batches.

    Not picklable state: the consumer is dropped by ``__getstate__`` and recreated on first use.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 120.0) -> None:
        conf = dict(config)
        conf["auto.offset.reset"] = "error"
        conf["enable.partition.eof"] = True
        self.config = conf
        self.timeout_s = float(timeout_s)
        self._consumer: Consumer | None = None
        self._errors = ClientErrors()

    # -- lifecycle --------------------------------------------------------------------------
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._errors = ClientErrors()
            self._consumer = Consumer({**self.config, "error_cb": self._errors})
        return self._consumer

    def _check_errors(self) -> list[KafkaError]:
        """After a failed attempt: serve librdkafka's error callbacks (the consumer is never assigned,
        so ``poll`` returns no records) and stop at once on rejected credentials."""
        if self._consumer is not None:
            self._consumer.poll(0)
        errors = self._errors.take()
        raise_if_rejected(errors, self.config.get("bootstrap.servers"))
        return errors

    def _serve(self) -> None:
        """After an answer: serve librdkafka's queued callbacks. Its log lines (``client_logs``) wait
        for a poll, and a client whose look-ups all succeed would otherwise hoard them."""
        if self._consumer is not None:
            self._consumer.poll(0)
            self._errors.take()  # errors it got past; a later failure reports its own

    def _slice(self, attempt: int, deadline: float) -> float:
        """How long one attempt may block: 1 s, doubling to 10 s, never past the deadline (short
        first attempts notice rejected credentials quickly; a slow broker still gets 10 s)."""
        return max(0.1, min(10.0, 2.0 ** attempt, self.timeout_s, deadline - time.monotonic()))

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError):  # already closed
                pass
            self._consumer = None

    def __enter__(self) -> "KafkaOffsetClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = None
        state["_errors"] = ClientErrors()
        return state

    # -- metadata ---------------------------------------------------------------------------
    def partitions(self, topics: Iterable[str]) -> list[TP]:
        """All partitions of ``topics``, sorted; ``UnknownTopicError`` names a missing topic."""
        out: list[TP] = []
        for topic in topics:
            out.extend(TP(topic, p) for p in self._topic_partitions(topic))
        return sorted(out)

    def _topic_partitions(self, topic: str) -> list[int]:
        deadline = time.monotonic() + self.timeout_s
        last_error: Any = None
        attempt = 0
        while True:
            try:
                md = self.consumer().list_topics(topic=topic, timeout=self._slice(attempt, deadline))
            except KafkaException as exc:
                last_error = last_reason(self._check_errors(), exc.args[0] if exc.args else exc)
            else:
                tmd = md.topics.get(topic)
                err = tmd.error if tmd is not None else None
                if tmd is not None and err is None and tmd.partitions:
                    self._serve()
                    return sorted(tmd.partitions)
                if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise UnknownTopicError(
                        f"topic {topic!r} does not exist on {self.config.get('bootstrap.servers')}; create it "
                        "or fix the topic name")
                last_error = err or "no partitions in metadata"
                if err is not None and not retriable(err):
                    raise KafkaException(err)
            attempt += 1
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"no metadata for topic {topic!r} from {self.config.get('bootstrap.servers')} "
                                        f"after {self.timeout_s:.0f}s: {last_error}")
            time.sleep(0.2)

    # -- offsets ----------------------------------------------------------------------------
    def _list_offsets(self, query: Mapping[TP, int]) -> dict[TP, int]:
        """ListOffsets by timestamp (-2 earliest, -1 latest, else ms) for many partitions at once,
        retried through leader changes (a broker restart) until ``timeout_s``."""
        if not query:
            return {}
        tps = sorted(query)
        deadline = time.monotonic() + self.timeout_s
        last: Any = None
        attempt = 0
        while True:
            try:
                res = self.consumer().offsets_for_times(topic_partitions(tps, query),
                                                        timeout=self._slice(attempt, deadline))
                errors = [r for r in res if r.error is not None]
                if not errors:
                    self._serve()
                    return {TP(r.topic, r.partition): r.offset for r in res}
                last = errors[0].error
                if not retriable(last):
                    raise KafkaException(last)
            except KafkaException as exc:
                kerr = exc.args[0] if exc.args else None
                reported = self._check_errors()
                if not retriable(kerr):
                    raise
                last = last_reason(reported, kerr)
            attempt += 1
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"ListOffsets got no answer from {self.config.get('bootstrap.servers')} "
                                        f"within {self.timeout_s:.0f}s: {last}")
            time.sleep(0.2)

    def earliest_offsets(self, tps: Iterable[TP]) -> Offsets:
        """The earliest retained offset of each partition."""
        return self._list_offsets({tp: -2 for tp in tps})

    def end_offsets(self, tps: Iterable[TP]) -> Offsets:
        """The end of each partition for this client's isolation level: the last stable offset for
        ``read_committed`` (librdkafka's default), the high watermark for ``read_uncommitted``."""
        return self._list_offsets({tp: -1 for tp in tps})

    def offsets_for_times(self, stamps: Mapping[TP, int]) -> dict[TP, int | None]:
        """The first offset whose record timestamp is >= the given ms; None when there is none."""
        found = self._list_offsets(stamps)
        return {tp: (off if off is not None and off >= 0 else None) for tp, off in found.items()}


# ---------------------------------------------------------------------------------------------
# One-shot helpers
# ---------------------------------------------------------------------------------------------


def _as_tps(client: KafkaOffsetClient, what: Iterable[TP | str] | str) -> list[TP]:
    if isinstance(what, str):
        what = [t.strip() for t in what.split(",") if t.strip()]
    tps: list[TP] = []
    topics: list[str] = []
    for item in what:
        if isinstance(item, str):
            topics.append(item)
        else:
            tps.append(TP(item[0], int(item[1])))
    return sorted(set(tps) | set(client.partitions(topics)))


def true_end_offsets(bootstrap_servers: str, partitions: Iterable[TP | str] | str,
                     config: Mapping[str, Any] | None = None, timeout_s: float = 60.0) -> Offsets:
    """End offset of every partition (topic names expand to all their partitions); the last stable
    offset unless ``config`` sets ``isolation.level=read_uncommitted``."""
    with KafkaOffsetClient(base_consumer_config(bootstrap_servers, config), timeout_s) as client:
        return client.end_offsets(_as_tps(client, partitions))


def earliest_offsets(bootstrap_servers: str, partitions: Iterable[TP | str] | str,
                     config: Mapping[str, Any] | None = None, timeout_s: float = 60.0) -> Offsets:
    """Earliest retained offset of every partition (topic names expand to all their partitions)."""
    with KafkaOffsetClient(base_consumer_config(bootstrap_servers, config), timeout_s) as client:
        return client.earliest_offsets(_as_tps(client, partitions))


def check_reachable(bootstrap_servers: str, topics: Iterable[str], config: Mapping[str, Any] | None = None,
                    timeout_s: float = 15.0, partitions: int | None = None) -> dict[str, int]:
    """Partition count of each topic. Runs before Spark starts, so a wrong bootstrap, security
    setting or topic costs seconds, not a Spark start-up and a stack trace. Raises
    ``KafkaAuthenticationError`` when the broker rejects the credentials, ``KafkaUnreachable`` when
    no broker answers within ``timeout_s`` or one closes the connection on the request (a listener
    that expects another security protocol), ``UnknownTopicError`` naming every missing topic (and,
    given ``partitions``, the registry's partition count in the command that creates them)."""
    from confluent_kafka.admin import AdminClient

    conf = {k: v for k, v in base_consumer_config(bootstrap_servers, config).items()
            if k in ("bootstrap.servers", "log_level", "logger") or k.startswith(("security.", "sasl.", "ssl."))}
    errors = ClientErrors()
    # the stubs type AdminClient's config as str/int/float/bool values: librdkafka takes callbacks too
    admin = AdminClient({**conf, "log_level": 0, "error_cb": errors})  # type: ignore[dict-item]
    meta = _cluster_metadata(admin, errors, bootstrap_servers, timeout_s)
    topics = list(topics)
    missing = [t for t in topics if t not in meta.topics or meta.topics[t].error is not None]
    if missing:
        hint = " ".join(f"`rewind produce --topic {t} --count 0 --partitions {partitions or 3}`" for t in missing)
        raise UnknownTopicError(f"Kafka topic(s) {', '.join(missing)} do not exist on {bootstrap_servers}; create them "
                                f"({hint}) or fix the registry")
    return {t: len(meta.topics[t].partitions) for t in topics}


def _cluster_metadata(admin: Any, errors: ClientErrors, bootstrap_servers: str, timeout_s: float) -> Any:
    """Cluster metadata, asked in slices (1 s, doubling) so rejected credentials end the wait at once.

    A request that fails well before its slice ends was sent and then cut off by the broker: twice
    in a row, that is a listener speaking another protocol (SASL or TLS), not a broker that is down.
    """
    deadline = time.monotonic() + timeout_s
    slice_s, cut_off = 1.0, 0
    while True:
        wait = max(0.1, min(slice_s, deadline - time.monotonic()))
        started = time.monotonic()
        try:
            return admin.list_topics(timeout=wait)
        except KafkaException as exc:
            failure = exc.args[0] if exc.args else exc
        quick = time.monotonic() - started < wait / 2
        time.sleep(0.2 if quick else 0)  # let an authentication error reach the callback queue
        admin.poll(0)
        seen = errors.take()
        raise_if_rejected(seen, bootstrap_servers)
        cut_off = cut_off + 1 if quick else 0
        if cut_off >= 2:
            raise KafkaUnreachable(
                f"Kafka at {bootstrap_servers} closed the connection on the request ({last_reason(seen, failure)}): "
                "its listener likely expects another security protocol; set the stream's kafka.security.protocol "
                "(SASL_PLAINTEXT, SSL or SASL_SSL) and its kafka.sasl.* / kafka.ssl.* options, or use the "
                "broker's PLAINTEXT listener")
        if time.monotonic() >= deadline:
            raise KafkaUnreachable(
                f"no Kafka broker answered at {bootstrap_servers} within {timeout_s:g}s "
                f"({last_reason(seen, failure)}); "
                "check the bootstrap servers (--bootstrap, REWIND_KAFKA_BOOTSTRAP or the rewind_kafka connection), "
                "that the brokers run, and the stream's kafka.security.protocol option")
        slice_s = min(slice_s * 2, 5.0)

