"""The errors of savepoints: refused (nothing was changed) or failed (the copy or the data broke).

``SavepointError`` is the base, so a caller that only wants "anything about savepoints" catches
one class; each concrete error is also a ``rewind.errors.Refused`` or ``Failed``, so the command
line's exit code and an Airflow task's retry follow from the class. Every message says what was
left as it was.
"""

from __future__ import annotations

from rewind.errors import Failed, Refused, RewindError


class SavepointError(RewindError):
    """A savepoint operation was refused or failed; the message says why and what was left as it was."""


class SavepointRefused(SavepointError, Refused):
    """The situation or the input is wrong (the stream runs, ``--to`` is not empty, nothing complete
    to copy): nothing was changed, and retrying as is changes nothing."""


class InvalidSavepointId(SavepointRefused, ValueError):
    """The id would not be a safe S3 prefix and directory name."""


class SavepointNotFound(SavepointRefused):
    """No savepoint (no manifest) by that id; the message lists the ones that exist."""


class NothingToSave(SavepointRefused):
    """The stream has not completed a batch yet (no checkpoint, or one without a committed batch):
    a scheduled savepoint has nothing to do, which is not a failure."""


class SavepointCorrupt(SavepointError, Failed):
    """A savepoint's file is missing, truncated or changed; the message names the file."""


class FileVanished(SavepointError, Failed):
    """A checkpoint file disappeared during an online copy (Spark cleaned it up)."""


class RestartFailed(SavepointError, Failed):
    """A savepoint taken with ``--stop`` is complete, but the stream did not start again; the message says
    how to start it."""
