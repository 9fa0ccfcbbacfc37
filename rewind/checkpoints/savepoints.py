"""Savepoints: a verified copy of a complete checkpoint in S3, and the way back from one.

Layout and manifest: ``rewind.checkpoints.manifest`` (the manifest is written last, so a
savepoint without one does not exist); which savepoints prune removes:
``rewind.checkpoints.retention``. This module is the I/O: create, list, prune, restore.

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
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rewind.checkpoints.manifest import (
    FILES_DIR,
    MANIFEST,
    FileEntry,
    Incomplete,
    Listing,
    Manifest,
    new_savepoint_id,
    restore_warnings,
    savepoint_prefix,
    stream_prefix,
    validate_savepoint_id,
    verify_file,
)
from rewind.checkpoints.retention import PrunePlan
from rewind.checkpoints.s3_objects import delete_quietly
from rewind.checkpoints.savepoint_errors import (
    FileVanished,
    NothingToSave,
    SavepointCorrupt,
    SavepointNotFound,
    SavepointRefused,
)
from rewind.checkpoints.store import is_s3_url
from rewind.registry import StreamSpec
from rewind.s3 import ObjectInfo, S3Store

log = logging.getLogger(__name__)

_HASH_CHUNK = 1 << 20


# --------------------------------------------------------------------------- hashing and verification
def spark_version() -> str:
    """The installed PySpark's version: recorded in the manifest, compared at restore."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark")
    except PackageNotFoundError:
        return "unknown"


def sha256_of(fh: Any) -> tuple[int, str]:
    """(size, SHA-256) of an open binary file, read to its end in 1 MiB chunks."""
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
        raise SavepointRefused(f"{root} has no complete batch to save"
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
    now = datetime.now(UTC)
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
        delete_quietly(store, uploaded)
        raise
    finally:
        bar.close()
    manifest = Manifest(savepoint_id=sid, stream=spec.name, batch_id=batch, offsets=offsets,
                        state_versions=state_versions(report, batch), files=tuple(entries),
                        spark_version=spark_version(), config_hash=spec.config_hash(), created_at=now, mode=mode,
                        query_id=report.query_id, source_checkpoint=str(root))
    store.put_bytes(prefix + MANIFEST, manifest.to_json().encode())  # last: now the savepoint exists
    return manifest


def create_savepoint(spec: StreamSpec, store: S3Store, *, checkpoint: str | Path | None = None,
                     mode: str = "online", progress: bool = False) -> Manifest:
    """Copy the last complete batch of the stream's active checkpoint to S3; safe while it runs."""
    from rewind.checkpoints.pointer import active_checkpoint

    location = str(checkpoint or active_checkpoint(spec))
    if is_s3_url(location):  # copied inside S3, server-side (rewind.checkpoints.s3_savepoints)
        from rewind.checkpoints.s3_savepoints import create_in_s3

        store.check()
        return create_in_s3(spec, store, location, mode, spark_version())
    if "://" in location:
        raise SavepointRefused(f"stream {spec.name}: its checkpoint {location} is neither on local disk nor in S3 "
                               "(s3a://); savepoints copy those two")
    root = Path(location)
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
            raise FileVanished(f"the checkpoint changed under the copy twice ({again}); retry, or use --stop "
                               "for a copy of a stopped stream") from again


def savepoint_with_stop(spec: StreamSpec, store: S3Store, *, restart: Callable[[], None] | None,
                        stop_timeout: float = 120.0, progress: bool = False,
                        on_event: Callable[[str], None] = lambda _msg: None) -> Manifest:
    """Stop the stream after its current batch commits, copy, then restart it (always, even on failure).

    S3 is checked before anything is stopped; ``restart`` None leaves the stream stopped.
    """
    from rewind.supervision.process_control import StreamControlError, stop_stream

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
def list_savepoints(store: S3Store, stream: str) -> Listing:
    """The stream's savepoints: complete ones (a manifest that parses and names this id), newest
    first, and every other id's objects as ``Incomplete`` with the reason."""
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
    """A finished restore: the savepoint, where its checkpoint now is, and what differs from then."""

    manifest: Manifest
    path: Path | str  # a directory, or an s3a:// prefix
    seconds: float
    warnings: tuple[str, ...] = ()


def restore_destination(spec: StreamSpec, savepoint_id: str, to: str | Path | None) -> Path:
    """``--to`` (must not exist or be an empty directory), else a fresh sibling of the checkpoint (a local
    one: ``restore_savepoint`` sends a checkpoint in S3 to ``s3_savepoints.s3_restore_destination``)."""
    if "://" in spec.checkpoint:
        raise SavepointRefused(f"stream {spec.name}: its checkpoint {spec.checkpoint} is in S3, which every host "
                               "reads: restore it into S3 (--to s3a://BUCKET/PREFIX, or no --to), not to a local "
                               "folder")
    if to is not None:
        dest = Path(to).resolve()
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise SavepointRefused(f"--to {dest} exists and is not an empty directory: restore never overwrites")
        return dest
    base = Path(spec.checkpoint).resolve()
    dest = base.with_name(f"{base.name}.restored-{savepoint_id}")
    n = 2
    while dest.exists():
        dest = base.with_name(f"{base.name}.restored-{savepoint_id}-{n}")
        n += 1
    return dest


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
    from rewind.supervision.process_control import stream_liveness

    started = time.monotonic()
    validate_savepoint_id(savepoint_id)
    live = stream_liveness(spec)
    if live.running:
        raise SavepointRefused(f"stream {spec.name} is running ({live.why}): stop it first (e.g. `rewind savepoint "
                               f"create {spec.name} --stop --no-restart`); nothing was changed")
    from rewind.control.driver_lease import checkpoint_in_use

    in_use = checkpoint_in_use(spec)
    if in_use:
        raise SavepointRefused(f"{in_use}: nothing was changed")
    manifest = load_manifest(store, spec.name, savepoint_id)
    if is_s3_url(spec.checkpoint):  # into a fresh s3a:// prefix, copied and proven inside S3
        from rewind.checkpoints.s3_savepoints import restore_stream_into_s3

        where = restore_stream_into_s3(spec, store, manifest, None if to is None else str(to))
        point_to(spec, where, f"restored from savepoint {savepoint_id} (batch {manifest.batch_id})",
                 restored_from=savepoint_id)
        return RestoreResult(manifest, where, time.monotonic() - started,
                             tuple(restore_warnings(manifest, spec, spark_version())))
    if to is not None and is_s3_url(str(to)):
        raise SavepointRefused(f"--to {to}: stream {spec.name}'s checkpoint is local ({spec.checkpoint}); to move it "
                               "into S3, set its checkpoint to an s3a:// prefix in the registry (the driver's S3 "
                               "settings follow it), then restore without --to; nothing was changed")
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

