"""Savepoints: a verified copy of a complete checkpoint in S3, and the way back from one.

Layout: ``s3://BUCKET/savepoints/STREAM/ID/files/<checkpoint-relative path>`` plus
``.../ID/manifest.json``. The manifest is written last, so a savepoint without one
does not exist (it is an interrupted copy: invisible to list and restore, removed by
prune once it is old enough not to be a copy in progress).

Only the files a resume after the batch needs are copied (``checkpoint.resume_files``),
each read through one open file descriptor that is hashed and then uploaded, so the
copy is consistent while the stream runs: files of a committed batch never change, and
one that Spark's cleanup deletes first is reported and the copy retried once with the
newer last complete batch. A restore downloads into a fresh directory, checks every
size and SHA-256 before anything is used, and only then moves the stream's checkpoint
pointer; the previous checkpoint is never touched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, TypeVar

from rewind.registry import StreamSpec
from rewind.s3 import ObjectInfo, S3Store

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FILES_DIR = "files/"
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: A manifest-less savepoint younger than this may be a copy in progress: prune leaves it alone.
INCOMPLETE_AFTER = timedelta(hours=1)
_HASH_CHUNK = 1 << 20


class SavepointError(RuntimeError):
    """A savepoint operation was refused or failed; the message says why and what was left as it was."""


class InvalidSavepointId(SavepointError, ValueError):
    pass


class SavepointNotFound(SavepointError):
    pass


class SavepointCorrupt(SavepointError):
    """A savepoint's file is missing, truncated or changed; the message names the file."""


class NothingToSave(SavepointError):
    """The stream has not completed a batch yet (no checkpoint, or one without a committed batch):
    a scheduled savepoint has nothing to do, which is not a failure."""


class FileVanished(SavepointError):
    """A checkpoint file disappeared during an online copy (Spark cleaned it up)."""


# --------------------------------------------------------------------------- manifest
def validate_savepoint_id(value: str) -> str:
    """The id (it becomes an S3 prefix and a directory name), or InvalidSavepointId saying why (rewind.safe_names)."""
    from rewind.safe_names import UnsafeName, check_savepoint_id

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
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
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
        out["created_at"] = self.created_at.astimezone(timezone.utc).isoformat()
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
                created_at=created if created.tzinfo else created.replace(tzinfo=timezone.utc),
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
    return f"{now.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-b{batch_id}-{secrets.token_hex(2)}"


def stream_prefix(stream: str) -> str:
    return f"savepoints/{stream}/"


def savepoint_prefix(stream: str, savepoint_id: str) -> str:
    return f"{stream_prefix(stream)}{validate_savepoint_id(savepoint_id)}/"


def spark_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark")
    except PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------- verification (pure)
def verify_file(entry: FileEntry, size: int, sha256: str) -> None:
    """Raise SavepointCorrupt naming the file unless size and SHA-256 match the manifest."""
    if size != entry.size:
        raise SavepointCorrupt(f"{entry.path}: {size} bytes, the manifest records {entry.size} (truncated or "
                               "changed)")
    if sha256 != entry.sha256:
        raise SavepointCorrupt(f"{entry.path}: SHA-256 {sha256[:16]}... differs from the manifest's "
                               f"{entry.sha256[:16]}... (the file was changed)")


def sha256_of(fh: Any) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    while chunk := fh.read(_HASH_CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def verify_tree(root: Path, manifest: Manifest) -> None:
    """Every file of the manifest is under ``root`` with its size and SHA-256, and nothing else is."""
    for entry in manifest.files:
        try:
            with open(root / entry.path, "rb") as fh:
                verify_file(entry, *sha256_of(fh))
        except FileNotFoundError:
            raise SavepointCorrupt(f"{entry.path}: missing") from None
    listed = {e.path for e in manifest.files}
    extra = sorted(str(p.relative_to(root).as_posix()) for p in root.rglob("*") if p.is_file()
                   and p.relative_to(root).as_posix() not in listed)
    if extra:
        raise SavepointCorrupt(f"{extra[0]}: not in the manifest (+{len(extra) - 1} more)")


# --------------------------------------------------------------------------- create
def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                disable=not enabled, mininterval=0.5, leave=False)


def _upload_one(store: S3Store, root: Path, rel: str, key: str, bar: Any) -> FileEntry:
    """Hash and upload one file through one descriptor, so a concurrent unlink cannot split them."""
    try:
        fh = open(root / rel, "rb")
    except FileNotFoundError:
        raise FileVanished(f"{root / rel} vanished during the copy (Spark cleaned it up)") from None
    with fh:
        size, digest = sha256_of(fh)
        fh.seek(0)
        store.upload(fh, key, bar.update)
    return FileEntry(rel, size, digest)


