"""The shared control store: one S3 object per document, updated with S3's conditional writes.

Why S3: it is where a many-host deployment already keeps checkpoints and savepoints, every worker
reaches it, and it offers atomic conditional writes: ``PutObject`` with ``If-None-Match: *``
creates only if the key is absent, with ``If-Match: <etag>`` replaces only the version read; a
lost race answers 412 and writes nothing. AWS S3 has both since 2024; the embedded SeaweedFS
(4.x) honours both, and of 16 writers racing on one key exactly one wins (checked when this
store was written). A conditional write whose answer was lost and retried also answers 412: the
object is then read back, and if it holds exactly the bytes sent, the write counts as done.

Layout: ``s3://BUCKET/PREFIX/<name>.json`` for one stream (``rewind.control.location`` chooses
the prefix, by default beside the stream's checkpoint).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rewind.control.store import ControlStore, ControlStoreError, Versioned, encode

__all__ = ["S3ControlStore"]

_CONDITION_FAILED = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


class S3ControlStore(ControlStore):
    """The documents of ``stream`` under ``s3://bucket/prefix/`` (see the module docstring)."""

    def __init__(self, client: Any, bucket: str, prefix: str, stream: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.stream = stream

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}.json" if self.prefix else f"{name}.json"

    def read(self, name: str) -> Versioned | None:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key(name))
            data = got["Body"].read()
        except Exception as exc:  # noqa: BLE001 - botocore's errors are translated here
            if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise self._error("read", name, exc) from exc
        try:
            doc = json.loads(data)
        except ValueError:
            doc = {}
        return Versioned(doc if isinstance(doc, dict) else {}, str(got["ETag"]))

    def create(self, name: str, doc: dict[str, Any]) -> str | None:
        return self._put(name, doc, IfNoneMatch="*")

    def replace(self, name: str, doc: dict[str, Any], version: str) -> str | None:
        return self._put(name, doc, IfMatch=version)

    def write(self, name: str, doc: dict[str, Any]) -> str:
        version = self._put(name, doc)
        assert version is not None  # an unconditional write has no condition to fail
        return version

    def delete(self, name: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key(name))
        except Exception as exc:  # noqa: BLE001
            if _code(exc) not in ("NoSuchKey", "404", "NotFound"):
                raise self._error("delete", name, exc) from exc

    def _put(self, name: str, doc: dict[str, Any], **condition: str) -> str | None:
        data = encode(doc)
        try:
            put = self.client.put_object(Bucket=self.bucket, Key=self.key(name), Body=data,
                                         ContentType="application/json", **condition)
        except Exception as exc:  # noqa: BLE001
            if _code(exc) not in _CONDITION_FAILED:
                raise self._error("write", name, exc) from exc
            return self._landed(name, data)
        return str(put["ETag"])

    def _landed(self, name: str, data: bytes) -> str | None:
        """After a 412: the version if the object holds exactly ``data`` (a retried write of ours
        that had landed), else None (another writer won)."""
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key(name))
            stored = got["Body"].read()
        except Exception:  # noqa: BLE001 - the condition failed; what is there does not matter
            return None
        return str(got["ETag"]) if hashlib.sha256(stored).digest() == hashlib.sha256(data).digest() else None

    def _error(self, what: str, name: str, exc: Exception) -> ControlStoreError:
        return ControlStoreError(f"cannot {what} {self.where}/{name}.json: {type(exc).__name__}: {exc} (is S3 "
                                 "reachable with these credentials? see `rewind services status`)")
