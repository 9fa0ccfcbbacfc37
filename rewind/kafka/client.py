"""Kafka look-ups and range reads through confluent-kafka (librdkafka), for Apache Kafka.

The look-ups are the Admin/ListOffsets answers Kafka gives: earliest and end offsets from
ListOffsets (for a ``read_committed`` consumer, librdkafka's default, the end is the last stable
offset: records of an open transaction are not readable yet), times from ListOffsets by
timestamp. Reads assign one partition at an offset and consume; offsets may have gaps
(transaction markers take offsets, aborted records are skipped by ``read_committed``), so a
read ends at the first record or end-of-partition event at or past its end, never by waiting
for offset ``end - 1``.

Public entry points:
- ``KafkaOffsetClient`` (one cached consumer): ``partitions``, ``earliest_offsets``,
  ``end_offsets``, ``offsets_for_times``;
- ``true_end_offsets`` / ``earliest_offsets``: one-shot helpers;
- ``iter_range``: the records of ``[from, until)`` of one partition, in batches;
- ``check_reachable``: a bootstrap that does not answer, rejected credentials, a listener that
  expects another security protocol, or a missing topic, as one clear error.

Why the look-ups watch librdkafka's ``error_cb``: a wrong SASL password is not a failed request
but a connection that keeps failing to authenticate, so without it a look-up retried for its whole
timeout and then blamed an unreachable broker ("Broker transport failure"). They now stop at the
first authentication error and say which option to fix.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from typing import Any, Iterable, Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from rewind.kafka.client_config import librdkafka_config
from rewind.kafka.offsets import TP, DataLossError, OffsetRange, Offsets, UnknownTopicError

log = logging.getLogger(__name__)

EOF = KafkaError._PARTITION_EOF
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
#: Errors a broker crash or a leader change causes, gone once leadership has moved. _DESTROY_BROKER:
#: librdkafka dropped its handle of a broker that left the cluster's metadata (a killed node) while
#: a request to it was in flight (seen from the lag probe when a 3-node cluster lost a leader).
_RETRIABLE = {KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
              KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._WAIT_COORD, KafkaError._ALL_BROKERS_DOWN,
              KafkaError.REQUEST_TIMED_OUT, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
              KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR, KafkaError.KAFKA_STORAGE_ERROR,
              KafkaError._DESTROY_BROKER}
_POLL_S = 0.1  # consume() blocks until num_messages or this timeout


class KafkaTimeoutError(TimeoutError):
    """The broker did not answer a look-up or a read within the configured time."""


class KafkaUnreachable(ConnectionError):
    """No broker of the bootstrap list answered; the message names the list and what to check."""


class KafkaAuthenticationError(KafkaUnreachable):
    """The broker answered but rejected the client's credentials (or its TLS handshake failed)."""


#: librdkafka's codes for rejected credentials; _SSL: a failed TLS handshake (certificates).
_AUTH_FAILED = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
_TLS_FAILED = {KafkaError._SSL}


class ClientErrors:
    """``error_cb`` of a look-up client: keeps the last errors librdkafka reported (served by a
    ``poll``), so a failed look-up can tell rejected credentials from an unreachable broker."""

    def __init__(self, keep: int = 20) -> None:
        self.keep = keep
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError) -> None:
        self.errors.append(err)
        del self.errors[:-self.keep]

    def take(self) -> list[KafkaError]:
        out, self.errors = self.errors, []
        return out


def raise_if_rejected(errors: Iterable[KafkaError], bootstrap_servers: Any) -> None:
    """``KafkaAuthenticationError`` naming the options to fix when ``errors`` hold an authentication
    (SASL) or TLS handshake failure; librdkafka's text never holds the password."""
    for err in errors:
        if err.code() in _AUTH_FAILED and "mechanism handshake failed" in err.str():
            raise KafkaAuthenticationError(
                f"Kafka at {bootstrap_servers} does not offer the SASL mechanism asked for ({err.str()}); check the "
                "stream's kafka.sasl.mechanism, and kafka.security.protocol against the listener (a PLAINTEXT "
                "listener offers none)")
        if err.code() in _AUTH_FAILED:
            raise KafkaAuthenticationError(
                f"Kafka at {bootstrap_servers} rejected the credentials ({err.str()}); check the stream's "
                "kafka.sasl.jaas.config (username and password) and kafka.sasl.mechanism")
        if err.code() in _TLS_FAILED:
            raise KafkaAuthenticationError(
                f"the TLS handshake with Kafka at {bootstrap_servers} failed ({err.str()}); check the stream's "
                "kafka.security.protocol and kafka.ssl.* options (kafka.ssl.ca.location: the CA certificate in PEM)")