def _copy_batch(spec: StreamSpec, store: S3Store, root: Path, mode: str, progress: bool) -> Manifest:
    from rewind.checkpoints.inspection import CheckpointError, inspect_checkpoint, resume_files, state_versions

    report = inspect_checkpoint(root)
    batch = report.last_complete
    if batch is None:
        raise SavepointError(f"{root} has no complete batch to save"
                             + "".join(f"; {p.file}: {p.detail}" for p in report.errors[:2]))
    info = report.batch(batch)
    offsets = info.offsets[0] if info and info.offsets else {}
    try:
        rels = resume_files(root, batch)
    except CheckpointError as exc:  # complete a moment ago: Spark's cleanup removed something since
        raise FileVanished(str(exc)) from exc
    try:
        total = sum((root / rel).stat().st_size for rel in rels)
    except FileNotFoundError as exc:
        raise FileVanished(f"{exc.filename} vanished during the copy (Spark cleaned it up)") from None
    now = datetime.now(timezone.utc)
    sid = new_savepoint_id(batch, now)
    prefix = savepoint_prefix(spec.name, sid)
    uploaded: list[str] = []
    entries: list[FileEntry] = []
    bar = _progress(total, f"savepoint {spec.name} batch {batch}", progress)
    try:
        for rel in rels:
            entries.append(_upload_one(store, root, rel, prefix + FILES_DIR + rel, bar))
            uploaded.append(prefix + FILES_DIR + rel)
    except FileVanished:
        _delete_quietly(store, uploaded)
        raise
    finally:
        bar.close()
    manifest = Manifest(savepoint_id=sid, stream=spec.name, batch_id=batch, offsets=offsets,
                        state_versions=state_versions(report, batch), files=tuple(entries),
                        spark_version=spark_version(), config_hash=spec.config_hash(), created_at=now, mode=mode,
                        query_id=report.query_id, source_checkpoint=str(root))
    store.put_bytes(prefix + MANIFEST, manifest.to_json().encode())  # last: now the savepoint exists
    return manifest


def _delete_quietly(store: S3Store, keys: list[str]) -> None:
    if keys:
        try:
            store.delete(keys)
        except Exception as exc:  # noqa: BLE001 - a leftover without manifest is harmless; prune removes it
            log.warning("could not remove %d partial savepoint object(s): %s", len(keys), exc)


def create_savepoint(spec: StreamSpec, store: S3Store, *, checkpoint: str | Path | None = None,
                     mode: str = "online", progress: bool = False) -> Manifest:
    """Copy the last complete batch of the stream's active checkpoint to S3; safe while it runs."""
    from rewind.checkpoints.pointer import active_checkpoint

    root = Path(checkpoint or active_checkpoint(spec))
    if not (root / "commits").is_dir() or not any(p.name.isdigit() for p in (root / "commits").iterdir()):
        raise NothingToSave(f"stream {spec.name} has no committed batch in {root} yet: nothing to save")
    store.check()
    try:
        return _copy_batch(spec, store, root, mode, progress)
    except FileVanished as exc:
        log.warning("%s; retrying once with the newest complete batch", exc)
        try:
            return _copy_batch(spec, store, root, mode, progress)
        except FileVanished as again:
            raise SavepointError(f"the checkpoint changed under the copy twice ({again}); retry, or use --stop "
                                 "for a copy of a stopped stream") from again


def savepoint_with_stop(spec: StreamSpec, store: S3Store, *, restart: Callable[[], None] | None,
                        stop_timeout: float = 120.0, progress: bool = False,
                        on_event: Callable[[str], None] = lambda _msg: None) -> Manifest:
    """Stop the stream after its current batch commits, copy, then restart it (always, even on failure).

    S3 is checked before anything is stopped; ``restart`` None leaves the stream stopped.
    """
    from rewind.stream.control import StreamControlError, stop_stream

    store.check()
    on_event(f"stopping {spec.name} after its current batch commits ...")
    try:
        was_running = stop_stream(spec, stop_timeout)
    except StreamControlError as exc:
        raise StreamControlError(f"{exc}; no savepoint was taken (retry, or allow more --stop-timeout)") from exc
    on_event(f"{spec.name} stopped" if was_running else f"{spec.name} was not running: copying its checkpoint")
    failure: BaseException | None = None
    manifest: Manifest | None = None
    try:
        manifest = create_savepoint(spec, store, mode="stop", progress=progress)
        return manifest
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if was_running and restart is not None:
            on_event(f"restarting {spec.name} ...")
            try:
                restart()
            except Exception as exc:
                hint = f"start it with `rewind stream run {spec.name}`"
                if failure is not None:
                    failure.add_note(f"and restarting {spec.name} failed too ({exc}): {hint}")
                elif manifest is not None:
                    raise StreamControlError(f"savepoint {manifest.savepoint_id} is complete, but restarting "
                                             f"{spec.name} failed ({exc}): {hint}") from exc


