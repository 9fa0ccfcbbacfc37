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

from rewind.checkpoints.store import is_s3_url, parse_s3_url
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
    if is_s3_url(spec.checkpoint):
        return _read_s3_pointer(spec)
    path = pointer_path(spec)
    try:
        return _entries(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PointerError(f"checkpoint pointer {path} is unreadable ({exc}); fix or remove it (without it the "
                           f"stream uses {spec.checkpoint})") from exc


def _entries(text: str) -> list[PointerEntry]:
    doc = json.loads(text)
    return [PointerEntry(**e) for e in [*doc.get("history", []), doc["active"]]]


def s3_pointer_key(checkpoint: str) -> tuple[str, str]:
    """(bucket, key) of the pointer of a checkpoint in S3: ``s3a://b/cp/demo`` -> ``(b, cp/demo.active.json)``,
    the object beside the checkpoint's prefix, as ``<checkpoint>.active.json`` is beside a local one."""
    bucket, prefix = parse_s3_url(checkpoint)
    return bucket, f"{prefix.rstrip('/')}.active.json"


def _read_s3_pointer(spec: StreamSpec) -> list[PointerEntry]:
    from rewind.s3 import s3_client

    bucket, key = s3_pointer_key(spec.checkpoint)
    client = s3_client()
    try:
        text = client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    except client.exceptions.NoSuchKey:
        return []
    try:
        return _entries(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise PointerError(f"checkpoint pointer s3://{bucket}/{key} is unreadable ({exc}); fix or remove it "
                           f"(without it the stream uses {spec.checkpoint})") from exc


def active_checkpoint(spec: StreamSpec) -> str:
    """The checkpoint location the stream must use: the pointer's, else the registry's. A checkpoint in S3
    keeps its pointer in S3 (``s3_pointer_key``), so every host that runs or inspects the stream reads one."""
    if "://" in spec.checkpoint and not is_s3_url(spec.checkpoint):
        return spec.checkpoint
    entries = read_pointer(spec)
    return entries[-1].path if entries else spec.checkpoint


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
    text = json.dumps(pointer_document(entries), indent=1)
    if is_s3_url(spec.checkpoint):
        from rewind.s3 import s3_client

        bucket, key = s3_pointer_key(spec.checkpoint)
        s3_client().put_object(Bucket=bucket, Key=key, Body=text.encode(), ContentType="application/json")
        return
    target = pointer_path(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
