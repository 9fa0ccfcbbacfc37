"""Where upgrades leave their memory: the history of changes, the registry entries kept by hash, and
the guard of an upgrade in progress. The one module that reads and writes them.

Why one module: these are documents two processes of Rewind must agree on (the upgrade that runs,
the supervisor that must stand aside meanwhile, the Rewind page that shows the history), so they
belong in the stream's shared control store. Today they are JSON files beside the status
(``<status_dir>/<stream>.<name>.json``); every reader and writer goes through ``read_doc``,
``write_doc``, ``create_doc`` and ``delete_doc``, so moving them into the control store changes
these four functions and nothing else.

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
from pathlib import Path
from typing import Any

#: History records kept (older ones are dropped; the savepoints they name stay until retention).
KEEP = 100
#: Registry entries kept by hash.
KEEP_ENTRIES = 50


def _path(spec: Any, name: str) -> Path:
    return Path(spec.status_dir) / f"{spec.name}.{name}.json"


def read_doc(spec: Any, name: str) -> dict[str, Any] | None:
    """The document, or None when absent (or torn: a reader never fails on a half-written file)."""
    try:
        doc = json.loads(_path(spec, name).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_doc(spec: Any, name: str, doc: dict[str, Any]) -> None:
    """Replace the document (atomic: write, fsync, rename)."""
    path = _path(spec, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, indent=1, sort_keys=True, default=str))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def create_doc(spec: Any, name: str, doc: dict[str, Any]) -> bool:
    """Write the document only if it is absent; False when another writer has it (atomic)."""
    path = _path(spec, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(doc, indent=1, sort_keys=True, default=str))
    return True


def delete_doc(spec: Any, name: str) -> None:
    try:
        _path(spec, name).unlink()
    except FileNotFoundError:
        pass


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
    upgrade that dies half-way still says how far it got)."""
    records = [r for r in read_history(spec) if r.get("id") != record["id"]]
    records.append(record)
    records.sort(key=lambda r: str(r.get("id")))
    write_doc(spec, "upgrades", {"records": records[-KEEP:]})


# --------------------------------------------------------------------------- registry entries by hash
def keep_entry(spec: Any, config_hash: str, text: str, transform: str) -> None:
    doc = read_doc(spec, "entries") or {}
    doc[config_hash] = {"text": text, "transform": transform, "saved_at": time.time()}
    if len(doc) > KEEP_ENTRIES:
        for old in sorted(doc, key=lambda h: doc[h].get("saved_at", 0))[:len(doc) - KEEP_ENTRIES]:
            doc.pop(old)
    write_doc(spec, "entries", doc)


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
