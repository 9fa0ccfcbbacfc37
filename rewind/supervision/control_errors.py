"""The errors of launching and stopping a stream (``rewind.supervision.process_control``, and ``cluster_control`` for a
driver YARN runs): apart, so that both raise them and neither imports the other back."""

from __future__ import annotations

from rewind.errors import Failed, Refused


class StreamControlError(Failed, RuntimeError):
    """A stop or launch did not happen; the message says what is left running or where the log is."""


class DriverRunning(Refused):
    """A launch was refused: a driver of the stream is alive and holds its checkpoint (two drivers on
    one checkpoint corrupt it). Stop it first, or let the supervisor do it."""


class StreamFailed(StreamControlError):
    """A (re)launched stream failed: its query raised (``query_failed``) or its process exited
    (``process_gone``) before it got where it was asked to."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(detail)
        self.cause = cause
