"""What librdkafka's errors mean to Rewind: transient (wait, it passes), rejected credentials, or the reason to show.

Why the look-ups watch librdkafka's ``error_cb``: a wrong SASL password is not a failed request
but a connection that keeps failing to authenticate, so without it a look-up retried for its whole
timeout and then blamed an unreachable broker ("Broker transport failure"). They now stop at the
first authentication error and say which option to fix (``raise_if_rejected``).

Why a list of transient errors: a broker crash or a leader change fails requests for a few
seconds with codes librdkafka does not all mark retriable; look-ups and reads ride through them
(``retriable``) and give up only on their own deadline.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError

from rewind.kafka.types import KafkaAuthenticationError

#: Errors a broker crash or a leader change causes, gone once leadership has moved. _DESTROY_BROKER:
#: librdkafka dropped its handle of a broker that left the cluster's metadata (a killed node) while
#: a request to it was in flight (seen from the lag probe when a 3-node cluster lost a leader).
_RETRIABLE = {KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
              KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._WAIT_COORD, KafkaError._ALL_BROKERS_DOWN,
              KafkaError.REQUEST_TIMED_OUT, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
              KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR, KafkaError.KAFKA_STORAGE_ERROR,
              KafkaError._DESTROY_BROKER}

#: librdkafka's codes for rejected credentials; _SSL: a failed TLS handshake (certificates).
_AUTH_FAILED = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
_TLS_FAILED = {KafkaError._SSL}


def retriable(err: Any) -> bool:
    """Whether ``err`` (a ``KafkaError``, or anything else: no) passes once the cluster settles."""
    return isinstance(err, KafkaError) and (err.code() in _RETRIABLE or err.retriable())


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


def last_reason(errors: list[KafkaError], fallback: Any) -> str:
    """The most telling error for a message: the last one that is not librdkafka's summary
    ("1/1 brokers are down"), else the failed request's own."""
    told = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    return told[-1].str() if told else (fallback.str() if isinstance(fallback, KafkaError) else str(fallback))
