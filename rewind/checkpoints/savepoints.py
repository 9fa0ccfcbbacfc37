"""Savepoints: a verified copy of a complete checkpoint in S3, and the way back from one.

Layout and manifest: ``rewind.checkpoints.manifest`` (the manifest is written last, so a
savepoint without one does not exist); which savepoints prune removes:
``rewind.checkpoints.retention``. This module is the I/O: create, list, prune, restore, written once
over ``rewind.storage``: the checkpoint may be a local directory or an ``s3a://`` prefix, the savepoint
store is S3 (any ``Storage``), and each copy is the storage's own (``Storage.copy``): a local file is
hashed and uploaded through one open descriptor, a file already in S3 is copied inside S3, server-side,
pinned to the version that was hashed and proven equal to it.

Only the files a resume after the batch needs are copied (``checkpoint.resume_files``), so the copy is
consistent while the stream runs: files of a committed batch never change, and one that Spark's cleanup
deletes first is reported and the copy retried once with the newer last complete batch. A restore goes
into a fresh location (a new directory, renamed into place when whole; a new ``s3a://`` prefix), checks
every size and SHA-256 of what it wrote and inspects it as complete at the savepoint's batch before
anything is used, and only then moves the stream's checkpoint pointer; the previous checkpoint is never
touched.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rewind.checkpoints.inspection import CheckpointError, inspect_checkpoint, resume_files, state_versions
from rewind.checkpoints.logs import has_batches
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
from rewind.checkpoints.pointer import active_checkpoint, point_to
from rewind.checkpoints.retention import PrunePlan
from rewind.checkpoints.savepoint_errors import (
    FileVanished,
    NothingToSave,
    RestartFailed,
    SavepointCorrupt,
    SavepointNotFound,
    SavepointRefused,
)
from rewind.registry import StreamSpec
from rewind.storage.base import CopyMismatch, Digest, FileInfo, Storage
from rewind.storage.local import LocalStorage
from rewind.storage.location import open_storage
from rewind.storage.s3_config import is_s3_url, parse_s3_url

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- verification
def spark_version() -> str:
    """The installed PySpark's version: recorded in the manifest, compared at restore."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark")
    except PackageNotFoundError:
        return "unknown"


def verify_tree(tree: Storage | Path, manifest: Manifest) -> None:
    """Every file of the manifest is in ``tree`` with its size and SHA-256 (each read back), and nothing else is."""
    store = tree if isinstance(tree, Storage) else LocalStorage(tree)
    for entry in manifest.files:
        try:
            got = store.digest(entry.path)
        except FileNotFoundError:
            raise SavepointCorrupt(f"{entry.path}: missing") from None
        verify_file(entry, got.size, got.sha256)
    listed = {e.path for e in manifest.files}
    extra = sorted(f.path for f in store.list_files() if f.path not in listed)
    if extra:
        raise SavepointCorrupt(f"{extra[0]}: not in the manifest (+{len(extra) - 1} more)")


# --------------------------------------------------------------------------- create
def _progress(total: int | None, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                disable=not enabled, mininterval=0.5, leave=False)


def _delete_quietly(store: Storage, rels: list[str]) -> None:
    """Remove a half-made savepoint's files (best effort: a leftover without a manifest is no savepoint)."""
    if rels:
        try:
            store.delete(rels)
        except Exception as exc:  # noqa: BLE001 - a leftover without manifest is harmless; prune removes it
            log.warning("could not remove %d partial savepoint file(s): %s", len(rels), exc)


