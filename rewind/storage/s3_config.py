"""Where S3 is and how to talk to it: the settings, the one client cache, the URLs, the errors.

Why one place: savepoints, checkpoints in S3 (``s3a://``), the control store, the proofs and the replay
reports each made their own boto3 client (three caches, one per caller). A client costs ~50 ms to build and
is safe to share between threads, so ``client_for`` makes one per S3 configuration and process, and every
caller asks it.

Why a wrapper at all: a savepoint must fail in seconds, naming the endpoint, when S3 is down (boto3's
defaults retry for minutes), and every caller wants the same translation of botocore's many exception
types into "unreachable" (``S3Unreachable``: worth retrying) versus "refused" (``S3Error``).

The settings come from the arguments, else the environment (``REWIND_S3_BUCKET``, ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...), else boto3's default chain for credentials; never from a file of the
embedded platform: the command line puts those in its environment when it starts
(``rewind.embedded.services.export_platform_env``), Airflow gets them from its connections.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewind.errors import Failed

__all__ = ["DEFAULT_REGION", "S3Config", "S3Error", "S3Unreachable", "S3_SCHEMES", "client_for", "format_s3_url",
           "is_s3_url", "parse_s3_url", "resolve_s3_config", "s3_client", "s3_errors"]

#: Seconds: an unreachable endpoint must fail fast (two attempts, short timeouts).
CONNECT_TIMEOUT_S = 3
READ_TIMEOUT_S = 20
MAX_ATTEMPTS = 2
DEFAULT_REGION = "us-east-1"

#: URL schemes of S3: ``s3://`` (boto3, savepoints) and ``s3a://`` (Hadoop's S3A, the scheme Spark writes a
#: stream checkpoint through); the same bucket and key either way.
S3_SCHEMES = ("s3://", "s3a://")


class S3Error(Failed, RuntimeError):
    """S3 answered but refused (no bucket, bad credentials...); the message names the endpoint."""


class S3Unreachable(S3Error):
    """S3 did not answer (connection refused, timeout, 5xx); worth retrying later."""


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
        """From a rewind.embedded.services.PlatformInfo (the embedded SeaweedFS), handed in by its caller."""
        return cls(info.bucket, info.s3_endpoint, info.s3_access_key, info.s3_secret_key, info.s3_region)

    def client(self) -> Any:
        """The process's boto3 client for this configuration (``client_for``)."""
        return client_for(self)


_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def client_for(config: S3Config) -> Any:
    """One boto3 client per process and S3 configuration (the bucket aside), made on first use: fast failing
    (two attempts, short timeouts), path-style addressing for an endpoint of our own (SeaweedFS, MinIO)."""
    key = (config.endpoint, config.access_key, config.secret_key, config.region)
    with _CLIENTS_LOCK:  # boto3's default session is not safe to build clients from in two threads at once
        if key not in _CLIENTS:
            import boto3
            from botocore.config import Config

            _CLIENTS[key] = boto3.client(
                "s3", endpoint_url=config.endpoint, aws_access_key_id=config.access_key,
                aws_secret_access_key=config.secret_key, region_name=config.region,
                config=Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                              retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
                              s3={"addressing_style": "path"} if config.endpoint else None))
        return _CLIENTS[key]


def resolve_s3_config(bucket: str | None = None, env: Mapping[str, str] | None = None, *,
                      require_bucket: bool = True) -> S3Config:
    """Per setting: the argument, else the environment (as ``PlatformInfo.env()`` sets it); fails naming both."""
    env = os.environ if env is None else env
    bucket = bucket or env.get("REWIND_S3_BUCKET")
    if not bucket and require_bucket:
        raise S3Error("no S3 bucket for savepoints: set REWIND_S3_BUCKET (and AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                      "AWS_SECRET_ACCESS_KEY), or start the embedded platform with `rewind services up`")
    return S3Config(
        bucket or "",
        env.get("AWS_ENDPOINT_URL") or env.get("REWIND_S3_ENDPOINT") or None,
        env.get("AWS_ACCESS_KEY_ID") or None,
        env.get("AWS_SECRET_ACCESS_KEY") or None,
        env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION)


def s3_client() -> Any:
    """The client of the environment's S3 (for ``s3://`` and ``s3a://`` locations of any bucket)."""
    return client_for(resolve_s3_config(require_bucket=False))


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def is_missing(exc: BaseException) -> bool:
    """botocore's answer for a key that does not exist (``NoSuchKey`` from a GET, 404 from a HEAD)."""
    return type(exc).__name__ == "NoSuchKey" or error_code(exc) in ("404", "NoSuchKey", "NotFound")


@contextmanager
def s3_errors(where: str, what: str) -> Iterator[None]:
    """botocore's errors inside as ``S3Unreachable`` (no answer, 5xx) or ``S3Error`` (refused), naming
    ``where`` (the endpoint) and ``what`` was being done."""
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

    try:
        yield
    except (ConnectionError, HTTPClientError) as exc:
        raise S3Unreachable(f"S3 at {where} is unreachable ({what}): {exc}") from exc
    except ClientError as exc:
        err = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        message = f"S3 at {where} refused {what}: {err.get('Code')} {err.get('Message', '')}".strip()
        raise (S3Unreachable if status >= 500 else S3Error)(message) from exc
    except S3UploadFailedError as exc:
        raise S3Unreachable(f"S3 at {where}: {what} failed: {exc}") from exc
    except BotoCoreError as exc:
        raise S3Error(f"S3 at {where}: {what} failed: {exc}") from exc
