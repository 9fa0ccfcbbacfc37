"""What keeps a replay safe before it touches anything: its id, its lock, its shadow tables' names.

- The replay id names a directory, S3 keys and (in shadow mode) SQL tables, so it is checked
  against one strict pattern: no ``..``, no ``/``, no quotes, no upper case.
- One replay per stream at a time: an exclusive, non-blocking ``fcntl.flock`` on
  ``<status_dir>/<stream>.replay.lock``. The kernel drops the lock when its process dies, so a
  crashed replay never leaves a stale lock behind; the file's JSON only describes the holder
  (id, pid, host, since when, range) for the refusal message. The Airflow DAG adds a pool on
  top; the lock is what holds when someone runs ``rewind replay run`` by hand beside it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rewind.platform.lockfile import describe_holder, held_by_another, read_description, release
from rewind.replay.problems import Problem, ReplayRefused, refuse

MODES = ("into-sink", "shadow")
#: The longest spec table name a shadow prefix must leave room for (``rewind_batches``).
_LONGEST_TABLE = 14
_SQL_NAME_MAX = 63


def new_replay_id(now: datetime | None = None) -> str:
    """``20261122t030000z-1a2b``: sortable by time, unique enough for one stream."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y%m%dt%H%M%Sz") + "-" + secrets.token_hex(2)


def check_replay_id(replay_id: str) -> str:
    """The id, or ReplayRefused saying what is allowed (it becomes a path, S3 keys and table names)."""
    from rewind.safe_names import UnsafeName
    from rewind.safe_names import check_replay_id as _check

    try:
        _check(replay_id)
    except UnsafeName:
        raise refuse("bad_replay_id", f"replay id {replay_id!r} is not allowed: use 1-63 characters of a-z, 0-9, "
                                      "'-' and '_', starting with a letter or digit (e.g. fix-2026-11-22); it "
                                      "names a directory, S3 keys and shadow tables")
    return replay_id


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise refuse("bad_mode", f"mode {mode!r} is unknown: use 'into-sink' (restore into the stream's tables, "
                                 "idempotently) or 'shadow' (separate tables, for comparison)")
    return mode


def shadow_prefix(table_prefix: str, replay_id: str) -> str:
    """``<prefix>shadow_<id>_`` as a SQL-safe prefix (``-`` becomes ``_``); shortened with a hash of
    the id when the full name would not fit PostgreSQL's 63-byte identifiers, or when the
    ``-``/``_`` mapping could make two ids share tables."""
    safe = replay_id.replace("-", "_")
    room = _SQL_NAME_MAX - len(table_prefix) - len("shadow_") - 1 - _LONGEST_TABLE
    if safe != replay_id or len(safe) > room:
        digest = hashlib.sha256(replay_id.encode()).hexdigest()[:6]
        safe = f"{safe[:max(1, room - 7)].rstrip('_')}_{digest}"
    return f"{table_prefix}shadow_{safe}_"


def lock_path(status_dir: str | Path, stream: str) -> Path:
    from rewind.paths import replay_lock_path

    return replay_lock_path(status_dir, stream)


@dataclass
class ReplayLock:
    """A held replay lock; release it (or use ``with``) when the replay ends."""

    path: Path
    holder: dict[str, Any]
    _file: IO[str] | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            release(file)

    def __enter__(self) -> "ReplayLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ReplayBusy(ReplayRefused):
    """Another replay of the same stream holds the lock; ``holder`` is what it wrote there."""

    def __init__(self, problems: Any, holder: dict[str, Any] | None = None) -> None:
        super().__init__(problems)
        self.holder = holder or {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems, self.holder))


def acquire_lock(status_dir: str | Path, stream: str, replay_id: str, range_doc: Any = None,
                 mode: str | None = None) -> ReplayLock:
    """Take the stream's replay lock now or raise ReplayBusy naming the running replay."""
    path = lock_path(status_dir, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        holder = read_description(path)
        raise ReplayBusy([Problem("replay_running", busy_message(stream, holder, path))], holder) from None
    holder = {"replay_id": replay_id, "stream": stream, "mode": mode, "pid": os.getpid(),
              "host": socket.gethostname(), "started_at": datetime.now(UTC).isoformat(),
              "started_at_epoch": time.time(), "range": range_doc}
    describe_holder(f, holder)
    return ReplayLock(path, holder, f)


def busy_message(stream: str, holder: dict[str, Any], path: Path) -> str:
    if not holder:
        who = "another replay (it has not described itself yet)"
    else:
        who = (f"replay {holder.get('replay_id')!r} ({holder.get('mode') or 'mode unknown'}), running since "
               f"{holder.get('started_at')} as pid {holder.get('pid')} on {holder.get('host')}")
    return (f"stream {stream!r} is already being replayed by {who}. Only one replay per stream runs at a time: "
            f"wait for it to finish (its report names the outcome) and run this one again; if that process is "
            f"gone the lock is free already (the lock file {path} only describes the holder)")


def current_holder(status_dir: str | Path, stream: str) -> dict[str, Any] | None:
    """Who holds the stream's replay lock now (None: nobody), without taking it for long."""
    path = lock_path(status_dir, stream)
    return (read_description(path) or {"replay_id": None}) if held_by_another(path) else None