def _copy_batch(spec: StreamSpec, store: Storage, source: Storage, mode: str, progress: bool) -> Manifest:

    where = source.location.rstrip("/")
    report = inspect_checkpoint(source)
    batch = report.last_complete
    if batch is None:
        raise SavepointRefused(f"{where} has no complete batch to save"
                               + "".join(f"; {p.file}: {p.detail}" for p in report.errors[:2]))
    info = report.batch(batch)
    try:
        rels = resume_files(source, batch)
    except CheckpointError as exc:  # complete a moment ago: Spark's cleanup removed something since
        raise FileVanished(str(exc)) from exc
    # the bar's total: a stat each on local disk; S3 would want a request per file, so it counts without one
    total = sum(source.size(rel) or 0 for rel in rels) if progress and not is_s3_url(where) else None
    now = datetime.now(UTC)
    sid = new_savepoint_id(batch, now)
    prefix = savepoint_prefix(spec.name, sid)
    copied: list[str] = []
    entries: list[FileEntry] = []
    bar = _progress(total, f"savepoint {spec.name} batch {batch}", progress)
    try:
        for rel in rels:
            try:
                got = source.copy(rel, store, prefix + FILES_DIR + rel, progress=bar.update)
            except FileNotFoundError:
                raise FileVanished(f"{source.url(rel)} vanished during the copy (Spark cleaned it up)") from None
            copied.append(prefix + FILES_DIR + rel)
            entries.append(FileEntry(rel, got.size, got.sha256))
    except (FileVanished, CopyMismatch):  # the checkpoint moved on: the retry starts clean (a failing store
        _delete_quietly(store, copied)     # would fail the deletes too: prune removes what is left)
        raise
    finally:
        bar.close()
    manifest = Manifest(savepoint_id=sid, stream=spec.name, batch_id=batch,
                        offsets=info.offsets[0] if info and info.offsets else {},
                        state_versions=state_versions(report, batch), files=tuple(entries),
                        spark_version=spark_version(), config_hash=spec.config_hash(), created_at=now, mode=mode,
                        query_id=report.query_id, source_checkpoint=where)
    store.write_bytes(prefix + MANIFEST, manifest.to_json().encode())  # last: now the savepoint exists
    return manifest


def create_savepoint(spec: StreamSpec, store: Storage, *, checkpoint: str | Path | None = None,
                     mode: str = "online", progress: bool = False) -> Manifest:
    """Copy the last complete batch of the stream's active checkpoint (local, or ``s3a://``) to ``store``;
    safe while it runs."""

    location = str(checkpoint or active_checkpoint(spec))
    if "://" in location and not is_s3_url(location):
        raise SavepointRefused(f"stream {spec.name}: its checkpoint {location} is neither on local disk nor in S3 "
                               "(s3a://); savepoints copy those two")
    source = open_storage(location)
    if not has_batches(source, "commits"):
        raise NothingToSave(f"stream {spec.name} has no committed batch in {source.location.rstrip('/')} yet: "
                            "nothing to save")
    store.check()
    try:
        return _copy_batch(spec, store, source, mode, progress)
    except FileVanished as exc:
        log.warning("%s; retrying once with the newest complete batch", exc)
        try:
            return _copy_batch(spec, store, source, mode, progress)
        except FileVanished as again:
            raise FileVanished(f"the checkpoint changed under the copy twice ({again}); retry, or use --stop "
                               "for a copy of a stopped stream") from again


def savepoint_with_stop(spec: StreamSpec, store: Storage, *, stop: Callable[[StreamSpec, float], bool],
                        restart: Callable[[], None] | None, stop_timeout: float = 120.0, progress: bool = False,
                        on_event: Callable[[str], None] = lambda _msg: None) -> Manifest:
    """Stop the stream after its current batch commits, copy, then restart it (always, even on failure).

    ``stop(spec, timeout)`` stops it and says whether it was running (the caller's, e.g.
    ``rewind.supervision.process_control.stop_stream``). S3 is checked before anything is stopped;
    ``restart`` None leaves the stream stopped.
    """
    store.check()
    on_event(f"stopping {spec.name} after its current batch commits ...")
    try:
        was_running = stop(spec, stop_timeout)
    except Exception as exc:
        exc.add_note("no savepoint was taken (retry, or allow more --stop-timeout)")
        raise
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
                    raise RestartFailed(f"savepoint {manifest.savepoint_id} is complete, but restarting "
                                        f"{spec.name} failed ({exc}): {hint}") from exc