def _last_reason(errors: list[KafkaError], fallback: Any) -> str:
    """The most telling error for a message: the last one that is not librdkafka's summary
    ("1/1 brokers are down"), else the failed request's own."""
    told = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    return told[-1].str() if told else (fallback.str() if isinstance(fallback, KafkaError) else str(fallback))


def base_consumer_config(bootstrap_servers: str, extra: Mapping[str, Any] | None = None, *,
                         group_id: str = "rewind-kafka-source",
                         auto_offset_reset: str = "error") -> dict[str, Any]:
    """Consumer settings for assign-only reading: no group membership, no commits, EOF events on.

    ``extra`` (the user's ``kafka.*`` options, Java or librdkafka names, see ``client_config``)
    wins over the defaults, except for the settings the readers rely on.
    """
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "fetch.wait.max.ms": 100,         # an empty fetch at the end answers quickly (EOF latency)
        "allow.auto.create.topics": False,
        "topic.metadata.refresh.interval.ms": 60_000,
        "log_level": 3,
    }
    conf.update(librdkafka_config({str(k): str(v) for k, v in (extra or {}).items()}))
    conf.update({
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": auto_offset_reset,
    })
    return conf


def stream_consumer_config(source_options: Mapping[str, str], bootstrap_servers: str,
                           group_id: str) -> dict[str, Any]:
    """Consumer settings for a tool that reads a stream's topics (verify, proof, lag, replay plan):
    the stream's own ``kafka.*`` source options (security, isolation level), so the tool reaches
    the same brokers with the same credentials and counts what the stream itself reads."""
    from rewind.kafka.client_config import kafka_options

    return base_consumer_config(bootstrap_servers, kafka_options(source_options), group_id=group_id)


def _tp_list(tps: Iterable[TP], offsets: Mapping[TP, int] | None = None) -> list[TopicPartition]:
    if offsets is None:
        return [TopicPartition(tp.topic, tp.partition) for tp in tps]
    return [TopicPartition(tp.topic, tp.partition, int(offsets[tp])) for tp in tps]


