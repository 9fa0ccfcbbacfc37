"""An exclusive ``fcntl.flock`` on a small file that also describes its holder in JSON.

Why: the kernel drops a flock when its holder's process dies (SIGKILL included), so a crash never
leaves a stale lock; the JSON is only for messages ("held by pid N since ..."). Used for one replay
per stream (``rewind.replay.guard``) and one driver per stream (``rewind.stream.driver_lock``).
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import IO, Any

__all__ = ["describe_holder", "held_by_another", "read_description", "release"]


def describe_holder(f: IO[str], holder: dict[str, Any]) -> None:
    """Replace the held file's content with ``holder`` as JSON."""
    f.seek(0)
    f.truncate()
    f.write(json.dumps(holder))
    f.flush()


def release(f: IO[str]) -> None:
    """Empty the file (a stale description would only confuse whoever reads it), unlock, close."""
    try:
        f.seek(0)
        f.truncate()
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)
    finally:
        f.close()


def read_description(path: Path) -> dict[str, Any]:
    """What the holder wrote ({}: nobody, not yet, or unreadable)."""
    try:
        text = path.read_text()
        return json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}


def held_by_another(path: Path) -> bool:
    """Whether another open file holds the lock now (a test-and-release: a process blocked waiting
    for it is delayed by microseconds at most)."""
    if not path.exists():
        return False
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False
