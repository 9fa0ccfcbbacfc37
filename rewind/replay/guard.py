"""What keeps a replay safe before it touches anything: its id, its lock, its shadow tables' names.

- The replay id names a directory, S3 keys and (in shadow mode) SQL tables, so it is checked
  against one strict pattern: no ``..``, no ``/``, no quotes, no upper case.
- One replay per stream at a time, on any host: a lease named ``replay`` in the stream's control
  store (``rewind.control.leases``: taken with a conditional write, renewed while the replay runs,
  released at its end). A crashed replay's lease lapses after ``REWIND_LEASE_TTL_S``, or at once
  when the next replay runs on the crashed one's host and sees its process gone. The lease says
  who holds it (id, pid, host, since when, range) for the refusal message. The Airflow DAG adds a
  pool on top; the lease is what holds when someone runs ``rewind replay run`` by hand beside it.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rewind.control.directory import DirectoryStore
from rewind.control.lease import SKEW_S
from rewind.control.leases import DriverBusy, LeaseKeeper, acquire, holder_gone, me, read_lease
from rewind.control.store import ControlStore
from rewind.replay.problems import Problem, ReplayRefused, refuse
from rewind.runtime.processes import pid_alive
from rewind.safe_names import UnsafeName
from rewind.safe_names import check_replay_id as _check
from rewind.settings import lease_ttl_s

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


REPLAY = "replay"
#: A control store, or (one host, the tests) the status directory a directory store lives in.
Where = ControlStore | str | Path


def _store(where: Where, stream: str) -> ControlStore:
    return where if isinstance(where, ControlStore) else DirectoryStore(where, stream)


def lock_path(where: Where, stream: str) -> str:
    """Where the replay lease lives, for messages."""
    return f"{_store(where, stream).where} ({REPLAY})"


@dataclass
class ReplayLock:
    """A held replay lease; release it (or use ``with``) when the replay ends."""

    path: str
    holder: dict[str, Any]
    _keeper: LeaseKeeper | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._keeper is not None:
            keeper, self._keeper = self._keeper, None
            keeper.release()

    def __enter__(self) -> "ReplayLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ReplayBusy(ReplayRefused):
    """Another replay of the same stream holds the lease; ``holder`` is what it says of itself."""

    def __init__(self, problems: Any, holder: dict[str, Any] | None = None) -> None:
        super().__init__(problems)
        self.holder = holder or {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems, self.holder))


def acquire_lock(where: Where, stream: str, replay_id: str, range_doc: Any = None,
                 mode: str | None = None) -> ReplayLock:
    """Take the stream's replay lease now or raise ReplayBusy naming the running replay."""

    store = _store(where, stream)
    info = {"replay_id": replay_id, "stream": stream, "mode": mode, "started_at": datetime.now(UTC).isoformat(),
            "started_at_epoch": time.time(), "range": range_doc}
    try:
        got = acquire(store, me("replay"), lease_ttl_s(), 0, name=REPLAY, info=info, quiet=True)
    except DriverBusy:
        holder = current_holder(store, stream) or {}
        raise ReplayBusy([Problem("replay_running", busy_message(stream, holder, lock_path(store, stream)))],
                         holder) from None
    assert got is not None
    lease, version = got
    keeper = LeaseKeeper(store, lease, version, name=REPLAY).start()
    return ReplayLock(lock_path(store, stream), _described(lease), keeper)


def _described(lease: Any) -> dict[str, Any]:
    return {**lease.info, "pid": lease.holder.pid, "host": lease.holder.host}


def busy_message(stream: str, holder: dict[str, Any], path: Any) -> str:
    if not holder:
        who = "another replay (it has not described itself yet)"
    else:
        who = (f"replay {holder.get('replay_id')!r} ({holder.get('mode') or 'mode unknown'}), running since "
               f"{holder.get('started_at')} as pid {holder.get('pid')} on {holder.get('host')}")
    return (f"stream {stream!r} is already being replayed by {who}. Only one replay per stream runs at a time: "
            f"wait for it to finish (its report names the outcome) and run this one again; if that process is "
            f"gone, its lease in {path} lapses within REWIND_LEASE_TTL_S")


def current_holder(where: Where, stream: str) -> dict[str, Any] | None:
    """Who holds the stream's replay lease now (None: nobody)."""

    lease = read_lease(_store(where, stream), REPLAY)[0]
    if lease is None or lease.released or time.time() >= lease.expires_at + SKEW_S \
            or holder_gone(lease, me(), pid_alive):
        return None
    return _described(lease)
