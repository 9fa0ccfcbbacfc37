"""Checkpoint files moved and copied inside S3, server-side, and proven to be what they were.

Why: a stream on a cluster keeps its checkpoint in S3 (``s3a://``), and its savepoints are in S3 too;
copying a file by downloading and uploading it would send every byte through the machine that runs the
tool twice. ``CopyObject`` copies inside S3. What it cannot do is say which bytes it copied, so each copy
here is pinned and checked:

- the source is read once to hash it (SHA-256, what a manifest records; the size and the ``ETag`` of
  the version read come with it);
- the copy names that version (``CopySourceIfMatch``: S3 refuses it when the object changed since);
- the copy's own checksum must equal the source's: the SHA-256 S3 computed when it says one
  (``ChecksumAlgorithm``, AWS), else the ``ETag`` (for an object written in one part, the MD5 of its
  content; SeaweedFS answers no SHA-256 for a copy); where neither can tell (a multipart source), the
  copy is read back and hashed.

A *move* (``repair``'s quarantine) is such a copy, then the deletion of the source: the file exists
under its new key, proven equal, before the old key goes. Nothing is ever deleted that was not copied.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from rewind.errors import Failed

log = logging.getLogger(__name__)
CHUNK = 1 << 20


class CopyMismatch(Failed, RuntimeError):
    """A server-side copy is not what its source was; the message names both keys."""


@dataclass(frozen=True)
class ObjectDigest:
    """What a read of one object found: its size, SHA-256 (hex) and ETag (the version that was read)."""

    size: int
    sha256: str
    etag: str


def _missing(client: Any, exc: Exception) -> bool:
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
    return isinstance(exc, client.exceptions.NoSuchKey) or code in ("404", "NoSuchKey", "NotFound")


def digest(client: Any, bucket: str, key: str) -> ObjectDigest:
    """Read an object to its end; its size, SHA-256 and ETag. FileNotFoundError when it does not exist."""
    try:
        resp = client.get_object(Bucket=bucket, Key=key)
    except Exception as exc:  # noqa: BLE001 - botocore's NoSuchKey is built per client
        if _missing(client, exc):
            raise FileNotFoundError(f"s3://{bucket}/{key}") from None
        raise
    h, size = hashlib.sha256(), 0
    for chunk in resp["Body"].iter_chunks(CHUNK):
        h.update(chunk)
        size += len(chunk)
    return ObjectDigest(size, h.hexdigest(), str(resp.get("ETag", "")).strip('"'))


def copy_object(client: Any, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str,
                source: ObjectDigest | None = None) -> ObjectDigest:
    """Copy ``src`` to ``dst`` inside S3 and prove the copy equals the source; returns the source's digest
    (read here unless given). FileNotFoundError when the source is gone; CopyMismatch when the copy differs."""
    source = source or digest(client, src_bucket, src_key)
    pinned = {"CopySourceIfMatch": f'"{source.etag}"'} if source.etag else {}
    try:
        resp = client.copy_object(Bucket=dst_bucket, Key=dst_key, ChecksumAlgorithm="SHA256",
                                  CopySource={"Bucket": src_bucket, "Key": src_key}, **pinned)
    except Exception as exc:  # noqa: BLE001
        if _missing(client, exc):
            raise FileNotFoundError(f"s3://{src_bucket}/{src_key}") from None
        if "PreconditionFailed" in str(exc):
            raise CopyMismatch(f"s3://{src_bucket}/{src_key} changed while it was copied (its ETag is no longer "
                               f"{source.etag})") from exc
        raise
    result = resp.get("CopyObjectResult", {})
    s3_sha = result.get("ChecksumSHA256")
    if s3_sha:
        if base64.b64decode(s3_sha).hex() != source.sha256:
            raise CopyMismatch(f"s3://{dst_bucket}/{dst_key}: S3's SHA-256 of the copy differs from its source "
                               f"s3://{src_bucket}/{src_key}")
        return source
    etag = str(result.get("ETag", "")).strip('"')
    if etag and "-" not in source.etag and etag == source.etag:
        return source
    copied = digest(client, dst_bucket, dst_key)  # no checksum to compare: read the copy back
    if (copied.size, copied.sha256) != (source.size, source.sha256):
        raise CopyMismatch(f"s3://{dst_bucket}/{dst_key} ({copied.size} bytes) differs from its source "
                           f"s3://{src_bucket}/{src_key} ({source.size} bytes)")
    return source


def move_object(client: Any, bucket: str, src_key: str, dst_key: str) -> ObjectDigest:
    """Move one object within a bucket: a proven copy, then the source deleted."""
    moved = copy_object(client, bucket, src_key, bucket, dst_key)
    client.delete_object(Bucket=bucket, Key=src_key)
    return moved


def keys_under(client: Any, bucket: str, prefix: str) -> list[str]:
    """Every key under ``prefix`` (directory markers, keys ending in '/', left out)."""
    out: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith("/")]
    return out


def prefix_empty(client: Any, bucket: str, prefix: str) -> bool:
    resp = client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    return int(resp.get("KeyCount", 0)) == 0


def put_json(client: Any, bucket: str, key: str, text: str) -> None:
    client.put_object(Bucket=bucket, Key=key, Body=text.encode(), ContentType="application/json")


def delete_quietly(store: Any, keys: list[str]) -> None:
    """Remove a half-made savepoint's objects (best effort: a leftover without a manifest is no savepoint)."""
    if keys:
        try:
            store.delete(keys)
        except Exception as exc:  # noqa: BLE001 - a leftover without manifest is harmless; prune removes it
            log.warning("could not remove %d partial savepoint object(s): %s", len(keys), exc)
