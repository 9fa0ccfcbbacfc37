"""Where a Kafka sink writes and with which client settings: the ``kafka://`` URL and ``sink.options``.

``url: kafka://HOST:PORT[,HOST:PORT...][/TOPIC_PREFIX]`` (``kafka://`` alone: the platform's own
Kafka, as ``--bootstrap`` / ``$REWIND_KAFKA_BOOTSTRAP`` resolve it). Each table of the stream goes
to the topic ``<TOPIC_PREFIX><table_prefix><table>``, the ledger to ``...rewind_batches``.

``options``: ``kafka.*`` are the producer's and readers' client settings (security; Java or
librdkafka names, as for a source); ``topic.partitions`` and ``topic.replication.factor`` size the
topics the sink creates when they are missing (3 and 1 by default).

Why checked at registry load: exactly-once into Kafka rests on transactions, so a setting that
turns them off or weakens them is refused before anything runs, naming the option and the fix
(``check_client_options``). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from rewind.sink.errors import SinkRefused

__all__ = ["KafkaSinkTarget", "is_kafka_url", "parse_kafka_sink"]

_TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9._-]{0,200}$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9._\[\]:-]+:\d{1,5}$")
#: librdkafka's own default for ``message.max.bytes``; the brokers' default limit is just above it.
DEFAULT_MAX_RECORD_BYTES = 1_000_000
#: librdkafka's other names for a setting checked below (CONFIGURATION.md: ``request.required.acks``
#: is ``acks``); the sink would otherwise be refused by the producer at its first batch.
ALIASES = {"acks": ("request.required.acks",)}
#: What librdkafka adds to a record's key, value and headers in a batch (a safe upper bound).
RECORD_OVERHEAD_BYTES = 512


@dataclass(frozen=True)
class KafkaSinkTarget:
    """A Kafka sink's brokers (None: the platform's), topic prefix, client settings and topic sizes."""

    bootstrap: str | None
    topic_prefix: str = ""
    client: dict[str, str] = field(default_factory=dict)
    partitions: int = 3
    replication: int = 1

    @property
    def max_record_bytes(self) -> int:
        """The largest record (key + value + headers) the producer sends: ``kafka.message.max.bytes``."""
        return int(self.client.get("message.max.bytes", DEFAULT_MAX_RECORD_BYTES)) - RECORD_OVERHEAD_BYTES


def is_kafka_url(url: str) -> bool:
    return url.strip().lower().startswith("kafka:")


def parse_kafka_sink(url: str, options: Mapping[str, str] | None = None) -> KafkaSinkTarget:
    """The target of a ``kafka://`` sink URL with its options, or SinkRefused naming what to change."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() != "kafka" or parts.query or parts.fragment:
        raise SinkRefused(f"invalid Kafka sink URL {url!r}: expected kafka://HOST:PORT[,HOST:PORT...][/TOPIC_PREFIX] "
                          "(or kafka:// for the platform's Kafka); client settings go in the sink's options")
    hosts = [h for h in parts.netloc.split(",") if h]
    bad = [h for h in hosts if not _HOST_PORT.match(h)]
    if bad or "@" in parts.netloc:
        raise SinkRefused(f"invalid Kafka sink URL {url!r}: {bad[0] if bad else parts.netloc!r} is not HOST:PORT "
                          "(credentials go in the sink's options: kafka.sasl.jaas.config)")
    prefix = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not _TOPIC_PREFIX.match(prefix):
        raise SinkRefused(f"invalid Kafka sink URL {url!r}: topic prefix {prefix!r} may hold only letters, "
                          "digits, '.', '_' and '-'")
    client: dict[str, str] = {}
    sizes = {"topic.partitions": 3, "topic.replication.factor": 1}
    for key, value in (options or {}).items():
        if key in sizes:
            if not str(value).isdigit() or int(value) < 1:
                raise SinkRefused(f"sink option {key!r}: must be a positive integer, not {value!r}")
            sizes[key] = int(value)
        elif key.startswith("kafka."):
            client[key[len("kafka."):]] = str(value)
        else:
            raise SinkRefused(f"unknown sink option {key!r} for a Kafka sink: use kafka.<client setting>, "
                              "topic.partitions or topic.replication.factor")
    check_client_options(client)
    return KafkaSinkTarget(",".join(hosts) or None, prefix, client, sizes["topic.partitions"],
                           sizes["topic.replication.factor"])


def check_client_options(client: Mapping[str, str]) -> None:
    """Refuse client settings that break exactly-once into Kafka, each with the fix."""
    def refuse(key: str, why: str) -> None:
        raise SinkRefused(f"sink option 'kafka.{key}={client[key]}': {why}")

    if "transactional.id" in client:
        refuse("transactional.id", "Rewind derives the transactional id from the stream (rewind.<stream>...), so "
               "that a restarted driver fences the one it replaces; remove the option")
    if str(client.get("enable.idempotence", "true")).lower() != "true":
        refuse("enable.idempotence", "a transactional producer is idempotent; without it a retried send writes "
               "a record twice. Remove the option")
    for acks in ("acks", *ALIASES["acks"]):  # librdkafka takes either name; the producer refuses any but all
        if str(client.get(acks, "all")).lower() not in ("all", "-1"):
            refuse(acks, "transactions need acks=all; remove the option")
    if str(client.get("isolation.level", "read_committed")).lower() != "read_committed":
        refuse("isolation.level", "the sink reads its topics back (proofs, replays) read_committed, or it would "
               "count records of aborted transactions; remove the option")
    if "message.max.bytes" in client and (not client["message.max.bytes"].isdigit()
                                          or int(client["message.max.bytes"]) <= RECORD_OVERHEAD_BYTES):
        refuse("message.max.bytes", f"must be an integer above {RECORD_OVERHEAD_BYTES}")
