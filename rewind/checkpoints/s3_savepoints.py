"""Savepoints of a checkpoint in S3 (``s3a://``), and restores into S3: copies made inside S3.

The rules are those of a local checkpoint (``rewind.checkpoints.savepoints``): only the files a resume
after the last complete batch needs, each hashed (SHA-256) into the manifest, the manifest written last;
a restore goes into a fresh location, is checked file by file against the manifest and inspected as
complete at its batch before the stream's pointer moves to it. What differs is where the bytes go: a
server-side ``CopyObject`` per file, pinned to the version that was hashed and proven equal to it
(``rewind.checkpoints.s3_objects``), so a savepoint of a stream on a cluster never travels through the
machine that takes it.

A restore's last gate reads every restored object back and hashes it: the stream will read those bytes,
and a savepoint changed after it was taken (or a copy gone wrong) is refused naming the file, with the
new prefix removed and the stream's pointer untouched.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from rewind.checkpoints.manifest import (
    FILES_DIR,
    MANIFEST,
    FileEntry,
    Manifest,
    new_savepoint_id,
    savepoint_prefix,
    verify_file,
)
from rewind.checkpoints.s3_objects import (
    CopyMismatch,
    ObjectDigest,
    copy_object,
    delete_quietly,
    digest,
    keys_under,
    prefix_empty,
)
from rewind.checkpoints.savepoint_errors import FileVanished, NothingToSave, SavepointCorrupt, SavepointRefused
from rewind.checkpoints.store import S3CheckpointStore, parse_s3_url
from rewind.registry import StreamSpec

log = logging.getLogger(__name__)


def _checkpoint_store(client: Any, location: str) -> S3CheckpointStore:
    bucket, prefix = parse_s3_url(location)
    return S3CheckpointStore(client, bucket, prefix, scheme=location.split("://", 1)[0])


def create_in_s3(spec: StreamSpec, store: Any, location: str, mode: str, spark_version: str) -> Manifest:
    """A savepoint of the checkpoint at ``location`` into ``store`` (``rewind.s3.S3Store``), copied inside S3;
    retried once with the newer complete batch when Spark cleans up a file under the copy."""
    try:
        return _copy_batch(spec, store, location, mode, spark_version)
    except FileVanished as exc:
        log.warning("%s; retrying once with the newest complete batch", exc)
        try:
            return _copy_batch(spec, store, location, mode, spark_version)
        except FileVanished as again:
            raise FileVanished(f"the checkpoint changed under the copy twice ({again}); retry, or use --stop "
                               "for a copy of a stopped stream") from again


def _copy_batch(spec: StreamSpec, store: Any, location: str, mode: str, spark_version: str) -> Manifest:
    from rewind.checkpoints.inspection import CheckpointError, inspect_checkpoint, resume_files, state_versions

    source = _checkpoint_store(store.client, location)
    if not [f for f in source.list_dir("commits")[1] if f.isdigit()]:
        raise NothingToSave(f"stream {spec.name} has no committed batch in {location} yet: nothing to save")
    report = inspect_checkpoint(source)
    batch = report.last_complete
    if batch is None:
        raise SavepointRefused(f"{location} has no complete batch to save"
                               + "".join(f"; {p.file}: {p.detail}" for p in report.errors[:2]))
    info = report.batch(batch)
    try:
        rels = resume_files(source, batch)
    except CheckpointError as exc:
        raise FileVanished(str(exc)) from exc
    now = datetime.now(UTC)
    sid = new_savepoint_id(batch, now)
    prefix = savepoint_prefix(spec.name, sid)
    copied: list[str] = []
    entries: list[FileEntry] = []
    try:
        for rel in rels:
            key = prefix + FILES_DIR + rel
            try:
                done = copy_object(store.client, source.bucket, source.prefix + rel, store.bucket, key)
            except FileNotFoundError:
                raise FileVanished(f"{source.location}{rel} vanished during the copy (Spark cleaned it up)") from None
            copied.append(key)
            entries.append(FileEntry(rel, done.size, done.sha256))
    except BaseException:
        delete_quietly(store, copied)
        raise
    manifest = Manifest(savepoint_id=sid, stream=spec.name, batch_id=batch,
                        offsets=info.offsets[0] if info and info.offsets else {},
                        state_versions=state_versions(report, batch), files=tuple(entries),
                        spark_version=spark_version, config_hash=spec.config_hash(), created_at=now, mode=mode,
                        query_id=report.query_id, source_checkpoint=location)
    store.put_bytes(prefix + MANIFEST, manifest.to_json().encode())  # last: now the savepoint exists
    return manifest


def s3_restore_destination(client: Any, checkpoint: str, savepoint_id: str, to: str | None) -> str:
    """``--to`` (an ``s3a://`` prefix with nothing under it), else a fresh sibling of the checkpoint's prefix
    (``<checkpoint>.restored-<id>``, ``-2``...)."""
    if to is not None:
        bucket, prefix = parse_s3_url(to)
        if not prefix.strip("/"):
            raise SavepointRefused(f"--to {to} names a bucket, not a prefix: restore into a prefix of its own")
        if not prefix_empty(client, bucket, prefix.rstrip("/") + "/"):
            raise SavepointRefused(f"--to {to} already holds objects: restore never overwrites")
        return to.rstrip("/")
    base = checkpoint.rstrip("/")
    bucket, prefix = parse_s3_url(base)
    dest, n = f"{base}.restored-{savepoint_id}", 2
    while not prefix_empty(client, bucket, parse_s3_url(dest)[1] + "/"):
        dest, n = f"{base}.restored-{savepoint_id}-{n}", n + 1
    return dest


def restore_into_s3(store: Any, manifest: Manifest, dest: str) -> float:
    """Copy the savepoint's files into the fresh ``dest`` inside S3, then prove the result: every object read
    back against the manifest, nothing else under ``dest``, complete at the manifest's batch. On any failure the
    new prefix is removed. Returns the seconds it took."""
    from rewind.checkpoints.inspection import inspect_checkpoint

    started = time.monotonic()
    client = store.client
    bucket, prefix = parse_s3_url(dest)
    prefix = prefix.rstrip("/") + "/"
    source = savepoint_prefix(manifest.stream, manifest.savepoint_id) + FILES_DIR
    try:
        for entry in manifest.files:
            head = _etag(client, store.bucket, source + entry.path, store)
            copy_object(client, store.bucket, source + entry.path, bucket, prefix + entry.path,
                        source=ObjectDigest(entry.size, entry.sha256, head))
        for entry in manifest.files:  # the last gate: the bytes the stream will read
            got = digest(client, bucket, prefix + entry.path)
            verify_file(entry, got.size, got.sha256)
        extra = sorted(set(keys_under(client, bucket, prefix)) - {prefix + e.path for e in manifest.files})
        if extra:
            raise SavepointCorrupt(f"{extra[0][len(prefix):]}: not in the manifest (+{len(extra) - 1} more)")
        report = inspect_checkpoint(S3CheckpointStore(client, bucket, prefix, scheme=dest.split("://", 1)[0]))
        if report.last_complete != manifest.batch_id:
            raise SavepointCorrupt(f"the restored checkpoint's last complete batch is {report.last_complete}, the "
                                   f"manifest says {manifest.batch_id}")
    except BaseException as exc:
        leftovers = keys_under(client, bucket, prefix)
        if leftovers:
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in leftovers[:1000]],
                                                         "Quiet": True})
        if isinstance(exc, CopyMismatch):
            raise SavepointCorrupt(str(exc)) from None
        raise
    return time.monotonic() - started


def _etag(client: Any, bucket: str, key: str, store: Any) -> str:
    """The ETag of a savepoint's file (its copy is pinned to it); SavepointCorrupt when the file is missing."""
    try:
        return str(client.head_object(Bucket=bucket, Key=key)["ETag"]).strip('"')
    except Exception as exc:  # noqa: BLE001 - botocore raises ClientError(404) for a missing key
        if "404" in str(exc) or "Not Found" in str(exc):
            raise SavepointCorrupt(f"{key.split(FILES_DIR, 1)[-1]}: missing from {store.url(key.rsplit('/', 1)[0])} "
                                   "(partial savepoint)") from None
        raise


def restore_stream_into_s3(spec: StreamSpec, store: Any, manifest: Manifest, to: str | None) -> str:
    """The S3 half of ``savepoints.restore_savepoint``: a fresh prefix for ``spec``, filled and proven; the caller
    then switches the pointer. SavepointCorrupt says that nothing was restored."""
    dest = s3_restore_destination(store.client, spec.checkpoint, manifest.savepoint_id, to)
    try:
        restore_into_s3(store, manifest, dest)
    except SavepointCorrupt as exc:
        raise SavepointCorrupt(f"savepoint {manifest.savepoint_id} of {spec.name} refused: {exc}; nothing was "
                               "restored and the stream's checkpoint is unchanged") from None
    return dest