# --------------------------------------------------------------------------- list / show
def list_savepoints(store: Storage, stream: str) -> Listing:
    """The stream's savepoints: complete ones (a manifest that parses and names this id), newest
    first, and every other id's files as ``Incomplete`` with the reason."""
    prefix = stream_prefix(stream)
    groups: dict[str, list[FileInfo]] = {}
    for f in store.list_files(prefix):
        groups.setdefault(f.path[len(prefix):].split("/", 1)[0], []).append(f)
    out = Listing()
    for sid, files in sorted(groups.items()):
        reason = "no manifest (the copy never finished)"
        if any(f.path == f"{prefix}{sid}/{MANIFEST}" for f in files):
            try:
                manifest = Manifest.from_json(_read(store, f"{prefix}{sid}/{MANIFEST}") or b"")
                if manifest.savepoint_id != sid or manifest.stream != stream:
                    raise SavepointCorrupt(f"manifest names {manifest.stream}/{manifest.savepoint_id}")
                out.complete.append(manifest)
                continue
            except SavepointCorrupt as exc:
                reason = str(exc)
        out.incomplete.append(Incomplete(sid, len(files), sum(f.size for f in files),
                                         max(f.modified for f in files), reason))
    out.complete.sort(key=lambda m: m.created_at, reverse=True)
    return out


def _read(store: Storage, rel: str) -> bytes | None:
    try:
        return store.read_bytes(rel)
    except FileNotFoundError:
        return None


def load_manifest(store: Storage, stream: str, savepoint_id: str) -> Manifest:
    """The manifest of one savepoint; SavepointNotFound (listing what exists) when there is none."""
    rel = savepoint_prefix(stream, savepoint_id) + MANIFEST
    raw = _read(store, rel)
    if raw is None:
        known = [m.savepoint_id for m in list_savepoints(store, stream).complete]
        raise SavepointNotFound(f"savepoint {savepoint_id!r} of stream {stream!r} does not exist (no "
                                f"{store.url(rel)}); savepoints: {', '.join(known[:10]) or 'none'}")
    manifest = Manifest.from_json(raw)
    if manifest.savepoint_id != savepoint_id or manifest.stream != stream:
        raise SavepointCorrupt(f"{store.url(rel)} names {manifest.stream}/{manifest.savepoint_id}")
    return manifest


# --------------------------------------------------------------------------- prune
def apply_prune(store: Storage, stream: str, plan: PrunePlan) -> None:
    """Delete the manifest first: a savepoint half-deleted by a crash is then merely incomplete."""
    for manifest in plan.delete:
        prefix = savepoint_prefix(stream, manifest.savepoint_id)
        store.delete([prefix + MANIFEST])
        store.delete([f.path for f in store.list_files(prefix)])
    for leftover in plan.leftovers:
        store.delete([f.path for f in store.list_files(savepoint_prefix(stream, leftover.savepoint_id))])


# --------------------------------------------------------------------------- restore
@dataclass(frozen=True)
class RestoreResult:
    """A finished restore: the savepoint, where its checkpoint now is, and what differs from then."""

    manifest: Manifest
    path: Path | str  # a directory, or an s3a:// prefix
    seconds: float
    warnings: tuple[str, ...] = ()


def _taken(location: str, empty_ok: bool) -> bool:
    """Whether something is at ``location`` already (an empty directory counts only unless ``empty_ok``;
    in S3, an empty prefix is nothing)."""
    if is_s3_url(location):
        return open_storage(location).exists()
    p = Path(location)
    return p.exists() and (not empty_ok or not p.is_dir() or any(p.iterdir()))


