"""The words every module of ``rewind.kafka`` shares: a partition, its offsets, a range, and the errors.

Why a module of its own: the options, the pure decisions, the look-ups, the readers, event-time
alignment and the source all speak of ``TP`` and ``Offsets`` and raise the same errors; kept here,
none of them needs another to say so (``offsets.py`` and ``alignment.py`` used to import each
other for exactly this). Nothing here needs PySpark or confluent-kafka.

Conventions (the same as Spark's built-in Kafka source):
- an offset is the offset of the *next* record to read; a range is ``[from, until)``;
- in option JSON, ``-2`` means earliest and ``-1`` means latest;
- offsets recorded in Spark's offset log look like ``{"topic": {"0": 42, "1": 17}}`` with string
  partition keys, topics and partitions sorted, so the same offsets always serialize to the same
  JSON (Spark compares offsets by their JSON text).

The errors are ``rewind.errors`` classes (the command line's exit code and Airflow's retry follow
from them) and keep their builtin base, so ``except ValueError`` and the like still catch them:

| error | kind | raised when |
|---|---|---|
| ``KafkaSourceOptionError`` | Refused, ValueError | an option of the source is missing or unusable |
| ``UnknownTopicError`` | Refused, ValueError | a subscribed topic does not exist |
| ``KafkaClientConfigError`` | Refused, ValueError | a ``kafka.*`` option has no librdkafka equivalent |
| ``KafkaAuthenticationError`` | Refused, ``KafkaUnreachable`` | the broker rejected the credentials or TLS handshake |
| ``KafkaUnreachable`` | Failed, ConnectionError | no broker answered |
| ``KafkaTimeoutError`` | Failed, TimeoutError | a look-up or a read got no answer in time |
| ``DataLossError`` | Failed, RuntimeError | records the query should read are gone |
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from rewind.errors import EXIT_REFUSED, Failed, Refused

EARLIEST = -2
LATEST = -1


class TP(NamedTuple):
    """A topic-partition; hashable and sortable so offset maps have one canonical order."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Offsets = dict[TP, int]


@dataclass(frozen=True)
class OffsetRange:
    """One Kafka partition's records ``[from_offset, until_offset)``: one Spark input partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        """Offsets in the range; records may be fewer (transaction markers take offsets)."""
        return self.until_offset - self.from_offset


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class KafkaSourceOptionError(Refused, ValueError):
    """An option of the ``rewind_kafka`` source is missing or has a value it cannot use."""


class UnknownTopicError(Refused, ValueError):
    """A subscribed topic does not exist on the cluster."""


class KafkaClientConfigError(Refused, ValueError):
    """A ``kafka.*`` option cannot be carried over to librdkafka; the message says what to set."""


class KafkaUnreachable(Failed, ConnectionError):
    """No broker of the bootstrap list answered; the message names the list and what to check."""


class KafkaAuthenticationError(Refused, KafkaUnreachable):
    """The broker answered but rejected the client's credentials (or its TLS handshake failed).

    A refusal (exit 3, no retry: the options must change), and still a ``KafkaUnreachable`` so
    that callers catching "could not talk to Kafka" keep catching it.
    """

    exit_code = EXIT_REFUSED
    retry = False


class KafkaTimeoutError(Failed, TimeoutError):
    """The broker did not answer a look-up or a read within the configured time."""


class DataLossError(Failed, RuntimeError):
    """Records the query should read are gone (retention, truncation, topic recreated or deleted)."""


# ---------------------------------------------------------------------------------------------
# Offset maps <-> JSON
# ---------------------------------------------------------------------------------------------


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """The JSON-safe, canonically ordered form recorded in Spark's offset log."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(obj: Any, what: str = "offset") -> Offsets:
    """Parse ``{"topic": {"0": 42}}`` (a dict or its JSON text) into an offset map."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as exc:
            raise KafkaSourceOptionError(
                f"{what}: not valid JSON ({exc.msg}); expected "
                '{"topic": {"0": 42, "1": -2}}') from exc
    if not isinstance(obj, dict):
        raise KafkaSourceOptionError(
            f'{what}: expected a JSON object like {{"topic": {{"0": 42}}}}, got {type(obj).__name__}')
    out: Offsets = {}
    for topic, parts in obj.items():
        if not isinstance(topic, str) or not topic:
            raise KafkaSourceOptionError(f"{what}: topic names must be non-empty strings, got {topic!r}")
        if not isinstance(parts, dict):
            raise KafkaSourceOptionError(
                f'{what}: topic {topic!r} must map partition numbers to offsets, like {{"0": 42}}')
        for part, value in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise KafkaSourceOptionError(
                    f"{what}: partition {part!r} of topic {topic!r} is not an integer") from None
            if partition < 0:
                raise KafkaSourceOptionError(f"{what}: partition {part!r} of topic {topic!r} is negative")
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaSourceOptionError(
                    f"{what}: offset of {topic!r} partition {partition} must be an integer, got {value!r}")
            out[TP(topic, partition)] = value
    return out


def offsets_json_text(offsets: Mapping[TP, int]) -> str:
    """Compact canonical JSON text of an offset map (for logs, errors and comparisons)."""
    return json.dumps(offsets_to_json(offsets), separators=(",", ":"))