# --------------------------------------------------------------------------- list / show
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
    complete: list[Manifest] = field(default_factory=list)  # newest first
    incomplete: list[Incomplete] = field(default_factory=list)


def list_savepoints(store: S3Store, stream: str) -> Listing:
    prefix = stream_prefix(stream)
    groups: dict[str, list[ObjectInfo]] = {}
    for obj in store.list_objects(prefix):
        groups.setdefault(obj.key[len(prefix):].split("/", 1)[0], []).append(obj)
    out = Listing()
    for sid, objs in sorted(groups.items()):
        reason = "no manifest (the copy never finished)"
        if any(o.key == f"{prefix}{sid}/{MANIFEST}" for o in objs):
            try:
                manifest = Manifest.from_json(store.get_bytes(f"{prefix}{sid}/{MANIFEST}") or b"")
                if manifest.savepoint_id != sid or manifest.stream != stream:
                    raise SavepointCorrupt(f"manifest names {manifest.stream}/{manifest.savepoint_id}")
                out.complete.append(manifest)
                continue
            except SavepointCorrupt as exc:
                reason = str(exc)
        out.incomplete.append(Incomplete(sid, len(objs), sum(o.size for o in objs),
                                         max(o.last_modified for o in objs), reason))
    out.complete.sort(key=lambda m: m.created_at, reverse=True)
    return out


def load_manifest(store: S3Store, stream: str, savepoint_id: str) -> Manifest:
    """The manifest of one savepoint; SavepointNotFound (listing what exists) when there is none."""
    key = savepoint_prefix(stream, savepoint_id) + MANIFEST
    raw = store.get_bytes(key)
    if raw is None:
        known = [m.savepoint_id for m in list_savepoints(store, stream).complete]
        raise SavepointNotFound(f"savepoint {savepoint_id!r} of stream {stream!r} does not exist (no "
                                f"{store.url(key)}); savepoints: {', '.join(known[:10]) or 'none'}")
    manifest = Manifest.from_json(raw)
    if manifest.savepoint_id != savepoint_id or manifest.stream != stream:
        raise SavepointCorrupt(f"{store.url(key)} names {manifest.stream}/{manifest.savepoint_id}")
    return manifest


# --------------------------------------------------------------------------- prune
class _Dated(Protocol):
    @property
    def created_at(self) -> datetime: ...


T = TypeVar("T", bound=_Dated)


def select_for_pruning(savepoints: Sequence[T], keep_last: int, max_age: timedelta, now: datetime) -> list[T]:
    """Pure retention: keep the newest ``keep_last`` that are at most ``max_age`` old, and always the
    newest one; return the rest, oldest first."""
    newest_first = sorted(savepoints, key=lambda s: s.created_at, reverse=True)
    drop = [s for i, s in enumerate(newest_first) if i > 0 and (i >= keep_last or now - s.created_at > max_age)]
    return drop[::-1]


def select_leftovers(incomplete: Sequence[Incomplete], older_than: timedelta, now: datetime) -> list[Incomplete]:
    """Pure: manifest-less leftovers old enough not to be a copy still in progress."""
    return [i for i in incomplete if now - i.newest > older_than]


@dataclass
class PrunePlan:
    delete: list[Manifest]
    keep: list[Manifest]
    leftovers: list[Incomplete]
    young_leftovers: list[Incomplete]

    def to_json(self) -> dict[str, Any]:
        return {"delete": [m.savepoint_id for m in self.delete], "keep": [m.savepoint_id for m in self.keep],
                "leftovers": [i.savepoint_id for i in self.leftovers],
                "young_leftovers": [i.savepoint_id for i in self.young_leftovers]}


def plan_prune(listing: Listing, keep_last: int, max_age: timedelta, now: datetime,
               incomplete_after: timedelta = INCOMPLETE_AFTER) -> PrunePlan:
    delete = select_for_pruning(listing.complete, keep_last, max_age, now)
    leftovers = select_leftovers(listing.incomplete, incomplete_after, now)
    return PrunePlan(delete, [m for m in listing.complete if m not in delete], leftovers,
                     [i for i in listing.incomplete if i not in leftovers])