def _retriable(err: Any) -> bool:
    return isinstance(err, KafkaError) and (err.code() in _RETRIABLE or err.retriable())


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
                last_error = _last_reason(self._check_errors(), exc.args[0] if exc.args else exc)
            else:
                tmd = md.topics.get(topic)
                err = tmd.error if tmd is not None else None
                if tmd is not None and err is None and tmd.partitions:
                    return sorted(tmd.partitions)
                if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise UnknownTopicError(
                        f"topic {topic!r} does not exist on {self.config.get('bootstrap.servers')}; create it "
                        "or fix the topic name")
                last_error = err or "no partitions in metadata"
                if err is not None and not _retriable(err):
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
                res = self.consumer().offsets_for_times(_tp_list(tps, query), timeout=self._slice(attempt, deadline))
                errors = [r for r in res if r.error is not None]
                if not errors:
                    return {TP(r.topic, r.partition): r.offset for r in res}
                last = errors[0].error
                if not _retriable(last):
                    raise KafkaException(last)
            except KafkaException as exc:
                kerr = exc.args[0] if exc.args else None
                errors = self._check_errors()
                if not _retriable(kerr):
                    raise
                last = _last_reason(errors, kerr)
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

    def timestamps_at(self, positions: Mapping[TP, int]) -> dict[TP, int | None]:
        """The Kafka timestamp (ms) of the first readable record at or after each position; None when
        none comes within a few seconds (a position at the end, deleted records, an open transaction)."""
        found: dict[TP, int | None] = {tp: None for tp in positions}
        pending = {tp for tp, off in positions.items() if off >= 0}
        if not pending:
            return found
        consumer = Consumer({**self.config, "auto.offset.reset": "latest"})
        try:
            consumer.assign(_tp_list(sorted(pending), positions))
            deadline = time.monotonic() + min(10.0, self.timeout_s)
            while pending and time.monotonic() < deadline:
                for m in consumer.consume(num_messages=len(pending) * 64, timeout=_POLL_S):
                    topic = m.topic()
                    if topic is None:
                        continue
                    tp = TP(topic, m.partition())
                    if tp not in pending:
                        continue
                    if m.error() is None:
                        found[tp] = m.timestamp()[1]
                    pending.discard(tp)  # a record, EOF or an error: this partition is answered
        finally:
            consumer.close()
        return found

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
                    timeout_s: float = 15.0) -> dict[str, int]:
    """Partition count of each topic. Runs before Spark starts, so a wrong bootstrap, security
    setting or topic costs seconds, not a Spark start-up and a stack trace. Raises
    ``KafkaAuthenticationError`` when the broker rejects the credentials, ``KafkaUnreachable`` when
    no broker answers within ``timeout_s`` or one closes the connection on the request (a listener
    that expects another security protocol), ``UnknownTopicError`` naming every missing topic."""
    from confluent_kafka.admin import AdminClient

    conf = {k: v for k, v in base_consumer_config(bootstrap_servers, config).items()
            if k in ("bootstrap.servers", "log_level") or k.startswith(("security.", "sasl.", "ssl."))}
    errors = ClientErrors()
    admin = AdminClient({**conf, "log_level": 0, "error_cb": errors})
    meta = _cluster_metadata(admin, errors, bootstrap_servers, timeout_s)
    topics = list(topics)
    missing = [t for t in topics if t not in meta.topics or meta.topics[t].error is not None]
    if missing:
        raise UnknownTopicError(f"Kafka topic(s) {', '.join(missing)} do not exist on {bootstrap_servers}; create them "
                                "(e.g. `rewind produce --topic NAME --count 0`) or fix the registry")
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
                f"Kafka at {bootstrap_servers} closed the connection on the request ({_last_reason(seen, failure)}): "
                "its listener likely expects another security protocol; set the stream's kafka.security.protocol "
                "(SASL_PLAINTEXT, SSL or SASL_SSL) and its kafka.sasl.* / kafka.ssl.* options, or use the "
                "broker's PLAINTEXT listener")
        if time.monotonic() >= deadline:
            raise KafkaUnreachable(
                f"no Kafka broker answered at {bootstrap_servers} within {timeout_s:g}s "
                f"({_last_reason(seen, failure)}); "
                "check the bootstrap servers (--bootstrap, REWIND_KAFKA_BOOTSTRAP or the rewind_kafka connection), "
                "that the brokers run, and the stream's kafka.security.protocol option")
        slice_s = min(slice_s * 2, 5.0)


# ---------------------------------------------------------------------------------------------
# Reading one range
# ---------------------------------------------------------------------------------------------


def iter_range(config: Mapping[str, Any], rng: OffsetRange, batch_size: int, timeout_s: float,
               fail_on_data_loss: bool = True) -> Iterator[list[Message]]:
    """The data records of ``[rng.from_offset, rng.until_offset)`` in lists of up to ``batch_size``.

    The read ends when a record at or beyond ``until`` arrives or librdkafka reports EOF at or
    beyond it (offsets may have gaps: transaction markers, aborted records). An EOF below ``until``
    means the partition no longer holds the range (data loss), and so do records below ``from``
    after librdkafka reset a lost position to earliest (never returned); no answer for ``timeout_s``
    (``kafkaConsumer.pollTimeoutMs``) raises ``KafkaTimeoutError``. librdkafka rides through a
    broker restart or leader change on its own: transient errors are logged, not raised.
    """
    until = rng.until_offset
    if until <= rng.from_offset:
        return
    where = f"{rng.topic}[{rng.partition}] range [{rng.from_offset}, {until})"
    next_offset = rng.from_offset
    consumer = Consumer(dict(config))
    consumer.assign([TopicPartition(rng.topic, rng.partition, next_offset)])
    try:
        pending: list[Message] = []
        last_progress = time.monotonic()
        done = False
        while not done:
            # +1: the record or EOF just past the range ends the read without waiting a poll.
            want = max(1, min(batch_size - len(pending), until - next_offset + 1))
            msgs = consumer.consume(num_messages=want, timeout=_POLL_S)
            if not msgs and time.monotonic() - last_progress > timeout_s:
                raise KafkaTimeoutError(
                    f"no answer from Kafka for {timeout_s:.0f}s while reading {where} at offset {next_offset} "
                    "(kafkaConsumer.pollTimeoutMs)")
            data = []
            for m in msgs:
                err = m.error()
                if err is None:
                    data.append(m)
                    continue
                code = err.code()
                if code == EOF:
                    last_progress = time.monotonic()
                    if m.offset() >= until:
                        done = True
                    else:
                        _end_below_range(where, m.offset(), fail_on_data_loss)
                        done = True
                elif code in _OUT_OF_RANGE:
                    raise DataLossError(
                        f"data loss reading {where}: offset {next_offset} is no longer available ({err}). "
                        "Set failOnDataLoss=false to continue from the earliest offset.")
                elif err.fatal() or (m.topic() is not None and not _retriable(err)):
                    raise KafkaException(err)
                else:  # transient (broker restart, leader change): librdkafka retries on its own
                    log.warning("Kafka client error while reading %s: %s", where, err)
            if data:
                last_progress = time.monotonic()
                if data[0].offset() < rng.from_offset:
                    # auto.offset.reset=earliest (failOnDataLoss=false) after OFFSET_OUT_OF_RANGE:
                    # the partition was truncated below the range; what it holds now is not in it.
                    data = [m for m in data if m.offset() >= rng.from_offset]
                if data and data[-1].offset() >= until:
                    offsets = [m.offset() for m in data]
                    data = data[:bisect_left(offsets, until)]
                    done = True
                if data:
                    next_offset = data[-1].offset() + 1
                    pending.extend(data)
            if next_offset >= until:
                done = True
            if len(pending) >= batch_size or (done and pending):
                yield pending
                pending = []
    finally:
        consumer.close()


