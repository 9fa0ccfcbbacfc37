"""One Kafka transaction at a time, through one transactional producer: begin, send, pre-commit, commit.

Why its own module: the error handling of transactions is the delicate part, and it is the same
for a batch and for a replay's rows. Following the Kafka clients' rules (confluent-kafka's
transactions example, KIP-98): ``init_transactions`` first, once per producer, which fences older
producers with the same ``transactional.id`` and ends their open transaction; a retriable error
of the commit is retried; an abortable one aborts and raises ``SinkWriteError`` (nothing of the
call is visible to ``read_committed`` readers; the caller may retry); a fatal one (fenced by a newer
producer of the same id) closes the producer and raises ``SinkWriteError`` saying so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from rewind.sink.errors import SinkConnectionError, SinkWriteError

log = logging.getLogger(__name__)

__all__ = ["Record", "Transactions"]

TIMEOUT_S = 60.0


class Record(NamedTuple):
    topic: str
    key: bytes
    value: bytes | None  # None: a tombstone (a delete, rewind.sink.deletes)
    headers: list[tuple[str, str | bytes | None]]


class Transactions:
    """A transactional producer (its settings given, ``transactional.id`` included), initialised at once."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.transactional_id = str(config["transactional.id"])
        self._errors: list[KafkaError] = []
        self._producer: Producer | None = Producer({**config, "error_cb": self._errors.append})
        try:
            self._producer.init_transactions(TIMEOUT_S)
        except KafkaException as exc:
            self._producer = None
            raise SinkConnectionError(f"Kafka transactions for {self.transactional_id!r} could not start on "
                                      f"{config.get('bootstrap.servers')}: {exc.args[0]} (is the broker reachable, "
                                      "and may this principal use transactional ids?)") from exc

    def run(self, records: Sequence[Record], what: str, before_commit: Callable[[], None] | None = None,
            offsets: Sequence[Any] = (), group_metadata: Any = None) -> None:
        """Send ``records`` in one transaction and commit it; raise SinkWriteError with nothing committed.

        ``offsets`` (``TopicPartition``s) are committed to the consumer group of ``group_metadata`` in
        the same transaction (``send_offsets_to_transaction``): both or neither."""
        p = self._producer
        if p is None:
            raise SinkWriteError(f"{what}: this producer ({self.transactional_id}) was fenced or closed; "
                                 "open the sink again")
        failed: list[str] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None and len(failed) < 5:
                failed.append(f"{msg.topic()}: {err.str()}")

        try:
            p.begin_transaction()
            for r in records:
                while True:
                    try:
                        p.produce(r.topic, r.value, r.key, headers=r.headers, on_delivery=delivered)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        p.poll(0.05)
            left = p.flush(TIMEOUT_S)  # pre-commit: every record acknowledged inside the open transaction
            if left or failed:
                raise SinkWriteError(f"{what}: {left} records not acknowledged, failures: {failed}")
            if offsets and group_metadata is not None:
                p.send_offsets_to_transaction(list(offsets), group_metadata, TIMEOUT_S)
            if before_commit is not None:
                before_commit()
            self._commit(what)
        except KafkaException as exc:
            self._abort_or_drop(exc.args[0], what)
        except SystemError as exc:
            # confluent-kafka runs a delivery callback while produce()'s KafkaException is pending (a producer
            # fenced by a newer one of its transactional id): that KafkaException is the error to handle
            if not isinstance(exc.__cause__, KafkaException):
                raise
            self._abort_or_drop(exc.__cause__.args[0], what)
        except SinkWriteError:
            self._abort(what)
            raise

    def _commit(self, what: str) -> None:
        assert self._producer is not None
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                self._producer.commit_transaction(TIMEOUT_S)
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    log.warning("%s: commit retried after %s", what, err)
                    continue
                raise

    def _abort_or_drop(self, err: KafkaError, what: str) -> None:
        fenced = err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
        if not (fenced or err.fatal()):
            self._abort(what)
            raise SinkWriteError(f"{what}: the transaction was aborted ({err.str()}); nothing of it is visible "
                                 "to read_committed readers")
        self.close()
        if fenced:
            raise SinkWriteError(f"{what}: fenced: another driver of this stream started transactions with the same "
                                 f"id ({self.transactional_id}); this one stops writing (it is a zombie)")
        raise SinkWriteError(f"{what}: the Kafka producer failed ({err.str()}); nothing of the transaction was "
                             "committed")

    def _abort(self, what: str) -> None:
        if self._producer is None:
            return
        try:
            self._producer.abort_transaction(TIMEOUT_S)
        except KafkaException as exc:
            log.error("%s: abort failed (%s); the transaction ends after transaction.timeout.ms", what, exc)
            self.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