def restore_destination(spec: StreamSpec, savepoint_id: str, to: str | Path | None) -> Path | str:
    """``--to`` (nothing there: an absent or empty directory, an ``s3a://`` prefix without objects), else a
    fresh sibling of the checkpoint: ``<checkpoint>.restored-<id>`` (``-2``...), in S3 when the checkpoint is."""
    in_s3 = is_s3_url(spec.checkpoint)
    if "://" in spec.checkpoint and not in_s3:
        raise SavepointRefused(f"stream {spec.name}: its checkpoint {spec.checkpoint} is neither on local disk nor in "
                               "S3 (s3a://); restore writes those two")
    if to is not None and is_s3_url(str(to)) != in_s3:
        if in_s3:
            raise SavepointRefused(f"stream {spec.name}: its checkpoint {spec.checkpoint} is in S3, which every host "
                                   "reads: restore it into S3 (--to s3a://BUCKET/PREFIX, or no --to), not to a local "
                                   "folder")
        raise SavepointRefused(f"--to {to}: stream {spec.name}'s checkpoint is local ({spec.checkpoint}); to move it "
                               "into S3, set its checkpoint to an s3a:// prefix in the registry (the driver's S3 "
                               "settings follow it), then restore without --to; nothing was changed")
    if to is not None:
        if in_s3:
            if not parse_s3_url(str(to))[1].strip("/"):
                raise SavepointRefused(f"--to {to} names a bucket, not a prefix: restore into a prefix of its own")
            if _taken(str(to), empty_ok=True):
                raise SavepointRefused(f"--to {to} already holds objects: restore never overwrites")
            return str(to).rstrip("/")
        dest = Path(to).resolve()
        if _taken(str(dest), empty_ok=True):
            raise SavepointRefused(f"--to {dest} exists and is not an empty directory: restore never overwrites")
        return dest
    base = spec.checkpoint.rstrip("/") if in_s3 else str(Path(spec.checkpoint).resolve())
    where, n = f"{base}.restored-{savepoint_id}", 2
    while _taken(where, empty_ok=False):
        where, n = f"{base}.restored-{savepoint_id}-{n}", n + 1
    return where if in_s3 else Path(where)


def restore_savepoint(spec: StreamSpec, store: Storage, savepoint_id: str, *, running: str | None,
                      to: str | Path | None = None, progress: bool = False) -> RestoreResult:
    """Copy the savepoint into a fresh checkpoint (``restore_destination``), prove it, then point the stream at it.

    ``running`` is the caller's finding that the stream is running or its checkpoint in use (the reason;
    ``rewind.supervision.observe.running_reason``): then nothing is done. SavepointCorrupt says nothing was
    restored and the stream's checkpoint is unchanged."""

    started = time.monotonic()
    validate_savepoint_id(savepoint_id)
    if running:
        raise SavepointRefused(f"{running}: stop it first (e.g. `rewind savepoint create {spec.name} --stop "
                               "--no-restart`); nothing was changed")
    manifest = load_manifest(store, spec.name, savepoint_id)
    dest = restore_destination(spec, savepoint_id, to)
    files = savepoint_prefix(manifest.stream, manifest.savepoint_id) + FILES_DIR

    def fill(tree: Storage) -> None:
        for entry in manifest.files:
            try:
                got = store.copy(files + entry.path, tree, entry.path, source=Digest(entry.size, entry.sha256),
                                 progress=bar.update)
            except FileNotFoundError:
                raise SavepointCorrupt(f"{entry.path}: missing from {store.url(files)} (partial savepoint)") \
                    from None
            verify_file(entry, got.size, got.sha256)
        verify_tree(tree, manifest)  # what was written, read back: the last gate before use
        report = inspect_checkpoint(tree)
        if report.last_complete != manifest.batch_id:
            raise SavepointCorrupt(f"the restored checkpoint's last complete batch is {report.last_complete}, the "
                                   f"manifest says {manifest.batch_id}")

    bar = _progress(manifest.total_bytes, f"restore {manifest.savepoint_id}", progress)
    try:
        open_storage(dest).build_tree(fill)
    except (SavepointCorrupt, CopyMismatch) as exc:
        raise SavepointCorrupt(f"savepoint {savepoint_id} of {spec.name} refused: {exc}; nothing was restored "
                               "and the stream's checkpoint is unchanged") from None
    finally:
        bar.close()
    point_to(spec, dest, f"restored from savepoint {savepoint_id} (batch {manifest.batch_id})",
             restored_from=savepoint_id)
    return RestoreResult(manifest, dest, time.monotonic() - started,
                         tuple(restore_warnings(manifest, spec, spark_version())))
