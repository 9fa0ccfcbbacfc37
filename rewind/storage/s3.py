"""The S3 backend of ``rewind.storage``: objects under ``s3://bucket/prefix/`` (``s3a://`` for a stream's
checkpoint: the same objects, the scheme Spark writes them through).

Why copies stay inside S3: a stream on a cluster keeps its checkpoint in S3 and its savepoints are in S3
too; copying a file by downloading and uploading it would send every byte through the machine that runs the
tool twice. ``CopyObject`` copies inside S3. What it cannot do is say which bytes it copied, so each copy
here is pinned and checked:

- the source is read once to hash it (SHA-256, what a manifest records; the ``ETag`` of the version read
  comes with it), unless the caller knows its digest (a savepoint's manifest: then only its ``ETag`` is
  asked);
- the copy names that version (``CopySourceIfMatch``: S3 refuses it when the object changed since);
- the copy's own checksum must equal the source's: the SHA-256 S3 computed when it says one
  (``ChecksumAlgorithm``, AWS), else the ``ETag`` (for an object written in one part, the MD5 of its
  content; SeaweedFS answers no SHA-256 for a copy); where neither can tell (a multipart source), the
  copy is read back and hashed.

A move is such a copy, then the deletion of the source: the file exists under its new key, proven equal,
before the old key goes (S3 has no rename). Between two S3 services (other endpoints) a copy streams
through this machine instead.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import tempfile
from collections.abc import Callable, Iterable
from typing import IO, Any

from rewind.storage.base import CHUNK, CopyMismatch, Digest, FileInfo, Progress, Storage, sha256_of
from rewind.storage.s3_config import S3Config, S3Error, client_for, format_s3_url, is_missing, s3_errors

__all__ = ["S3Storage"]

log = logging.getLogger(__name__)


class S3Storage(Storage):
    """The objects under ``prefix`` of ``config.bucket`` (see ``rewind.storage.base`` for the contract).

    ``S3Storage(config)`` is a whole bucket (the savepoint store); ``rewind.storage.location.open_storage``
    opens a checkpoint's prefix. The client is the process's one for ``config`` (``client_for``)."""

    def __init__(self, config: S3Config, prefix: str = "", *, scheme: str = "s3", client: Any = None) -> None:
        self.config = config
        self.bucket = config.bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.scheme = scheme
        self.client = client if client is not None else client_for(config)
        self.location = f"{scheme}://{self.bucket}/{self.prefix}"
        self.reads = 0

    def key(self, rel: str) -> str:
        return self.prefix + rel

    def url(self, rel: str = "") -> str:
        return self.location + rel

    def _errors(self, what: str) -> Any:
        return s3_errors(self.config.where, what)

    def _dir(self, rel: str) -> str:
        return self.prefix + (rel.strip("/") + "/" if rel.strip("/") else "")

    def check(self) -> None:
        from botocore.exceptions import ClientError

        with self._errors(f"checking bucket {self.bucket}"):
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket"):
                    raise S3Error(f"bucket {self.bucket} does not exist at {self.config.where} (create it, or set "
                                  "REWIND_S3_BUCKET / --bucket)") from exc
                raise

    def list_dir(self, rel: str = "") -> tuple[list[str], list[str]]:
        base = self._dir(rel)
        dirs: list[str] = []
        files: list[str] = []
        with self._errors(f"listing {self.url(rel)}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base,
                                                                              Delimiter="/"):
                dirs += [p["Prefix"][len(base):].rstrip("/") for p in page.get("CommonPrefixes", [])]
                files += [o["Key"][len(base):] for o in page.get("Contents", []) if o["Key"] != base]
        return dirs, files

    def list_files(self, rel: str = "") -> list[FileInfo]:
        out: list[FileInfo] = []
        with self._errors(f"listing {self.url(rel)}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                              Prefix=self._dir(rel)):
                out += [FileInfo(o["Key"][len(self.prefix):], int(o["Size"]), o["LastModified"])
                        for o in page.get("Contents", []) if not o["Key"].endswith("/")]
        return out

    def exists(self, rel: str = "") -> bool:
        if rel:
            return self.size(rel) is not None
        with self._errors(f"listing {self.location}"):
            resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        return int(resp.get("KeyCount", 0)) > 0

    def size(self, rel: str) -> int | None:
        with self._errors(f"reading {self.url(rel)}"):
            try:
                return int(self.client.head_object(Bucket=self.bucket, Key=self.key(rel))["ContentLength"])
            except Exception as exc:  # noqa: BLE001 - botocore raises ClientError(404) for a missing key
                if is_missing(exc):
                    return None
                raise

    def _get(self, rel: str) -> Any:
        """The GET of one object; FileNotFoundError when it does not exist."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.key(rel))
        except Exception as exc:  # noqa: BLE001 - botocore's NoSuchKey is built per client
            if is_missing(exc):
                raise FileNotFoundError(self.url(rel)) from None
            raise

    def read_bytes(self, rel: str) -> bytes:
        self.reads += 1
        with self._errors(f"reading {self.url(rel)}"):
            return bytes(self._get(rel)["Body"].read())

    def _digest(self, rel: str) -> tuple[Digest, str]:
        """The object read to its end: its digest and the ETag of the version that was read."""
        self.reads += 1
        h, size = hashlib.sha256(), 0
        with self._errors(f"reading {self.url(rel)}"):
            resp = self._get(rel)
            for chunk in resp["Body"].iter_chunks(CHUNK):
                h.update(chunk)
                size += len(chunk)
        return Digest(size, h.hexdigest()), str(resp.get("ETag", "")).strip('"')

    def digest(self, rel: str) -> Digest:
        return self._digest(rel)[0]

    def write_bytes(self, rel: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        with self._errors(f"writing {self.url(rel)}"):
            self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, ContentType=content_type)

    def receive(self, fh: IO[bytes], rel: str, progress: Progress | None = None) -> Digest:
        if not fh.seekable():  # hashed first, then uploaded (multipart when large): it must be read twice
            with tempfile.SpooledTemporaryFile(CHUNK * 8) as spool:
                while chunk := fh.read(CHUNK):
                    spool.write(chunk)
                spool.seek(0)
                return self.receive(spool, rel, progress)  # type: ignore[arg-type]
        got = sha256_of(fh)
        fh.seek(0)
        with self._errors(f"uploading {self.url(rel)}"):
            self.client.upload_fileobj(fh, self.bucket, self.key(rel), Callback=progress)
        return got

    def copy(self, rel: str, dest: Storage, dest_rel: str, *, source: Digest | None = None,
             progress: Progress | None = None) -> Digest:
        if not (isinstance(dest, S3Storage) and dest.config.endpoint == self.config.endpoint):
            self.reads += 1
            with self._errors(f"downloading {self.url(rel)}"):  # streamed through here: another service
                return dest.receive(self._get(rel)["Body"], dest_rel, progress)
        copied = self._copy_inside(rel, dest, dest_rel, source)
        if progress:
            progress(copied.size)
        return copied

    def _copy_inside(self, rel: str, dest: S3Storage, dest_rel: str, source: Digest | None) -> Digest:
        """A server-side copy, pinned and proven (see the module docstring)."""
        if source is None:
            source, etag = self._digest(rel)
        else:
            with self._errors(f"reading {self.url(rel)}"):
                try:
                    etag = str(self.client.head_object(Bucket=self.bucket, Key=self.key(rel))["ETag"]).strip('"')
                except Exception as exc:  # noqa: BLE001
                    if is_missing(exc):
                        raise FileNotFoundError(self.url(rel)) from None
                    raise
        pinned = {"CopySourceIfMatch": f'"{etag}"'} if etag else {}
        with dest._errors(f"copying {self.url(rel)} to {dest.url(dest_rel)}"):
            try:
                resp = dest.client.copy_object(Bucket=dest.bucket, Key=dest.key(dest_rel), ChecksumAlgorithm="SHA256",
                                               CopySource={"Bucket": self.bucket, "Key": self.key(rel)}, **pinned)
            except Exception as exc:  # noqa: BLE001
                if is_missing(exc):
                    raise FileNotFoundError(self.url(rel)) from None
                if "PreconditionFailed" in str(exc):
                    raise CopyMismatch(f"{self.url(rel)} changed while it was copied (its ETag is no longer "
                                       f"{etag})") from exc
                raise
        result = resp.get("CopyObjectResult", {})
        s3_sha = result.get("ChecksumSHA256")
        if s3_sha:
            if base64.b64decode(s3_sha).hex() != source.sha256:
                raise CopyMismatch(f"{dest.url(dest_rel)}: S3's SHA-256 of the copy differs from its source "
                                   f"{self.url(rel)}")
            return source
        copy_etag = str(result.get("ETag", "")).strip('"')
        if copy_etag and "-" not in etag and copy_etag == etag:
            return source
        copied = dest.digest(dest_rel)  # no checksum to compare: read the copy back
        if copied != source:
            raise CopyMismatch(f"{dest.url(dest_rel)} ({copied.size} bytes) differs from its source "
                               f"{self.url(rel)} ({source.size} bytes)")
        return source

    def delete(self, rels: Iterable[str]) -> None:
        keys = [self.key(r) for r in rels]
        for i in range(0, len(keys), 1000):
            batch = keys[i:i + 1000]
            with self._errors(f"deleting {len(batch)} object(s) under {format_s3_url(self.bucket, batch[0])}"):
                resp = self.client.delete_objects(Bucket=self.bucket,
                                                  Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
            if resp.get("Errors"):
                e = resp["Errors"][0]
                raise S3Error(f"S3 at {self.config.where} did not delete {format_s3_url(self.bucket, e.get('Key', ''))}"
                              f": {e.get('Code')} {e.get('Message', '')} (+{len(resp['Errors']) - 1} more)")

    def build_tree(self, fill: Callable[[Storage], None]) -> None:
        try:
            fill(self)
        except BaseException:
            try:
                self.delete([f.path for f in self.list_files()])
            except Exception as exc:  # noqa: BLE001 - the first error is the one to raise
                log.warning("could not remove the half-made %s: %s", self.location, exc)
            raise
