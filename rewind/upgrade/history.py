"""Where upgrades leave their memory: the history of changes, the registry entries kept by hash, and
the guard of an upgrade in progress. The one module that reads and writes them.

Why one module: these are documents two processes of Rewind must agree on (the upgrade that runs,
the supervisor that must stand aside meanwhile, the Rewind page that shows the history), so they
belong in the stream's shared control store (``rewind.control``: S3 beside an ``s3a://``
checkpoint, on one host the files ``<status_dir>/<stream>.<name>.json``). Every reader and writer
goes through ``read_doc``, ``write_doc``, ``create_doc`` and ``delete_doc``.

Documents (one stream each):

- ``upgrades``: ``{"records": [...]}``, the history, oldest first (``KEEP`` kept): every upgrade and
  state rescale with from, to, mode, the savepoints it made or used, result and why.
- ``entries``: ``{"<config hash>": {"text": ..., "transform": ..., "saved_at": ...}}``, the registry
  entries an upgrade replaced, as YAML text exactly as they stood in the registry (comments and
  ``${VAR}`` kept), so a rollback writes back the very entry that ran.
- ``upgrade``: the guard of the upgrade in progress (who, since when, which step); absent when none.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any

from rewind.control.location import control_store
from rewind.control.store import update

#: History records kept (older ones are dropped; the savepoints they name stay until retention).
KEEP = 100
#: Registry entries kept by hash.
KEEP_ENTRIES = 50


def _store(spec: Any) -> Any:

    return control_store(spec)


def read_doc(spec: Any, name: str) -> dict[str, Any] | None:
    """The document, or None when absent (a document that is not a JSON object reads as absent)."""
    got = _store(spec).read(name)
    return got.doc if got is not None and isinstance(got.doc, dict) and got.doc else None


def write_doc(spec: Any, name: str, doc: dict[str, Any]) -> None:
    """Replace the document (whole: a reader never sees half of it)."""
    _store(spec).write(name, json.loads(json.dumps(doc, default=str)))


def create_doc(spec: Any, name: str, doc: dict[str, Any]) -> bool:
    """Write the document only if it is absent; False when another writer has it (atomic: a conditional
    create, ``If-None-Match`` on S3)."""
    return _store(spec).create(name, json.loads(json.dumps(doc, default=str))) is not None


def delete_doc(spec: Any, name: str) -> None:
    _store(spec).delete(name)


# --------------------------------------------------------------------------- the history
def new_record_id(now: float | None = None) -> str:
    """Sortable by time and unique: ``20261127T101500Z-3f2a``."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now or time.time()))}-{uuid.uuid4().hex[:4]}"


def read_history(spec: Any) -> list[dict[str, Any]]:
    """Every upgrade and rescale recorded, oldest first."""
    doc = read_doc(spec, "upgrades") or {}
    records = doc.get("records")
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def save_record(spec: Any, record: dict[str, Any]) -> None:
    """Add ``record`` or replace the one with its ``id`` (a record is saved as each step ends, so an
    upgrade that dies half-way still says how far it got). A read-modify-write that loses no record to
    a writer on another host (``rewind.control.store.update``)."""

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        old = doc.get("records")
        records = [r for r in (old if isinstance(old, list) else [])
                   if isinstance(r, dict) and r.get("id") != record["id"]]
        records.append(json.loads(json.dumps(record, default=str)))
        records.sort(key=lambda r: str(r.get("id")))
        return {"records": records[-KEEP:]}

    update(_store(spec), "upgrades", change)


# --------------------------------------------------------------------------- registry entries by hash
def keep_entry(spec: Any, config_hash: str, text: str, transform: str) -> None:

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        doc[config_hash] = {"text": text, "transform": transform, "saved_at": time.time()}
        if len(doc) > KEEP_ENTRIES:
            for old in sorted(doc, key=lambda h: doc[h].get("saved_at", 0))[:len(doc) - KEEP_ENTRIES]:
                doc.pop(old)
        return doc

    update(_store(spec), "entries", change)


def kept_entry(spec: Any, config_hash: str) -> str | None:
    """The registry entry's YAML text kept under ``config_hash``, or None."""
    entry = (read_doc(spec, "entries") or {}).get(config_hash)
    return entry.get("text") if isinstance(entry, dict) else None


# --------------------------------------------------------------------------- the guard
def guard_doc(record_id: str, mode: str, step: str) -> dict[str, Any]:
    return {"id": record_id, "mode": mode, "step": step, "pid": os.getpid(), "host": socket.gethostname(),
            "since": time.time(), "at": time.time()}


def read_guard(spec: Any) -> dict[str, Any] | None:
    return read_doc(spec, "upgrade")
