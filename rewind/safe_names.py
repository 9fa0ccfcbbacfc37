"""Names that become paths, S3 keys or table names: one strict check each, no I/O.

A stream name, a savepoint id, a replay id or a proof run id typed into a form, a URL or a
command line ends up in ``$REWIND_HOME/replays/STREAM/ID``, ``s3://BUCKET/savepoints/STREAM/ID/``
or a SQL table name. Each check here accepts only a plain, bounded name and refuses anything that
could step out of its directory (``..``, ``/``, ``\\``, NUL, control characters, absurd length)
with a message that says what to change. The savepoint, replay, proof and UI code paths all call
these, so the rules are the same everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rewind.errors import Refused

#: Stream names (the registry's rule: they become DAG ids, table names and S3 keys).
STREAM_RE = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
#: Savepoint ids: ``20261122T015315Z-b42-9f3a``; letters, digits, ``.``, ``_``, ``-``.
SAVEPOINT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SAVEPOINT_ID_MAX = 200
#: Replay ids name a directory, S3 keys and shadow tables (lower case: PostgreSQL folds names).
REPLAY_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: Proof run ids: ``20261122T015315Z-1a2b3c``, or an Airflow run id with ``:``/``+`` made ``_``.
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~-]*$")
RUN_ID_MAX = 250
#: One relative file path below a directory the caller owns (e.g. a Data Docs site).
RELPATH_MAX = 500
_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._~+=-]*$")


class UnsafeName(Refused, ValueError):
    """A name was refused; ``kind`` says which (stream, savepoint id, ...), the message what to change."""

    def __init__(self, kind: str, value: object, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.value = value


class UnknownName(Refused, LookupError):
    """A well-formed name that names nothing (e.g. a stream not in the registry)."""

    def __init__(self, kind: str, value: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.value = value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _basic(kind: str, value: object, max_len: int) -> str:
    """Refusals every name shares: not text, empty, too long, a separator, ``..``, NUL or a control char."""
    if not isinstance(value, str):
        raise UnsafeName(kind, value, f"{kind} must be text, got {type(value).__name__}")
    if not value:
        raise UnsafeName(kind, value, f"{kind} is empty: give one")
    if len(value) > max_len:
        raise UnsafeName(kind, value, f"{kind} {_shown(value)} is {len(value)} characters long: use at most {max_len}")
    if "\x00" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UnsafeName(kind, value, f"{kind} {_shown(value)} contains a NUL or control character: remove it")
    if "/" in value or "\\" in value:
        raise UnsafeName(kind, value, f"{kind} {_shown(value)} contains '/' or '\\': it names one directory or "
                                      "key, not a path")
    if ".." in value:
        raise UnsafeName(kind, value, f"{kind} {_shown(value)} contains '..': remove it")
    return value


def check_stream(value: object, known: Iterable[str] | None = None) -> str:
    """A stream name of the registry rule; with ``known``, it must also be one of them (UnknownName)."""
    name = _basic("stream", value, 41)
    if not STREAM_RE.match(name):
        raise UnsafeName("stream", value, f"stream {_shown(value)} is not a stream name: lowercase letters, digits "
                                          "and '_', starting with a letter, at most 41 characters")
    if known is not None:
        names = sorted(known)
        if name not in names:
            raise UnknownName("stream", name, f"stream {name!r} is not in the registry; known streams: "
                                              f"{', '.join(names) or '(none)'}")
    return name


def check_savepoint_id(value: object) -> str:
    sid = _basic("savepoint id", value, SAVEPOINT_ID_MAX)
    if not SAVEPOINT_ID_RE.match(sid):
        raise UnsafeName("savepoint id", value, f"invalid savepoint id {_shown(value)}: use letters, digits, '.', "
                                                "'_' and '-' (starting with a letter or digit, no '..', no '/')")
    return sid


def check_replay_id(value: object) -> str:
    rid = _basic("replay id", value, 63)
    if not REPLAY_ID_RE.match(rid):
        raise UnsafeName("replay id", value, f"replay id {_shown(value)} is not allowed: use 1-63 characters of "
                                             "a-z, 0-9, '-' and '_', starting with a letter or digit (e.g. "
                                             "fix-2026-11-22); it names a directory, S3 keys and shadow tables")
    return rid


def run_dir_name(run_id: str) -> str:
    """An Airflow run id (``manual__2026-11-23T12:00:00+00:00``) as a directory name (``:``/``+`` -> ``_``)."""
    return str(run_id).replace(":", "_").replace("+", "_")


def check_run_id(value: object) -> str:
    """A proof run id as it names ``dq/STREAM/RUN_ID`` (after :func:`run_dir_name`)."""
    rid = _basic("run id", value, RUN_ID_MAX)
    if not RUN_ID_RE.match(rid):
        raise UnsafeName("run id", value, f"run id {_shown(value)} is not allowed: use letters, digits, '.', '_', "
                                          "'~' and '-', starting with a letter or digit")
    return rid


def check_relpath(value: object, kind: str = "file path") -> str:
    """A relative path of plain parts (``validations/x/y.html``): no ``..``, no absolute path, no ``\\``."""
    if not isinstance(value, str) or not value:
        raise UnsafeName(kind, value, f"{kind} is empty or not text")
    if len(value) > RELPATH_MAX:
        raise UnsafeName(kind, value, f"{kind} is {len(value)} characters long: use at most {RELPATH_MAX}")
    if value.startswith("/") or "\\" in value or "\x00" in value:
        raise UnsafeName(kind, value, f"{kind} {_shown(value)} must be relative, without '\\' or NUL")
    parts = value.split("/")
    for part in parts:
        if part in ("", ".", "..") or not _PART_RE.match(part):
            raise UnsafeName(kind, value, f"{kind} {_shown(value)} has a part {_shown(part)} that is not a plain "
                                          "name (letters, digits, '.', '_', '-'; no '..', no empty part)")
    return value


__all__ = ["UnknownName", "UnsafeName", "check_relpath", "check_replay_id", "check_run_id", "check_savepoint_id",
           "check_stream", "run_dir_name"]
