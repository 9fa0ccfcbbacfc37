"""The marker beside a checkpoint that names the control store whose lease fences it.

Why: the lease keeps one driver per stream only among drivers that read the same store. Two hosts
given different stores (a ``control`` directory local to each, or one host on an old registry)
would each take a lease of their own and write one checkpoint at once; Spark's own log guard is
the only thing left between them. So the first driver to take a lease writes a marker beside the
checkpoint (``<checkpoint>.control/<stream>.store.json``, or the S3 object beside an ``s3a://``
checkpoint) naming its store and the store's id (a random id the store keeps as its ``store-id``
document: one path on two hosts may be two stores). A later driver whose store is another is
refused before its lease is taken or its session started: ``StoreMismatch``, exit 3, one line
naming the marker, the store it names, and the setting that fixes it.
"""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from rewind.control.directory import DirectoryStore
from rewind.control.location import beside_checkpoint
from rewind.control.s3 import S3ControlStore
from rewind.control.store import ControlStore
from rewind.errors import Refused

__all__ = ["MARKER", "STORE_ID", "StoreMismatch", "check_store_marker", "place", "store_id"]

MARKER = "store"
STORE_ID = "store-id"


class StoreMismatch(Refused):
    """The checkpoint is fenced by another control store than this driver's (nothing was started)."""


def place(store: ControlStore, name: str) -> str:
    """Where a document is, for messages: its file, or its S3 object."""
    if isinstance(store, DirectoryStore):
        return str(store.path(name))
    if isinstance(store, S3ControlStore):
        return f"s3://{store.bucket}/{store.key(name)}"
    return f"{store.where} ({name})"


def store_id(store: ControlStore) -> str:
    """The store's own id, created on first use (a conditional create: racing hosts agree on one)."""
    for _ in range(3):
        got = store.read(STORE_ID)
        if got is not None and got.doc.get("id"):
            return str(got.doc["id"])
        store.create(STORE_ID, {"id": uuid.uuid4().hex, "where": store.where, "at": time.time()})
    raise StoreMismatch(f"control store {store.where}: its {STORE_ID} document cannot be read back; "
                        "check that the store is writable and not shared with an older Rewind")


def check_store_marker(spec: Any, store: ControlStore) -> None:
    """Refuse (``StoreMismatch``) when the checkpoint's marker names another store than ``store``;
    write the marker when there is none."""
    mine = {"where": store.where, "id": store_id(store)}
    beside = beside_checkpoint(spec)
    for _ in range(3):
        got = beside.read(MARKER)
        if got is None:
            beside.create(MARKER, {**mine, "stream": spec.name, "checkpoint": str(spec.checkpoint),
                                   "by": socket.gethostname(), "at": time.time()})
            continue
        if got.doc.get("id") == mine["id"]:
            return
        theirs = got.doc.get("where", "?")
        raise StoreMismatch(
            f"stream {spec.name!r}: checkpoint {spec.checkpoint} is fenced by the control store {theirs} (marker "
            f"{place(beside, MARKER)}, by {got.doc.get('by', '?')}), not by this driver's "
            f"{store.where}: give every host the same `control:` in the registry (or none, for the store beside "
            f"the checkpoint); if {theirs} is retired, delete the marker")
    raise StoreMismatch(f"stream {spec.name!r}: the marker beside {spec.checkpoint} cannot be written or read "
                        f"({beside.where}); check that it is writable")
