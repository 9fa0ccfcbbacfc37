"""The storage contract: files under one root, a local directory or an S3 prefix, named by relative paths.

Why one interface: a checkpoint, a savepoint store, a quarantine and a stream's pointer each live either on
local disk or in S3 (``s3a://`` for what Spark writes, ``s3://`` for what boto3 does), and every operation on
them (inspect, repair, savepoint, restore, point) used to be written twice, once per place. They are written
once now, over ``Storage``; ``rewind.storage.local`` and ``rewind.storage.s3`` are the two backends and
``rewind.storage.location.open_storage`` picks one for a path or URL.

The contract (what every backend keeps):

- A path is relative to the root, ``/``-separated, never starting with ``/`` (``offsets/7``,
  ``savepoints/demo/ID/manifest.json``); ``""`` is the root itself. Directories exist only as far as files
  are under them (S3 has none; a local backend makes them as files are written).
- Reads: ``list_dir`` lists names one level down (cheap: no sizes), ``list_files`` every file below with its
  size and time, ``exists``/``size`` ask about one file, ``read_bytes`` and ``digest`` read one to its end.
  A missing file raises ``FileNotFoundError`` (``size`` answers None); every content read adds one to
  ``reads`` (the inspection tests prove with it that work does not grow with a stream's age).
- ``write_bytes`` replaces a file atomically: a reader sees the old bytes or the new, never half of them.
- ``copy`` goes to any storage and returns the size and SHA-256 of the bytes copied, read in the same pass
  as the copy or proven equal to them (inside S3 the copy is server-side); ``receive`` writes a file from an
  open stream; ``move`` deletes its source only after the copy is complete.
- ``build_tree`` creates a whole tree at the root, or nothing.
- Errors of the storage itself (S3 unreachable, refused) are ``rewind.errors.Failed`` that name where.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import IO

from rewind.errors import Failed

__all__ = ["CHUNK", "CopyMismatch", "Digest", "FileInfo", "Progress", "Storage", "sha256_of"]

CHUNK = 1 << 20
#: Called with the number of bytes just copied (a progress bar's ``update``).
Progress = Callable[[int], object]


class CopyMismatch(Failed, RuntimeError):
    """A copy is not what its source was; the message names both."""


@dataclass(frozen=True)
class Digest:
    """What a read of one file found: its size and SHA-256 (hex)."""

    size: int
    sha256: str


@dataclass(frozen=True)
class FileInfo:
    """One file of a listing: its path relative to the root, its size and when it was last written (UTC)."""

    path: str
    size: int
    modified: datetime


def sha256_of(fh: IO[bytes]) -> Digest:
    """Size and SHA-256 of an open binary file, read to its end in 1 MiB chunks."""
    h, size = hashlib.sha256(), 0
    while chunk := fh.read(CHUNK):
        h.update(chunk)
        size += len(chunk)
    return Digest(size, h.hexdigest())


class Storage(abc.ABC):
    """Files under one root (see the module docstring for the contract)."""

    #: The root, for messages: a directory, or ``s3://bucket/prefix/`` (``s3a://`` for a stream's checkpoint).
    location: str
    #: Content reads so far (``read_bytes``, ``digest``).
    reads: int = 0

    @abc.abstractmethod
    def url(self, rel: str = "") -> str:
        """Where ``rel`` is, for messages and for the caller to hand on (a path, or an ``s3://`` URL)."""

    @abc.abstractmethod
    def list_dir(self, rel: str = "") -> tuple[list[str], list[str]]:
        """(subdirectories, files) directly under ``rel``, names only; ``([], [])`` when there is nothing."""

    @abc.abstractmethod
    def list_files(self, rel: str = "") -> list[FileInfo]:
        """Every file below the directory ``rel`` (paths relative to the root), with sizes and times."""

    @abc.abstractmethod
    def exists(self, rel: str = "") -> bool:
        """Whether the file ``rel`` exists; for ``""``, whether the root does (a directory, or a prefix that
        holds an object)."""

    @abc.abstractmethod
    def size(self, rel: str) -> int | None:
        """The file's size in bytes; None when it does not exist."""

    @abc.abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """The file's content; FileNotFoundError when it does not exist."""

    @abc.abstractmethod
    def digest(self, rel: str) -> Digest:
        """The file read to its end: its size and SHA-256; FileNotFoundError when it does not exist."""

    @abc.abstractmethod
    def write_bytes(self, rel: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Replace the file atomically (local: a temporary file fsynced and renamed; S3: one PUT).
        ``content_type`` is what S3 serves it as (a proof's HTML pages); a local file has none."""

    @abc.abstractmethod
    def receive(self, fh: IO[bytes], rel: str, progress: Progress | None = None) -> Digest:
        """Write the file from an open binary stream read to its end (atomic, as ``write_bytes``); the size and
        SHA-256 of what was written. S3 wants a stream it can rewind (a local file): it is hashed first."""

    @abc.abstractmethod
    def copy(self, rel: str, dest: Storage, dest_rel: str, *, source: Digest | None = None,
             progress: Progress | None = None) -> Digest:
        """Copy the file to ``dest_rel`` of ``dest`` (any backend); the size and SHA-256 of what was copied.

        Local to anywhere: the file is hashed and sent through one open descriptor, so a concurrent delete
        cannot split the two. Inside S3: a server-side copy pinned to the version that was hashed and proven
        equal to it (``CopyMismatch`` otherwise); ``source``, when the caller knows the file's digest (a
        savepoint's manifest), is checked instead of reading the source first. FileNotFoundError when the
        source does not exist."""

    def move(self, rel: str, dest: Storage, dest_rel: str) -> None:
        """Move the file: a copy as ``copy`` makes it, then the source deleted (a local backend renames
        instead, inside one file system). Nothing is deleted that was not copied."""
        self.copy(rel, dest, dest_rel)
        self.delete([rel])

    @abc.abstractmethod
    def delete(self, rels: Iterable[str]) -> None:
        """Delete these files (a missing one is fine)."""

    @abc.abstractmethod
    def build_tree(self, fill: Callable[[Storage], None]) -> None:
        """Create a new tree at the root, whole or not at all: ``fill`` writes it into the storage it is handed.

        Local: a hidden sibling directory, renamed to the root once ``fill`` returns (the root must be absent
        or an empty directory). S3, which renames nothing: the root itself, so its files must not be trusted
        until the caller's own commit point (a stream's pointer moves last). When ``fill`` raises, what it
        wrote is removed and the error goes on."""

    def check(self) -> None:  # noqa: B027 - a default: a local directory always answers
        """Fail fast, naming where, unless the storage answers (S3: the bucket exists and can be read)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location})"
