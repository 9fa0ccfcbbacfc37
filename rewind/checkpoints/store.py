"""Read-only access to a checkpoint's files, on local disk or in S3, behind one small interface.

Why: inspection, repair and savepoints all reason about the same relative paths
(``offsets/7``, ``state/0/1/8.zip``); where the bytes live is an edge detail. Only
names are listed (no per-file stat), so listing stays cheap on a long history.
Every content read is counted (``reads``): the inspection tests prove with it that
the work done does not grow with the age of the stream.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol


class CheckpointStore(Protocol):
    location: str
    reads: int

    def exists(self, rel: str = "") -> bool: ...
    def list_dir(self, rel: str) -> tuple[list[str], list[str]]: ...  # (subdirectories, files)
    def read_bytes(self, rel: str) -> bytes: ...
    def size(self, rel: str) -> int | None: ...


class LocalStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)
        self.reads = 0

    def list_dir(self, rel: str) -> tuple[list[str], list[str]]:
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(self.root / rel) as it:
                for e in it:
                    (dirs if e.is_dir() else files).append(e.name)
        except (FileNotFoundError, NotADirectoryError):
            pass
        return dirs, files

    def read_bytes(self, rel: str) -> bytes:
        self.reads += 1
        return (self.root / rel).read_bytes()

    def exists(self, rel: str = "") -> bool:
        return os.path.exists(self.root / rel) if rel else self.root.is_dir()

    def any_batch_id(self, rel: str) -> int | None:
        """Some numeric entry of a directory, found without listing it all (the first one scandir yields)."""
        try:
            with os.scandir(self.root / rel) as it:
                for e in it:
                    if e.name.isdigit():
                        return int(e.name)
        except (FileNotFoundError, NotADirectoryError):
            pass
        return None

    def size(self, rel: str) -> int | None:
        try:
            return (self.root / rel).stat().st_size
        except OSError:
            return None


class S3CheckpointStore:
    """A checkpoint (or a savepoint's copy of one) under ``s3://bucket/prefix/`` (or ``s3a://``: a stream's)."""

    def __init__(self, client: Any, bucket: str, prefix: str, scheme: str = "s3") -> None:
        self.client, self.bucket = client, bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.location = f"{scheme}://{bucket}/{self.prefix}"
        self.reads = 0

    def exists(self, rel: str = "") -> bool:
        if rel:
            return self.size(rel) is not None
        resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        return resp.get("KeyCount", 0) > 0

    def list_dir(self, rel: str) -> tuple[list[str], list[str]]:
        base = self.prefix + (rel.strip("/") + "/" if rel.strip("/") else "")
        dirs: list[str] = []
        files: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base,
                                                                          Delimiter="/"):
            dirs += [p["Prefix"][len(base):].rstrip("/") for p in page.get("CommonPrefixes", [])]
            files += [o["Key"][len(base):] for o in page.get("Contents", []) if o["Key"] != base]
        return dirs, files

    def read_bytes(self, rel: str) -> bytes:
        self.reads += 1
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + rel)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            raise FileNotFoundError(f"{self.location}{rel}") from None

    def size(self, rel: str) -> int | None:
        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=self.prefix + rel)["ContentLength"])
        except Exception:  # noqa: BLE001 - botocore raises ClientError(404) for a missing key
            return None


#: URL schemes of a checkpoint in S3: ``s3://`` (boto3, savepoints) and ``s3a://`` (Hadoop's S3A, the
#: scheme Spark writes a stream checkpoint through); the same bucket and key either way.
S3_SCHEMES = ("s3://", "s3a://")


def is_s3_url(location: str | Path) -> bool:
    return str(location).startswith(S3_SCHEMES)


def parse_s3_url(url: str) -> tuple[str, str]:
    """'s3://bucket/some/prefix' (or 's3a://...') -> ('bucket', 'some/prefix')."""
    scheme = next((s for s in S3_SCHEMES if url.startswith(s)), None)
    if scheme is None or len(url) <= len(scheme):
        raise ValueError(f"{url!r} is not an s3://BUCKET/PREFIX (or s3a://) location")
    bucket, _, prefix = url[len(scheme):].partition("/")
    if not bucket:
        raise ValueError(f"{url!r} has no bucket")
    return bucket, prefix


def open_store(location: str | Path, s3_client: Any = None) -> CheckpointStore:
    """A store for a local path or an ``s3://`` / ``s3a://`` URL (``s3_client`` is needed for the latter)."""
    text = str(location)
    if is_s3_url(text):
        if s3_client is None:
            raise ValueError(f"{text}: an S3 client is needed to read a checkpoint in S3")
        return S3CheckpointStore(s3_client, *parse_s3_url(text), scheme=text.split("://", 1)[0])
    return LocalStore(text)

