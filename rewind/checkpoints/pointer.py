"""Which checkpoint a stream runs on: a small JSON pointer file next to ``spec.checkpoint``.

Why a pointer instead of copying over the old checkpoint: a restore must never destroy
the checkpoint it replaces (it may be the only good copy if the savepoint turns out to
be the wrong one), so a restore writes a fresh directory and moves the pointer. The file
keeps every earlier pointer (newest last), so an operator can see and undo each move.

The pointer is ``<checkpoint>.active.json`` wherever the checkpoint is: beside a local directory, or the
object beside an ``s3a://`` prefix, so every host that runs or inspects the stream reads the same one. This
module is also the one place that opens a stream's active checkpoint (``open_active_checkpoint``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rewind import paths
from rewind.errors import Refused
from rewind.registry import StreamSpec
from rewind.storage.base import Storage
from rewind.storage.location import open_file, open_storage
from rewind.storage.s3_config import is_s3_url

#: Pointer entries kept in the history (older ones are dropped, the directories stay on disk).
HISTORY_LIMIT = 100


class PointerError(Refused, ValueError):
    """The pointer file exists but cannot be read; the message names it."""


@dataclass(frozen=True)
class PointerEntry:
    path: str
    reason: str
    at: float
    restored_from: str | None = None  # savepoint id


def pointer_path(spec: StreamSpec) -> Path:

    return paths.pointer_path(spec.checkpoint)


def _pointer_file(spec: StreamSpec) -> tuple[Storage, str]:
    """Where the pointer is: ``<checkpoint>.active.json``, local or in S3 (``s3a://b/cp/demo`` ->
    ``s3a://b/cp/demo.active.json``)."""
    return open_file(f"{spec.checkpoint.rstrip('/')}.active.json")


def read_pointer(spec: StreamSpec) -> list[PointerEntry]:
    """Every pointer written so far, oldest first ([] when the stream never moved)."""
    folder, name = _pointer_file(spec)
    try:
        text = folder.read_bytes(name).decode()
        doc = json.loads(text)
        return [PointerEntry(**e) for e in [*doc.get("history", []), doc["active"]]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PointerError(f"checkpoint pointer {folder.url(name)} is unreadable ({exc}); fix or remove it (without "
                           f"it the stream uses {spec.checkpoint})") from exc


def active_checkpoint(spec: StreamSpec) -> str:
    """The checkpoint location the stream must use: the pointer's, else the registry's."""
    if "://" in spec.checkpoint and not is_s3_url(spec.checkpoint):
        return spec.checkpoint
    entries = read_pointer(spec)
    return entries[-1].path if entries else spec.checkpoint


def open_active_checkpoint(spec: StreamSpec) -> Storage:
    """The stream's active checkpoint (``active_checkpoint``), opened where it is: the one way every reader
    (the driver's first status, the supervisor, the watermark of the proofs) gets at it."""
    return open_storage(active_checkpoint(spec))


def pointer_document(entries: list[PointerEntry]) -> dict[str, Any]:
    """The file's JSON: the active entry and the bounded history before it."""
    return {"active": asdict(entries[-1]), "history": [asdict(e) for e in entries[:-1][-HISTORY_LIMIT:]]}


def point_to(spec: StreamSpec, path: str | Path, reason: str, restored_from: str | None = None) -> None:
    """Make ``path`` (a directory, or an ``s3a://`` prefix) the stream's checkpoint: atomic (a local pointer is
    written, fsynced and renamed; one in S3 is a single PUT)."""
    entries = read_pointer(spec)
    if not entries:  # record where the stream ran before, so the first move can be undone too
        entries = [PointerEntry(spec.checkpoint, "registry default", time.time())]
    where = str(path).rstrip("/") if "://" in str(path) else str(Path(path).resolve())
    entries.append(PointerEntry(where, reason, time.time(), restored_from))
    folder, name = _pointer_file(spec)
    folder.write_bytes(name, json.dumps(pointer_document(entries), indent=1).encode(), "application/json")
