"""Waiting out SQLite's one write lock, and naming who holds it.

Why: SQLite lets one process write at a time. A driver paused inside a transaction (a long GC, a
``SIGSTOP``, a debugger) keeps that lock until it resumes or dies, however long ago its lease lapsed; the
driver that took the stream over cannot even write its fence. SQLite's busy timeout (30 s) then ends in
"database is locked", which names neither the process nor the fix. Here the new driver keeps waiting up
to ``REWIND_DRIVER_WAIT_S`` more, logs which processes hold the file open and whether they are stopped,
and is refused in one line that says what to do. The lock cannot be taken from its holder: only the
holder's end frees it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

import psutil
from sqlalchemy import exc

from rewind.settings import driver_lock_wait_s
from rewind.sink.errors import SinkConnectionError

__all__ = ["holders", "is_locked", "waiting_for_the_lock"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds between two tries after SQLite's own busy timeout ran out once.
RETRY_S = 1.0


def is_locked(e: BaseException) -> bool:
    """``e`` is SQLite's busy error (another connection holds the write lock)."""
    return isinstance(e, exc.OperationalError) and "database is locked" in str(getattr(e, "orig", e))


def holders(database: str) -> str:
    """The processes other than this one with ``database`` (or its WAL) open, e.g. ``pid 812 (java,
    stopped)``; ``"no process found"`` when none is visible (another host, or another user's)."""
    paths = {os.path.realpath(database + suffix) for suffix in ("", "-wal", "-shm")}
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.pid == os.getpid():
            continue
        try:
            if any(f.path in paths for f in proc.open_files()):
                state = proc.status()
                found.append(f"pid {proc.pid} ({proc.info['name']}, {state})")
        except (psutil.Error, OSError):
            continue
    return ", ".join(found) or "no process found"


def waiting_for_the_lock(attempt: Callable[[], T], database: str, what: str) -> T:
    """``attempt()``, tried again while SQLite says the database is locked, for up to
    ``REWIND_DRIVER_WAIT_S`` after the first busy timeout; then ``SinkConnectionError`` naming the holders."""
    deadline = time.monotonic() + driver_lock_wait_s()
    told = 0.0
    while True:
        try:
            return attempt()
        except exc.OperationalError as e:
            if not is_locked(e):
                raise
            who = holders(database)
            if time.monotonic() >= deadline:
                raise SinkConnectionError(
                    f"{what}: the SQLite sink {database} stayed locked by another writer ({who}); a process "
                    f"paused or hung inside a transaction holds SQLite's only write lock until it resumes or "
                    f"ends: resume it (kill -CONT) or stop it, or raise REWIND_DRIVER_WAIT_S; streams on "
                    f"several hosts need a PostgreSQL sink") from None
            if time.monotonic() - told >= 30:
                told = time.monotonic()
                log.warning("%s: the SQLite sink %s is locked by another writer (%s); waiting up to %.0fs more "
                            "for it to commit, resume or end", what, database, who, deadline - time.monotonic())
            time.sleep(RETRY_S)