def read_to_end(config: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 60.0,
                upper: Mapping[TP, int] | None = None, batch_size: int = 10_000) -> Iterator[list[Message]]:
    """Every data record of ``topics`` from the earliest retained offset up to each partition's end
    as it is when the read begins (or ``upper``, when given and lower), from all partitions at once.

    A producer that keeps writing does not keep the read going: each partition ends at its
    snapshot end, at the first record or EOF at or past it. ``timeout_s`` is how long the read may
    go without progress (not its total length), so a large topic is never cut short.
    """
    with KafkaOffsetClient(config, timeout_s) as client:
        tps = client.partitions(topics)
        earliest = client.earliest_offsets(tps)
        ends = client.end_offsets(tps)
    if upper is not None:
        ends = {tp: min(end, upper.get(tp, 0)) for tp, end in ends.items()}
    pending = {tp for tp in tps if ends[tp] > earliest[tp]}
    if not pending:
        return
    consumer = Consumer({**config, "enable.partition.eof": True})
    consumer.assign(_tp_list(sorted(pending), earliest))
    last_progress = time.monotonic()
    try:
        while pending:
            msgs = consumer.consume(num_messages=batch_size, timeout=_POLL_S)
            if msgs:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout_s:
                raise KafkaTimeoutError(
                    f"no records from Kafka for {timeout_s:.0f}s while reading "
                    + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
                    + f" to its end ({config.get('bootstrap.servers')})")
            out: list[Message] = []
            for m in msgs:
                topic = m.topic()
                err = m.error()
                if topic is None:
                    if err is not None and (err.fatal() or not _retriable(err)):
                        raise KafkaException(err)
                    continue
                tp = TP(topic, m.partition())
                if tp not in pending:
                    continue
                if err is not None:
                    if err.code() == EOF:
                        if m.offset() >= ends[tp]:
                            pending.discard(tp)
                            consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                        continue
                    if err.code() in _OUT_OF_RANGE:
                        raise DataLossError(f"{tp.topic}[{tp.partition}]: records were deleted while being read "
                                            f"({err}); read again")
                    if err.fatal() or not _retriable(err):
                        raise KafkaException(err)
                    log.warning("Kafka client error while reading %s: %s", tp, err)
                    continue
                if m.offset() >= ends[tp]:
                    pending.discard(tp)
                    consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                    continue
                out.append(m)
                if m.offset() >= ends[tp] - 1:
                    pending.discard(tp)
                    consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
            if out:
                yield out
    finally:
        consumer.close()


def _end_below_range(where: str, end: int, fail_on_data_loss: bool) -> None:
    msg = f"data loss reading {where}: the partition ends at {end}, before the end of the range"
    if fail_on_data_loss:
        raise DataLossError(msg + ". Set failOnDataLoss=false to continue.")
    log.warning("%s; failOnDataLoss=false, skipping the rest of the range", msg)
