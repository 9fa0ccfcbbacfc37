"""The quarantine of ``rewind checkpoint repair`` for a checkpoint in S3 (``s3a://``): the same plan as on a
local path (``rewind.checkpoints.repair``, which drives this), carried out by moving objects, never
deleting one.

The quarantine is the sibling prefix ``<checkpoint>.quarantine/<time>-batch<C>/`` (local:
``<checkpoint>.quarantine/``), files under their checkpoint-relative keys beside a ``record.json``
written before the first move (an interrupted repair still says what it was doing) and again at the end.
Each move is a server-side copy proven equal to its source, then the source's deletion
(``rewind.checkpoints.s3_objects.move_object``): S3 has no rename, and a file exists under its new key
before its old key goes.
"""

from __future__ import annotations

import json
from typing import Any

from rewind.checkpoints.s3_objects import move_object, prefix_empty, put_json
from rewind.checkpoints.store import S3CheckpointStore, parse_s3_url


def open_s3_checkpoint(location: str, client: Any = None) -> S3CheckpointStore:
    """The checkpoint at ``s3a://BUCKET/PREFIX`` (or ``s3://``), read with Rewind's S3 client."""
    if client is None:
        from rewind.s3 import s3_client

        client = s3_client()
    bucket, prefix = parse_s3_url(location)
    return S3CheckpointStore(client, bucket, prefix, scheme=location.split("://", 1)[0])


def quarantine_prefix(checkpoint_prefix: str, stamp: str, batch: int, attempt: int = 1) -> str:
    """``cp/demo/`` -> ``cp/demo.quarantine/20261127T101500Z-batch7/`` (``-2``, ``-3``... when taken)."""
    suffix = "" if attempt == 1 else f"-{attempt}"
    return f"{checkpoint_prefix.rstrip('/')}.quarantine/{stamp}-batch{batch}{suffix}/"


class S3Quarantine:
    """A fresh quarantine prefix beside the checkpoint in ``store``'s bucket."""

    def __init__(self, store: S3CheckpointStore, stamp: str, batch: int) -> None:
        self.store, self.client, self.bucket = store, store.client, store.bucket
        attempt = 1
        while not prefix_empty(self.client, self.bucket, quarantine_prefix(store.prefix, stamp, batch, attempt)):
            attempt += 1
        self.prefix = quarantine_prefix(store.prefix, stamp, batch, attempt)
        self.location = f"{store.location.split('://', 1)[0]}://{self.bucket}/{self.prefix}"

    def write_record(self, record: dict[str, Any]) -> None:
        put_json(self.client, self.bucket, self.prefix + "record.json", json.dumps(record, indent=1))

    def move(self, rel: str) -> None:
        move_object(self.client, self.bucket, self.store.prefix + rel, self.prefix + rel)
