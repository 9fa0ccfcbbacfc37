"""A checkpoint's state store files: which ones load a state version, and whether they can.

Layout (Spark 4): ``state/<operator>/<partition>/`` where state *version* N+1 holds the state
after batch N: RocksDB writes ``<v>.zip`` (which names the ``SSTs/*.sst`` files it needs) and
optionally ``<v>.changelog``; the HDFS store writes ``<v>.snapshot`` and ``<v>.delta``. A
version loads from the newest snapshot at or below it, then every change file after it
(`state_chain`); `check_state` checks that chain in every partition -- none empty or unreadable,
every SST file a RocksDB snapshot names present at its recorded size -- reading only those files.

Two listings: `list_state` (every version file, as repair needs to move all of them) and
`list_state_dirs` (only the partition folders; the version files are then probed by their exact
names), so inspection does not grow with the age of the stream.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterable, Mapping
from typing import Any

from rewind.checkpoints.logs import v1_lines
from rewind.storage.base import Storage

_STATE_FILE = re.compile(r"^(\d+)\.(zip|changelog|delta|snapshot)$")
_SNAPSHOT_KINDS = ("zip", "snapshot")


def list_state(store: Storage) -> dict[str, dict[str, dict[int, set[str]]]]:
    """op -> partition -> {version: {file kinds}} from directory names only."""
    out: dict[str, dict[str, dict[int, set[str]]]] = {}
    ops, _ = store.list_dir("state")
    for op in sorted(ops, key=lambda s: (not s.isdigit(), s.zfill(9))):
        if not op.isdigit():
            continue
        parts: dict[str, dict[int, set[str]]] = {}
        pdirs, _ = store.list_dir(f"state/{op}")
        for part in sorted((p for p in pdirs if p.isdigit()), key=int):
            versions: dict[int, set[str]] = {}
            for name in store.list_dir(f"state/{op}/{part}")[1]:
                m = _STATE_FILE.match(name)
                if m:
                    versions.setdefault(int(m.group(1)), set()).add(m.group(2))
            parts[part] = versions
        out[op] = parts
    return out


def state_chain(versions: dict[int, set[str]], version: int) -> list[str] | None:
    """File names that load `version` of one state partition, or None when it cannot load.

    The newest snapshot (RocksDB zip / HDFS snapshot) at or below the version, then every
    change file (changelog / delta) after it; with no snapshot, every change file from 1.
    """
    snaps = [v for v, kinds in versions.items() if v <= version and kinds & set(_SNAPSHOT_KINDS)]
    base = max(snaps, default=0)
    chain: list[str] = []
    if base:
        kind = next(k for k in _SNAPSHOT_KINDS if k in versions[base])
        chain.append(f"{base}.{kind}")
    for v in range(base + 1, version + 1):
        kinds = versions.get(v, set())
        change = next((k for k in ("changelog", "delta") if k in kinds), None)
        if change is None:
            return None
        chain.append(f"{v}.{change}")
    return chain or None


def _rocksdb_ssts(zip_bytes: bytes) -> list[tuple[str, int]]:
    """(dfs SST file name, size) that a RocksDB checkpoint zip needs; raises ValueError if unreadable."""
    try:
        with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
            bad = zf.testzip()
            if bad:
                raise ValueError(f"corrupt member {bad}")
            meta = zf.read("metadata").decode() if "metadata" in zf.namelist() else ""
    except zipfile.BadZipFile as exc:
        raise ValueError(f"not a readable zip: {exc}") from None
    if not meta:
        return []
    info = json.loads(v1_lines(meta, 2, "RocksDB metadata")[1])
    return [(f["dfsSstFileName"], int(f.get("sizeBytes", -1))) for f in info.get("sstFiles", [])]


def list_state_dirs(store: Storage) -> dict[str, list[str]]:
    """op -> its partition directories (a few names; the version files are not listed)."""
    out: dict[str, list[str]] = {}
    for op in sorted((o for o in store.list_dir("state")[0] if o.isdigit()), key=int):
        out[op] = sorted((p for p in store.list_dir(f"state/{op}")[0] if p.isdigit()), key=int)
    return out


def _probe_versions(store: Storage, base: str, version: int, limit: int = 1000) -> dict[int, set[str]]:
    """The version files from `version` down to the newest snapshot, found by exact names."""
    found: dict[int, set[str]] = {}
    for v in range(version, max(0, version - limit), -1):
        kinds = {k for k in ("zip", "snapshot", "changelog", "delta") if store.exists(f"{base}/{v}.{k}")}
        if not kinds:
            break
        found[v] = kinds
        if kinds & set(_SNAPSHOT_KINDS):
            break
    return found


def check_state(store: Storage, state: dict[str, dict[str, dict[int, set[str]]]] | dict[str, list[str]],
                batch_id: int) -> tuple[list[str], list[str]]:
    """(files needed to load the state after `batch_id`, problems) — reads only those files.

    `state` is a full listing (list_state) or just the partition directories (list_state_dirs),
    in which case the version files are found by their exact names.
    """
    version = batch_id + 1
    files: list[str] = []
    problems: list[str] = []
    for op, parts in state.items():
        for part in parts:
            base = f"state/{op}/{part}"
            versions = parts[part] if isinstance(parts, dict) else _probe_versions(store, base, version)
            chain = state_chain(versions, version)
            if chain is None:
                problems.append(f"{base}/{version}.*: no file loads state version {version}")
                continue
            for name in chain:
                rel = f"{base}/{name}"
                size = store.size(rel)
                if not size:
                    problems.append(f"{rel}: {'empty' if size == 0 else 'missing'}")
                    continue
                files.append(rel)
                if name.endswith(".zip"):
                    try:
                        ssts = _rocksdb_ssts(store.read_bytes(rel))
                    except (ValueError, OSError) as exc:
                        problems.append(f"{rel}: unreadable ({exc})")
                        continue
                    for sst, expected in ssts:
                        srel = f"{base}/SSTs/{sst}"
                        actual = store.size(srel)
                        if actual is None:
                            problems.append(f"{srel}: missing (named by {name})")
                        elif expected >= 0 and actual != expected:
                            problems.append(f"{srel}: size differs from what {name} records ({expected} bytes)")
                        else:
                            files.append(srel)
    return files, problems


def metadata_files(store: Storage, state: Mapping[str, Iterable[str]]) -> list[str]:
    """Operator and partition ``_metadata`` files (schemas, operator info) Spark reads on restart."""
    out: list[str] = []
    for op, parts in state.items():
        for sub in [f"state/{op}/_metadata", *(f"state/{op}/{p}/_metadata" for p in parts)]:
            dirs, files = store.list_dir(sub)
            out += [f"{sub}/{f}" for f in files if not f.endswith(".crc")]
            for d in dirs:  # e.g. _metadata/v2/... in newer Spark versions
                out += [f"{sub}/{d}/{f}" for f in store.list_dir(f"{sub}/{d}")[1] if not f.endswith(".crc")]
    return out


def operator_versions(store: Storage, state: Any, top: int) -> dict[str, dict[str, list[int]]]:
    """op -> partition -> [first, last version, count] from a full listing, or [last version] when
    only the partition directories were listed (the newest version at or below `top`, probed)."""
    out: dict[str, dict[str, list[int]]] = {}
    for op, parts in state.items():
        out[op] = {}
        for part in parts:
            if isinstance(parts, dict):
                v = parts[part]
                out[op][part] = [min(v), max(v), len(v)] if v else []
            else:
                base = f"state/{op}/{part}"
                kinds = ("zip", "changelog", "delta", "snapshot")
                last = next((x for x in range(top + 1, max(0, top - 20), -1)
                             if any(store.exists(f"{base}/{x}.{k}") for k in kinds)),
                            None)
                out[op][part] = [last] if last is not None else []
    return out
