"""Which control store a stream uses: its registry ``control`` key, else beside its checkpoint.

| ``control`` | ``checkpoint`` | store |
|---|---|---|
| ``s3://BUCKET/PREFIX`` | any | ``S3ControlStore`` under ``PREFIX/<stream>`` |
| a directory | any | ``DirectoryStore`` there |
| unset | ``s3a://BUCKET/KEY`` | ``S3ControlStore`` under ``KEY.control`` (beside the checkpoint) |
| unset | a local path | ``DirectoryStore`` in ``status_dir`` (one host: the files of old) |

Why beside the checkpoint by default: whoever can run the stream can reach its checkpoint, so the
store is reachable from every worker that matters without another setting. A stream whose
checkpoint is on a shared file system (NFS, EFS) while its workers are many names an S3 store.
"""

from __future__ import annotations

from typing import Any

from rewind.control.directory import DirectoryStore
from rewind.control.s3 import S3ControlStore
from rewind.control.store import ControlStore
from rewind.storage.s3_config import s3_client

__all__ = ["control_location", "control_store"]


def control_location(spec: Any) -> str:
    """The store's location as a string: ``s3://bucket/prefix`` or a directory."""
    control = getattr(spec, "control", None)
    if control:
        return str(control).rstrip("/")
    checkpoint = str(getattr(spec, "checkpoint", "")).rstrip("/")
    if checkpoint.startswith("s3a://"):
        return "s3://" + checkpoint.removeprefix("s3a://") + ".control"
    return str(spec.status_dir)


def control_store(spec: Any) -> ControlStore:
    """The control store of ``spec`` (a registry ``StreamSpec``), per the table above."""
    where = control_location(spec)
    if where.startswith(("s3://", "s3a://")):
        bucket, _, prefix = where.split("://", 1)[1].partition("/")
        if getattr(spec, "control", None):  # a shared store of many streams: one prefix each
            prefix = f"{prefix.strip('/')}/{spec.name}".strip("/")

        return S3ControlStore(s3_client(), bucket, prefix, spec.name)
    return DirectoryStore(where, spec.name)
