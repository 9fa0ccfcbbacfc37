"""The sink's errors: refused (bad input, nothing written) or failed (the database broke, rolled back).

Why two families: the batch writer, the replay job and the command line must tell "fix the rows,
the table specs or the URL" (no retry helps) from "the database went away or rejected the write"
(the transaction was rolled back and nothing of the call is kept: a retry may help). They are
``rewind.errors.Refused`` and ``rewind.errors.Failed``; the refusal keeps ``ValueError`` and the
failure ``RuntimeError`` as a second base, so code that caught those before still does.
"""

from __future__ import annotations

from rewind.errors import Failed, Refused, SinkRefused

__all__ = ["TOO_LARGE", "TOO_LARGE_FIX", "SinkConnectionError", "SinkError", "SinkFenced", "SinkRefused",
           "SinkWriteError"]

#: The reason a Kafka sink gives the dead letter of a row too large for Kafka (its record is not lost: the proofs
#: count it as landed there, ``too_large``).
TOO_LARGE = "too_large_for_kafka"
#: What a Kafka sink says after the reason when such a row cannot be a dead letter (nothing is written).
TOO_LARGE_FIX = ("; the row carries no Kafka coordinates to dead-letter it by, so nothing was written. Raise the sink "
                 "option kafka.message.max.bytes (and the topic's max.message.bytes) or make the row smaller")



class SinkError(Failed, RuntimeError):
    """Base class of the sink's runtime errors (bad input raises SinkRefused instead)."""


class SinkConnectionError(SinkError):
    """The database cannot be reached; the message names the URL with the password masked."""


class SinkWriteError(SinkError):
    """The database rejected a write; the transaction was rolled back, nothing of the call is kept."""


class SinkFenced(Refused, RuntimeError):
    """A batch of a driver whose lease epoch was taken over (a zombie): refused in its own transaction,
    nothing written. Not a ``SinkRefused``: its rows are fine, their writer is not. ``newer``: the epoch
    the sink holds, when the sink knows it."""

    def __init__(self, message: str, newer: int | None = None) -> None:
        super().__init__(message)
        self.newer = newer
