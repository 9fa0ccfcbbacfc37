"""A savepoint's manifest: what was copied, from which batch, with which sizes and SHA-256s.

Layout in S3: ``savepoints/STREAM/ID/files/<checkpoint-relative path>`` plus
``savepoints/STREAM/ID/manifest.json``. The manifest is written LAST, so a savepoint without one
does not exist: it is an interrupted (or running) copy, invisible to list and restore and
removed by prune once it is old enough (``rewind.checkpoints.retention``).

Everything here is pure: the dataclasses, their JSON (parsing checks every field, because a
manifest read back from S3 decides which files land where on disk), the naming of ids and keys,
and the checks a restore applies (``verify_file``, ``restore_warnings``). The copying, listing,
pruning and restoring are ``rewind.checkpoints.savepoints``'.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from rewind.checkpoints.savepoint_errors import InvalidSavepointId, SavepointCorrupt
from rewind.registry import StreamSpec
from rewind.safe_names import UnsafeName, check_savepoint_id

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FILES_DIR = "files/"


# --------------------------------------------------------------------------- ids, paths and keys
def validate_savepoint_id(value: str) -> str:
    """The id (it becomes an S3 prefix and a directory name), or InvalidSavepointId saying why (rewind.safe_names)."""

    try:
        return check_savepoint_id(value)
    except UnsafeName as exc:
        raise InvalidSavepointId(f"invalid savepoint id {str(value)[:80]!r}: use letters, digits, '.', '_' and '-' "
                                 f"(starting with a letter or digit, no '..', no '/') -- {exc}") from None


def safe_relpath(value: str) -> str:
    """A checkpoint-relative POSIX path that cannot leave the directory it is restored into."""
    p = PurePosixPath(value)
    if (not value or p.is_absolute() or "\\" in value or any(part in ("", ".", "..") for part in value.split("/"))):
        raise SavepointCorrupt(f"manifest lists an unsafe file path {value!r}")
    return str(p)


@dataclass(frozen=True)
class FileEntry:
    """One copied file: its checkpoint-relative path, and its size and SHA-256 as uploaded."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """What a complete savepoint holds: the batch it resumes after, its offsets and state, every file."""

    savepoint_id: str
    stream: str
    batch_id: int
    offsets: dict[str, dict[str, int]]  # topic -> partition -> next offset to read after the batch
    state_versions: dict[str, dict[str, int]]  # operator -> partition -> state version restored
    files: tuple[FileEntry, ...]
    spark_version: str
    config_hash: str
    created_at: datetime
    mode: str = "online"  # online | stop
    query_id: str | None = None
    source_checkpoint: str = ""
    format: int = FORMAT_VERSION

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["created_at"] = self.created_at.astimezone(UTC).isoformat()
        out["files"] = [asdict(f) for f in self.files]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        """Parse and check a manifest; raises SavepointCorrupt saying what is wrong."""
        try:
            raw = json.loads(text)
            if raw.get("format") != FORMAT_VERSION:
                raise ValueError(f"unknown manifest format {raw.get('format')!r} (expected {FORMAT_VERSION})")
            files = tuple(FileEntry(safe_relpath(str(f["path"])), int(f["size"]), str(f["sha256"]))
                          for f in raw["files"])
            if any(f.size < 0 or not re.fullmatch(r"[0-9a-f]{64}", f.sha256) for f in files):
                raise ValueError("a file entry has a negative size or a malformed sha256")
            created = datetime.fromisoformat(raw["created_at"])
            return cls(
                savepoint_id=validate_savepoint_id(raw["savepoint_id"]), stream=str(raw["stream"]),
                batch_id=int(raw["batch_id"]),
                offsets={str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in raw["offsets"].items()},
                state_versions={str(op): {str(p): int(v) for p, v in parts.items()}
                                for op, parts in raw["state_versions"].items()},
                files=files, spark_version=str(raw["spark_version"]), config_hash=str(raw["config_hash"]),
                created_at=created if created.tzinfo else created.replace(tzinfo=UTC),
                mode=str(raw.get("mode", "online")), query_id=raw.get("query_id"),
                source_checkpoint=str(raw.get("source_checkpoint", "")))
        except SavepointCorrupt:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SavepointCorrupt(f"manifest unreadable: {type(exc).__name__}: {exc}") from None

    def summary(self) -> dict[str, Any]:
        out = self.to_dict()
        out.pop("files")
        out["file_count"], out["total_bytes"] = len(self.files), self.total_bytes
        return out


def new_savepoint_id(batch_id: int, now: datetime) -> str:
    """Sortable by time, names the batch, unique: ``20261122T015315Z-b42-9f3a``."""
    return f"{now.astimezone(UTC):%Y%m%dT%H%M%SZ}-b{batch_id}-{secrets.token_hex(2)}"


def stream_prefix(stream: str) -> str:
    return f"savepoints/{stream}/"


def savepoint_prefix(stream: str, savepoint_id: str) -> str:
    return f"{stream_prefix(stream)}{validate_savepoint_id(savepoint_id)}/"


# --------------------------------------------------------------------------- checks
def verify_file(entry: FileEntry, size: int, sha256: str) -> None:
    """Raise SavepointCorrupt naming the file unless size and SHA-256 match the manifest."""
    if size != entry.size:
        raise SavepointCorrupt(f"{entry.path}: {size} bytes, the manifest records {entry.size} (truncated or "
                               "changed)")
    if sha256 != entry.sha256:
        raise SavepointCorrupt(f"{entry.path}: SHA-256 {sha256[:16]}... differs from the manifest's "
                               f"{entry.sha256[:16]}... (the file was changed)")


def restore_warnings(manifest: Manifest, spec: StreamSpec, current_spark: str) -> list[str]:
    """Pure: differences between the savepoint's job and the one that will resume it."""
    out = []
    if manifest.config_hash != spec.config_hash():
        out.append(f"the stream's registry entry changed since the savepoint (config hash {manifest.config_hash} "
                   f"-> {spec.config_hash()}): the state must still match the transform")
    if manifest.spark_version.split(".")[:2] != current_spark.split(".")[:2]:
        out.append(f"the savepoint was written by Spark {manifest.spark_version}, this is Spark {current_spark}")
    return out


# --------------------------------------------------------------------------- what a listing finds
@dataclass(frozen=True)
class Incomplete:
    """Objects under a savepoint id with no usable manifest: an interrupted (or running) copy."""

    savepoint_id: str
    objects: int
    bytes: int
    newest: datetime
    reason: str


@dataclass
class Listing:
    """What ``list_savepoints`` found under a stream's prefix."""

    complete: list[Manifest] = field(default_factory=list)  # newest first
    incomplete: list[Incomplete] = field(default_factory=list)
