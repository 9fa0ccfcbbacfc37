"""The control store: the documents two processes of Rewind must agree on, for one stream.

Why an abstract class: a stream's status and heartbeat, the supervisor's failures and verdict, the
proof cursor, the replay guard, the standby and the driver lease were JSON files in a local
``status_dir``; a worker on another host saw none of them. Every reader and writer now goes
through this interface, and where the documents live is a deployment choice
(``rewind.control.location``): a directory for one host (the files keep their old names), S3 with
conditional writes when the stream's workers are many.

The contract (what every implementation keeps):

- A document is a JSON object stored under a short *name* (``status``, ``lease``, ...) of one
  stream. ``read`` returns it with its *version*, an opaque string that changes whenever the
  document does (S3: the ETag; a directory: a hash of the bytes).
- ``create`` writes only if the name is absent; ``replace`` only if the stored version is the one
  given. Either returns the new version, or None when the condition failed: nothing was written.
  These two are atomic against every other writer of the same store, on any host: two racing
  writers never both succeed. The lease and every read-modify-write (``update``) rely on it.
- ``write`` is unconditional (a document only its owner writes, e.g. a history sample).
- Errors of the storage itself (unreachable, denied) raise ``ControlStoreError``, naming where.
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewind.errors import Failed

__all__ = ["ControlStore", "ControlStoreError", "UpdateConflict", "Versioned", "encode", "update"]


class ControlStoreError(Failed):
    """The control store could not be read or written; the message names where it is."""


class UpdateConflict(ControlStoreError):
    """A read-modify-write lost the race more times than it retries (many writers at once)."""


@dataclass(frozen=True)
class Versioned:
    """A document and the version it was read (or written) at."""

    doc: dict[str, Any]
    version: str


def encode(doc: dict[str, Any]) -> bytes:
    """The bytes a document is stored as (sorted keys: the same document gives the same bytes)."""
    return json.dumps(doc, indent=1, sort_keys=True, default=str).encode()


class ControlStore(abc.ABC):
    """The documents of one stream (see the module docstring for the contract)."""

    stream: str

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """Where the documents live, for messages (a directory, ``s3://bucket/prefix``)."""

    @abc.abstractmethod
    def read(self, name: str) -> Versioned | None:
        """The document and its version; None when absent. A stored object that is not a JSON
        object reads as an empty document with its version, so a conditional write can replace it."""

    @abc.abstractmethod
    def create(self, name: str, doc: dict[str, Any]) -> str | None:
        """Write ``doc`` only if ``name`` is absent; its version, or None when it exists."""

    @abc.abstractmethod
    def replace(self, name: str, doc: dict[str, Any], version: str) -> str | None:
        """Write ``doc`` only if ``name`` is at ``version``; the new version, or None otherwise."""

    @abc.abstractmethod
    def write(self, name: str, doc: dict[str, Any]) -> str:
        """Write ``doc`` whatever is there; its version."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove ``name`` (absent is fine)."""

    def put(self, name: str, doc: dict[str, Any], version: str | None) -> str | None:
        """``create`` when ``version`` is None, else ``replace``: the write of a read-modify-write."""
        return self.create(name, doc) if version is None else self.replace(name, doc, version)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where})"


def update(store: ControlStore, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None],
           retries: int = 20, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any] | None:
    """Read-modify-write of one document, safe against writers on other hosts.

    ``change`` gets the current document ({} when absent) and returns the new one, or None to
    write nothing. It may run several times (each lost race re-reads), so it must not have side
    effects. Returns what was written (None: nothing)."""
    for attempt in range(retries):
        current = store.read(name)
        new = change(dict(current.doc) if current else {})
        if new is None:
            return None
        if store.put(name, new, current.version if current else None) is not None:
            return new
        sleep(min(0.5, 0.01 * (attempt + 1)))
    raise UpdateConflict(f"{store.where}: {name} changed under {retries} updates in a row; nothing was written")
