"""The local backend of ``rewind.storage``: files under a directory, written by rename.

Every write goes to a temporary file in the same directory, fsynced, then renamed over the old one
(atomic on a POSIX file system); a move inside one file system is a rename too. Only names are listed
(``os.scandir``), so listing a long offset log stays cheap.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from rewind.storage.base import CHUNK, Digest, FileInfo, Progress, Storage, sha256_of

__all__ = ["LocalStorage"]


class LocalStorage(Storage):
    """The files under ``root`` (see ``rewind.storage.base`` for the contract)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)
        self.reads = 0

    def path(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def url(self, rel: str = "") -> str:
        return str(self.path(rel))

    def list_dir(self, rel: str = "") -> tuple[list[str], list[str]]:
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(self.path(rel)) as it:
                for e in it:
                    (dirs if e.is_dir() else files).append(e.name)
        except (FileNotFoundError, NotADirectoryError):
            pass
        return dirs, files

    def list_files(self, rel: str = "") -> list[FileInfo]:
        out: list[FileInfo] = []
        for p in sorted(self.path(rel).rglob("*")):
            if p.is_file():
                st = p.stat()
                out.append(FileInfo(p.relative_to(self.root).as_posix(), st.st_size,
                                    datetime.fromtimestamp(st.st_mtime, UTC)))
        return out

    def any_batch_id(self, rel: str) -> int | None:
        """Some numeric entry of a directory, found without listing it all (the first one scandir yields):
        where ``rewind.checkpoints.logs`` starts its search of a long log (local only: a stat is cheap here)."""
        try:
            with os.scandir(self.path(rel)) as it:
                for e in it:
                    if e.name.isdigit():
                        return int(e.name)
        except (FileNotFoundError, NotADirectoryError):
            pass
        return None

    def exists(self, rel: str = "") -> bool:
        return os.path.exists(self.path(rel)) if rel else self.root.is_dir()

    def size(self, rel: str) -> int | None:
        try:
            return self.path(rel).stat().st_size
        except OSError:
            return None

    def read_bytes(self, rel: str) -> bytes:
        self.reads += 1
        return self.path(rel).read_bytes()

    def digest(self, rel: str) -> Digest:
        self.reads += 1
        with open(self.path(rel), "rb") as fh:
            return sha256_of(fh)

    def write_bytes(self, rel: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self.receive(io.BytesIO(data), rel)

    def receive(self, fh: IO[bytes], rel: str, progress: Progress | None = None) -> Digest:
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        h, size = hashlib.sha256(), 0
        try:
            with open(tmp, "wb") as out:
                while chunk := fh.read(CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
                    if progress:
                        progress(len(chunk))
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return Digest(size, h.hexdigest())

    def copy(self, rel: str, dest: Storage, dest_rel: str, *, source: Digest | None = None,
             progress: Progress | None = None) -> Digest:
        with open(self.path(rel), "rb") as fh:  # one descriptor: a delete during the copy cannot split it
            self.reads += 1
            return dest.receive(fh, dest_rel, progress)

    def move(self, rel: str, dest: Storage, dest_rel: str) -> None:
        if not isinstance(dest, LocalStorage):
            return super().move(rel, dest, dest_rel)
        target = dest.path(dest_rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.path(rel), target)
        return None

    def delete(self, rels: Iterable[str]) -> None:
        for rel in rels:
            self.path(rel).unlink(missing_ok=True)

    def build_tree(self, fill: Callable[[Storage], None]) -> None:
        staging = self.root.with_name(f".{self.root.name}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            fill(LocalStorage(staging))
            staging.mkdir(parents=True, exist_ok=True)  # an empty tree is a tree too
            if self.root.exists():
                self.root.rmdir()  # an empty directory the caller chose; anything else is refused here
            self.root.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, self.root)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