def apply_prune(store: S3Store, stream: str, plan: PrunePlan) -> None:
    """Delete the manifest first: a savepoint half-deleted by a crash is then merely incomplete."""
    for manifest in plan.delete:
        prefix = savepoint_prefix(stream, manifest.savepoint_id)
        store.delete([prefix + MANIFEST])
        store.delete([o.key for o in store.list_objects(prefix)])
    for leftover in plan.leftovers:
        store.delete([o.key for o in store.list_objects(savepoint_prefix(stream, leftover.savepoint_id))])


# --------------------------------------------------------------------------- restore
@dataclass(frozen=True)
class RestoreResult:
    manifest: Manifest
    path: Path
    seconds: float
    warnings: tuple[str, ...] = ()


def restore_destination(spec: StreamSpec, savepoint_id: str, to: str | Path | None) -> Path:
    """``--to`` (must not exist or be an empty directory), else a fresh sibling of the checkpoint."""
    if to is not None:
        dest = Path(to).resolve()
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise SavepointError(f"--to {dest} exists and is not an empty directory: restore never overwrites")
        return dest
    base = Path(spec.checkpoint).resolve()
    dest = base.with_name(f"{base.name}.restored-{savepoint_id}")
    n = 2
    while dest.exists():
        dest = base.with_name(f"{base.name}.restored-{savepoint_id}-{n}")
        n += 1
    return dest


def restore_warnings(manifest: Manifest, spec: StreamSpec, current_spark: str) -> list[str]:
    """Pure: differences between the savepoint's job and the one that will resume it."""
    out = []
    if manifest.config_hash != spec.config_hash():
        out.append(f"the stream's registry entry changed since the savepoint (config hash {manifest.config_hash} "
                   f"-> {spec.config_hash()}): the state must still match the transform")
    if manifest.spark_version.split(".")[:2] != current_spark.split(".")[:2]:
        out.append(f"the savepoint was written by Spark {manifest.spark_version}, this is Spark {current_spark}")
    return out


def _download_verified(store: S3Store, manifest: Manifest, staging: Path, progress: bool) -> None:
    prefix = savepoint_prefix(manifest.stream, manifest.savepoint_id) + FILES_DIR
    bar = _progress(manifest.total_bytes, f"restore {manifest.savepoint_id}", progress)
    try:
        for entry in manifest.files:
            try:
                size, digest = store.download(prefix + entry.path, staging / entry.path, bar.update)
            except FileNotFoundError:
                raise SavepointCorrupt(f"{entry.path}: missing from {store.url(prefix)} (partial savepoint)") \
                    from None
            verify_file(entry, size, digest)
    finally:
        bar.close()


def restore_savepoint(spec: StreamSpec, store: S3Store, savepoint_id: str, *, to: str | Path | None = None,
                      progress: bool = False) -> RestoreResult:
    """Download, verify everything, then point the stream at the new copy (refused while it runs)."""
    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.checkpoints.pointer import point_to
    from rewind.stream.control import stream_liveness

    started = time.monotonic()
    validate_savepoint_id(savepoint_id)
    live = stream_liveness(spec)
    if live.running:
        raise SavepointError(f"stream {spec.name} is running ({live.why}): stop it first (e.g. `rewind savepoint "
                             f"create {spec.name} --stop --no-restart`); nothing was changed")
    manifest = load_manifest(store, spec.name, savepoint_id)
    dest = restore_destination(spec, savepoint_id, to)
    staging = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _download_verified(store, manifest, staging, progress)
        verify_tree(staging, manifest)  # what is on disk, after the download: the last gate before use
        report = inspect_checkpoint(staging)
        if report.last_complete != manifest.batch_id:
            raise SavepointCorrupt(f"the restored checkpoint's last complete batch is {report.last_complete}, the "
                                   f"manifest says {manifest.batch_id}")
        if dest.exists():
            dest.rmdir()  # an empty --to directory
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, dest)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, SavepointCorrupt):
            raise SavepointCorrupt(f"savepoint {savepoint_id} of {spec.name} refused: {exc}; nothing was restored "
                                   "and the stream's checkpoint is unchanged") from None
        raise
    point_to(spec, dest, f"restored from savepoint {savepoint_id} (batch {manifest.batch_id})",
             restored_from=savepoint_id)
    return RestoreResult(manifest, dest, time.monotonic() - started,
                         tuple(restore_warnings(manifest, spec, spark_version())))
