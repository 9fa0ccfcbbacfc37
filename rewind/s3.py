"""S3 access for savepoints (boto3 only): where the bucket is, and errors that say what failed.

Why a wrapper: a savepoint must fail in seconds, naming the endpoint, when S3 is down
(boto3's defaults retry for minutes), and every caller wants the same translation of
botocore's many exception types into "unreachable" versus "refused".
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from rewind.checkpoints.store import parse_s3_url
from rewind.embedded.services import DEFAULT_REGION
from rewind.errors import Failed

__all__ = ["ObjectInfo", "S3Config", "S3Error", "S3Store", "S3Unreachable", "format_s3_url", "parse_s3_url",
           "resolve_s3_config", "s3_client"]

#: Seconds: an unreachable endpoint must fail fast (two attempts, short timeouts).
CONNECT_TIMEOUT_S = 3
READ_TIMEOUT_S = 20
MAX_ATTEMPTS = 2
CHUNK = 1 << 20


class S3Error(Failed, RuntimeError):
    """S3 answered but refused (no bucket, bad credentials...); the message names the endpoint."""


class S3Unreachable(S3Error):
    """S3 did not answer (connection refused, timeout, 5xx); worth retrying later."""


def format_s3_url(bucket: str, key: str = "") -> str:
    return f"s3://{bucket}/{key.lstrip('/')}"


@dataclass(frozen=True)
class S3Config:
    """Where savepoints go. ``endpoint`` None means AWS itself; None credentials: boto3's default chain."""

    bucket: str
    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    region: str = DEFAULT_REGION

    @property
    def where(self) -> str:
        return self.endpoint or f"AWS S3 ({self.region})"

    @classmethod
    def from_platform(cls, info: Any) -> "S3Config":
        """From a rewind.embedded.services.PlatformInfo (the embedded SeaweedFS)."""
        return cls(info.bucket, info.s3_endpoint, info.s3_access_key, info.s3_secret_key, info.s3_region)

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=self.region,
            config=Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                          retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
                          s3={"addressing_style": "path"} if self.endpoint else None),
        )


def resolve_s3_config(bucket: str | None = None, env: Mapping[str, str] | None = None,
                      services_dir: Path | None = None, *, require_bucket: bool = True) -> S3Config:
    """Per setting: the argument, else the environment (as PlatformInfo.env() sets it), else the
    embedded platform's services.json (like cli.resolve_bootstrap); fails naming all three."""
    from rewind.embedded.services import read_platform

    env = os.environ if env is None else env
    if services_dir is None:
        from rewind.settings import services_dir as default_services_dir

        services_dir = default_services_dir()
    info = read_platform(services_dir)
    bucket = bucket or env.get("REWIND_S3_BUCKET") or (info.bucket if info else None)
    if not bucket and require_bucket:
        raise S3Error("no S3 bucket for savepoints: set REWIND_S3_BUCKET (and AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                      "AWS_SECRET_ACCESS_KEY), or start the embedded platform with `rewind services up`")
    return S3Config(
        bucket or "",
        env.get("AWS_ENDPOINT_URL") or env.get("REWIND_S3_ENDPOINT") or (info.s3_endpoint if info else None),
        env.get("AWS_ACCESS_KEY_ID") or (info.s3_access_key if info else None),
        env.get("AWS_SECRET_ACCESS_KEY") or (info.s3_secret_key if info else None),
        env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or (info.s3_region if info else DEFAULT_REGION))


def s3_client() -> Any:
    """A boto3 S3 client configured as savepoints are (for reading ``s3://`` locations of any bucket)."""
    return resolve_s3_config(require_bucket=False).client()


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: datetime


class S3Store:
    """The few S3 operations savepoints need, on one bucket, with translated errors."""

    def __init__(self, config: S3Config, client: Any = None) -> None:
        self.config = config
        self.bucket = config.bucket
        self.client = client or config.client()

    def url(self, key: str = "") -> str:
        return format_s3_url(self.bucket, key)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

        try:
            yield
        except (ConnectionError, HTTPClientError) as exc:
            raise S3Unreachable(f"S3 at {self.config.where} is unreachable ({what}): {exc}") from exc
        except ClientError as exc:
            err = exc.response.get("Error", {})
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            message = f"S3 at {self.config.where} refused {what}: {err.get('Code')} {err.get('Message', '')}".strip()
            raise (S3Unreachable if status >= 500 else S3Error)(message) from exc
        except S3UploadFailedError as exc:
            raise S3Unreachable(f"S3 at {self.config.where}: {what} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise S3Error(f"S3 at {self.config.where}: {what} failed: {exc}") from exc

    def check(self) -> None:
        """Fail fast (S3Unreachable / S3Error) unless the bucket answers."""
        from botocore.exceptions import ClientError

        with self._errors(f"checking bucket {self.bucket}"):
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket"):
                    raise S3Error(f"bucket {self.bucket} does not exist at {self.config.where} (create it, or set "
                                  "REWIND_S3_BUCKET / --bucket)") from exc
                raise

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        with self._errors(f"listing {self.url(prefix)}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                out += [ObjectInfo(o["Key"], int(o["Size"]), o["LastModified"]) for o in page.get("Contents", [])]
        return out

    def list_dirs(self, prefix: str) -> list[str]:
        """Names of the 'folders' directly under ``prefix`` (which ends with '/')."""
        out: list[str] = []
        with self._errors(f"listing {self.url(prefix)}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix,
                                                                              Delimiter="/"):
                out += [p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", [])]
        return out

    def get_bytes(self, key: str) -> bytes | None:
        """The object's content, or None when it does not exist."""
        with self._errors(f"reading {self.url(key)}"):
            try:
                return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            except self.client.exceptions.NoSuchKey:
                return None

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        with self._errors(f"writing {self.url(key)}"):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)

    def upload(self, fh: IO[bytes], key: str, progress: Callable[[int], None] | None = None) -> None:
        """Upload an open file (multipart when large); ``progress`` gets byte counts."""
        with self._errors(f"uploading {self.url(key)}"):
            self.client.upload_fileobj(fh, self.bucket, key, Callback=progress)

    def download(self, key: str, dest: Path, progress: Callable[[int], None] | None = None) -> tuple[int, str]:
        """Stream an object to ``dest``; returns (size, SHA-256 hex) of what was written.

        Raises FileNotFoundError when the object does not exist.
        """
        digest = hashlib.sha256()
        size = 0
        with self._errors(f"downloading {self.url(key)}"):
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            except self.client.exceptions.NoSuchKey:
                raise FileNotFoundError(self.url(key)) from None
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as out:
                for chunk in body.iter_chunks(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                    if progress:
                        progress(len(chunk))
        return size, digest.hexdigest()

    def delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = keys[i:i + 1000]
            with self._errors(f"deleting {len(batch)} object(s) under {self.url(batch[0])}"):
                resp = self.client.delete_objects(Bucket=self.bucket,
                                                  Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
            if resp.get("Errors"):
                e = resp["Errors"][0]
                raise S3Error(f"S3 at {self.config.where} did not delete {self.url(e.get('Key', ''))}: "
                              f"{e.get('Code')} {e.get('Message', '')} (+{len(resp['Errors']) - 1} more)")
