"""Which control store a stream uses: its registry ``control`` key, else beside its checkpoint.

| ``control`` | ``checkpoint`` | store |
|---|---|---|
| ``s3://BUCKET/PREFIX`` | any | ``S3ControlStore`` under ``PREFIX/<stream>`` |
| a directory | any | ``DirectoryStore`` there |
| unset | ``s3a://BUCKET/KEY`` | ``S3ControlStore`` under ``KEY.control`` (beside the checkpoint) |
| unset | a local path | ``DirectoryStore`` in ``<checkpoint>.control`` (beside the checkpoint) |

Why beside the checkpoint by default: the lease fences the checkpoint, so it must be seen by whoever
can write the checkpoint. Hosts that share a checkpoint directory (an NFS or EFS volume, the usual
disk of Celery or Kubernetes workers) share its store with no further setting; a store in each
host's ``status_dir`` (the default before) let a second host take its own lease on a checkpoint
the first was writing. A store found in ``status_dir`` moves on first use (``rewind.control.moving``),
and the first lease leaves a marker beside the checkpoint naming its store
(``rewind.control.marker``), so a driver given another store is refused.
"""

from __future__ import annotations

from typing import Any

from rewind.control.directory import DirectoryStore
from rewind.control.moving import move_from_status_dir
from rewind.control.s3 import S3ControlStore
from rewind.control.store import ControlStore
from rewind.paths import control_dir
from rewind.storage.s3_config import s3_client

__all__ = ["beside_checkpoint", "control_location", "control_store"]


def control_location(spec: Any) -> str:
    """The store's location as a string: ``s3://bucket/prefix`` or a directory."""
    control = getattr(spec, "control", None)
    if control:
        return str(control).rstrip("/")
    checkpoint = str(getattr(spec, "checkpoint", "")).rstrip("/")
    if checkpoint.startswith("s3a://"):
        return "s3://" + checkpoint.removeprefix("s3a://") + ".control"
    return str(control_dir(spec))


def _open(where: str, spec: Any, shared_prefix: bool) -> ControlStore:
    if where.startswith(("s3://", "s3a://")):
        bucket, _, prefix = where.split("://", 1)[1].partition("/")
        if shared_prefix:  # a shared store of many streams: one prefix each
            prefix = f"{prefix.strip('/')}/{spec.name}".strip("/")
        return S3ControlStore(s3_client(), bucket, prefix, spec.name)
    return DirectoryStore(where, spec.name)


def control_store(spec: Any) -> ControlStore:
    """The control store of ``spec`` (a registry ``StreamSpec``), per the table above."""
    store = _open(control_location(spec), spec, bool(getattr(spec, "control", None)))
    if isinstance(store, DirectoryStore) and not getattr(spec, "control", None):
        move_from_status_dir(spec, store)
    return store


def beside_checkpoint(spec: Any) -> ControlStore:
    """The store the default would give (beside the checkpoint), whatever ``control`` says: where
    the marker naming the stream's real store is kept."""
    checkpoint = str(spec.checkpoint).rstrip("/")
    if checkpoint.startswith("s3a://"):
        return _open("s3://" + checkpoint.removeprefix("s3a://") + ".control", spec, False)
    return DirectoryStore(checkpoint + ".control", spec.name)
