"""The control store of one host: a directory, the files named as before the store existed.

Why the old names (``<stream>.json`` for the status, ``<stream>.failures.json``, ...): one-host
setups (``make up``, the tests, ``status_dir`` in the registry) keep the files people and tools
already read, on the same code path as the shared store. Conditional writes are made atomic by an
exclusive ``flock`` on ``.<stream>.control.lock`` around the compare and the rename: every process
of the host (and of PID namespaces sharing the directory) takes the same kernel lock. A document is
written to a temporary file and renamed over the old one, so a reader never sees half of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rewind.control.store import ControlStore, ControlStoreError, Versioned, encode

__all__ = ["DirectoryStore", "file_name"]

#: Documents whose file names predate the store (everything else is ``<stream>.<name>.json``).
_NAMES = {"status": "{stream}.json"}


def file_name(stream: str, name: str) -> str:
    return _NAMES.get(name, "{stream}.{name}.json").format(stream=stream, name=name)


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


class DirectoryStore(ControlStore):
    """The documents of ``stream`` as files in ``directory`` (see the module docstring)."""

    def __init__(self, directory: str | Path, stream: str) -> None:
        self.directory = Path(directory)
        self.stream = stream

    @property
    def where(self) -> str:
        return str(self.directory)

    def path(self, name: str) -> Path:
        return self.directory / file_name(self.stream, name)

    def read(self, name: str) -> Versioned | None:
        try:
            data = self.path(name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ControlStoreError(f"cannot read {self.path(name)}: {exc}") from exc
        try:
            doc = json.loads(data)
        except ValueError:
            doc = {}
        return Versioned(doc if isinstance(doc, dict) else {}, _version(data))

    def create(self, name: str, doc: dict[str, Any]) -> str | None:
        with self.locked():
            if self.path(name).exists():
                return None
            return self._publish(name, doc)

    def replace(self, name: str, doc: dict[str, Any], version: str) -> str | None:
        with self.locked():
            current = self.read(name)
            if current is None or current.version != version:
                return None
            return self._publish(name, doc)

    def write(self, name: str, doc: dict[str, Any]) -> str:
        with self.locked():
            return self._publish(name, doc)

    def delete(self, name: str) -> None:
        with self.locked():
            self.path(name).unlink(missing_ok=True)

    def _publish(self, name: str, doc: dict[str, Any]) -> str:
        data = encode(doc)
        path = self.path(name)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ControlStoreError(f"cannot write {path}: {exc}") from exc
        return _version(data)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            f = open(self.directory / f".{self.stream}.control.lock", "a")
        except OSError as exc:
            raise ControlStoreError(f"cannot use {self.directory} as a control store: {exc}") from exc
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield
        finally:
            f.close()  # closing drops the flock
