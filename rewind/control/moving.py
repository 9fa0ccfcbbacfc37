"""A control store left in ``status_dir`` by an older Rewind moves beside the checkpoint, once.

Why: the default store of a stream with a local checkpoint was its ``status_dir``, one per host;
it is now ``<checkpoint>.control`` (``rewind.control.location``). A stream upgraded in place must
keep its status, failures, proof cursor and lease history, and must never have two live copies
(a supervisor reading the old one would judge a driver that writes the new one). So the first
process that opens the store moves the stream's files: each is written to the new place unless
the new place has it already, and the old one is renamed ``<file>.moved`` (kept, not deleted).
Both directories' locks are held meanwhile (the lock files ``DirectoryStore`` takes), so an older
process writing the old place and a newer one moving it do not interleave.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from rewind.control.directory import DirectoryStore

log = logging.getLogger(__name__)

__all__ = ["MOVED_SUFFIX", "move_from_status_dir", "old_files"]

MOVED_SUFFIX = ".moved"
_checked: set[tuple[str, str, str]] = set()


def old_files(status_dir: Path, stream: str) -> list[Path]:
    """The stream's control files in ``status_dir``: ``<stream>.json``, ``<stream>.<name>.json`` and
    the JSON-lines beside the status (history, late checks)."""
    pattern = re.compile(rf"{re.escape(stream)}(\.[a-z0-9_-]+)?\.json(l)?")
    try:
        names = os.listdir(status_dir)
    except OSError:
        return []
    return sorted(status_dir / n for n in names if pattern.fullmatch(n))


def move_from_status_dir(spec: Any, store: DirectoryStore) -> list[Path]:
    """Move the stream's files from ``spec.status_dir`` into ``store`` (once per process); the files
    moved. Nothing to do when the two are one directory or the old one holds nothing of the stream."""
    if not getattr(spec, "status_dir", None):
        return []
    old_dir, new_dir = Path(spec.status_dir), store.directory
    key = (str(old_dir), str(new_dir), spec.name)
    if key in _checked:
        return []
    _checked.add(key)
    if old_dir.resolve() == new_dir.resolve() or not old_files(old_dir, spec.name):
        return []
    moved: list[Path] = []
    with DirectoryStore(old_dir, spec.name).locked(), store.locked():
        for old in old_files(old_dir, spec.name):  # again, under the locks
            new = new_dir / old.name
            if not new.exists():
                tmp = new.with_name(f".{new.name}.tmp{os.getpid()}")
                tmp.write_bytes(old.read_bytes())
                os.replace(tmp, new)
                moved.append(new)
            else:
                log.warning("stream %s: %s was not moved: %s exists (the newer one is kept)", spec.name, old, new)
            os.replace(old, old.with_name(old.name + MOVED_SUFFIX))
    if moved:
        log.info("stream %s: its control store moved from %s to %s beside the checkpoint (%d files; the old "
                 "ones renamed *%s)", spec.name, old_dir, new_dir, len(moved), MOVED_SUFFIX)
    return moved

