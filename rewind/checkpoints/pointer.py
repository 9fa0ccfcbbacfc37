"""Which checkpoint a stream runs on: a small JSON pointer file next to ``spec.checkpoint``.

Why a pointer instead of copying over the old checkpoint: a restore must never destroy
the checkpoint it replaces (it may be the only good copy if the savepoint turns out to
be the wrong one), so a restore writes a fresh directory and moves the pointer. The file
keeps every earlier pointer (newest last), so an operator can see and undo each move.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rewind.errors import Refused
from rewind.registry import StreamSpec

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
    from rewind import paths

    return paths.pointer_path(spec.checkpoint)


def read_pointer(spec: StreamSpec) -> list[PointerEntry]:
    """Every pointer written so far, oldest first ([] when the stream never moved)."""
    path = pointer_path(spec)
    try:
        doc = json.loads(path.read_text())
        return [PointerEntry(**e) for e in [*doc.get("history", []), doc["active"]]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PointerError(f"checkpoint pointer {path} is unreadable ({exc}); fix or remove it (without it the "
                           f"stream uses {spec.checkpoint})") from exc


def active_checkpoint(spec: StreamSpec) -> str:
    """The checkpoint location the stream must use: the pointer's, else the registry's (always the
    registry's for an ``s3a://`` checkpoint: its pointer would need a home in S3, not written yet)."""
    if "://" in spec.checkpoint:
        return spec.checkpoint
    entries = read_pointer(spec)
    return entries[-1].path if entries else spec.checkpoint


def pointer_document(entries: list[PointerEntry]) -> dict[str, Any]:
    """The file's JSON: the active entry and the bounded history before it."""
    return {"active": asdict(entries[-1]), "history": [asdict(e) for e in entries[:-1][-HISTORY_LIMIT:]]}


def point_to(spec: StreamSpec, path: str | Path, reason: str, restored_from: str | None = None) -> None:
    """Make ``path`` the stream's checkpoint (atomic: write, fsync, rename)."""
    entries = read_pointer(spec)
    if not entries:  # record where the stream ran before, so the first move can be undone too
        entries = [PointerEntry(spec.checkpoint, "registry default", time.time())]
    entries.append(PointerEntry(str(Path(path).resolve()), reason, time.time(), restored_from))
    target = pointer_path(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(pointer_document(entries), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
