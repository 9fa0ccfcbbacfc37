"""Read a Spark streaming checkpoint and decide what is complete.

Layout (Spark 4): ``metadata`` (query id), ``offsets/N`` ("v1", batch metadata JSON, one
line of offsets per source scan), ``commits/N`` ("v1", commit metadata JSON), and
``state/<operator>/<partition>/`` where state *version* N+1 holds the state after batch N:
RocksDB writes ``<v>.zip`` (which names the ``SSTs/*.sst`` files it needs) and optionally
``<v>.changelog``; the HDFS store writes ``<v>.snapshot`` and ``<v>.delta``.

Batch N is *complete* (resumable) when ``offsets/N``, ``offsets/N-1`` (Spark reads it on
restart to know where N began) and ``commits/N`` parse, and every state partition can load
version N+1 (the newest snapshot at or below it, every change file after it, the SST files
a RocksDB snapshot names, none empty or unreadable).

Only directory names are listed; contents are read for the newest ``recent`` batches and
for the state files of the batch judged complete, so inspection does not grow with the
age of the stream.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rewind.checkpoints.store import CheckpointStore, open_store

_STATE_FILE = re.compile(r"^(\d+)\.(zip|changelog|delta|snapshot)$")
_SNAPSHOT_KINDS = ("zip", "snapshot")


class NotACheckpoint(ValueError):
    """The path is not a Spark checkpoint; the message says what is missing."""


class CheckpointError(ValueError):
    """A checkpoint cannot be used for what was asked; the message names the file."""


@dataclass(frozen=True)
class Problem:
    file: str
    kind: str  # empty | truncated | unparseable | commit_without_offsets | missing_state | uncommitted
    detail: str
    severity: str = "error"  # error | info


@dataclass
class BatchInfo:
    batch_id: int
    committed: bool
    offsets: list[dict[str, Any]] = field(default_factory=list)
    watermark_ms: int | None = None
    complete: bool = False


@dataclass
class CheckpointReport:
    path: str
    query_id: str | None
    planned: list[int]
    committed: list[int]
    last_complete: int | None
    recent: list[BatchInfo]
    operators: dict[str, dict[str, list[int]]]  # op -> partition -> [min version, max version, count]
    problems: list[Problem]
    state_files: list[str] = field(default_factory=list)  # what resuming after last_complete loads

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def batch(self, batch_id: int) -> BatchInfo | None:
        return next((b for b in self.recent if b.batch_id == batch_id), None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["planned"] = _span(self.planned)
        out["committed"] = _span(self.committed)
        out.pop("state_files")
        return out


def _span(ids: list[int]) -> dict[str, int | None]:
    return {"count": len(ids), "first": ids[0] if ids else None, "last": ids[-1] if ids else None}


def _v1_lines(text: str, min_lines: int, missing: str) -> list[str]:
    """The lines of a Spark log file after checking its 'v1' header; raises ValueError."""
    lines = text.split("\n")
    if not text.strip():
        raise ValueError("empty file")
    if lines[0].strip() != "v1":
        raise ValueError(f"unknown version line {lines[0][:20]!r} (expected 'v1')")
    if len(lines) < min_lines or not lines[1].strip():
        raise ValueError(f"truncated: no {missing}")
    return lines


def parse_offsets_file(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """'v1', metadata JSON, then one offsets JSON per source ('-' for none); raises ValueError."""
    lines = _v1_lines(text, 3, "batch metadata or offsets")
    meta = json.loads(lines[1])
    sources = [json.loads(line) for line in lines[2:] if line.strip() and line.strip() != "-"]
    if not sources:
        raise ValueError("truncated: no source offsets")
    return meta, sources


def parse_commit_file(text: str) -> dict[str, Any]:
    return json.loads(_v1_lines(text, 2, "commit metadata")[1])


def _classify(exc: Exception) -> str:
    msg = str(exc)
    if msg.startswith("empty"):
        return "empty"
    if msg.startswith("truncated") or isinstance(exc, json.JSONDecodeError) and "Unterminated" in msg:
        return "truncated"
    return "unparseable"


def _ids(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def _log_ids(store: CheckpointStore, d: str, full: bool) -> list[int] | range:
    """The batch ids of ``offsets/`` or ``commits/``.

    Spark's logs hold contiguous ids (new ones at the top, cleanup from the bottom), so on a
    local store the range is found by galloping and bisecting on file existence from any one
    id: O(log n) stats instead of listing thousands of names. Exact membership near the top
    is checked by the caller; ``full`` (repair) lists every name.
    """
    probe = getattr(store, "any_batch_id", None)
    if full or probe is None:
        return _ids(store.list_dir(d)[1])
    member = probe(d)
    if member is None:
        return []
    has = lambda i: i >= 0 and store.exists(f"{d}/{i}")  # type: ignore[call-arg]  # noqa: E731

    def edge(start: int, step_sign: int) -> int:
        known, step = start, 1
        while has(known + step_sign * step):
            known, step = known + step_sign * step, step * 2
        lo, hi = known, known + step_sign * step  # has(lo), not has(hi)
        while abs(hi - lo) > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if has(mid) else (lo, mid)
        return lo

    last = edge(member, 1)
    for gap in range(2, 9):  # a damaged file just below the top must not hide newer batches
        if has(last + gap):
            last = edge(last + gap, 1)
            break
    first = edge(member, -1)
    return range(first, last + 1)


def list_state(store: CheckpointStore) -> dict[str, dict[str, dict[int, set[str]]]]:
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
        kind = next((k for k in ("changelog", "delta") if k in kinds), None)
        if kind is None:
            return None
        chain.append(f"{v}.{kind}")
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
    info = json.loads(_v1_lines(meta, 2, "RocksDB metadata")[1])
    return [(f["dfsSstFileName"], int(f.get("sizeBytes", -1))) for f in info.get("sstFiles", [])]


def list_state_dirs(store: CheckpointStore) -> dict[str, list[str]]:
    """op -> its partition directories (a few names; the version files are not listed)."""
    out: dict[str, list[str]] = {}
    for op in sorted((o for o in store.list_dir("state")[0] if o.isdigit()), key=int):
        out[op] = sorted((p for p in store.list_dir(f"state/{op}")[0] if p.isdigit()), key=int)
    return out


def _probe_versions(store: CheckpointStore, base: str, version: int, limit: int = 1000) -> dict[int, set[str]]:
    """The version files from `version` down to the newest snapshot, found by exact names."""
    found: dict[int, set[str]] = {}
    for v in range(version, max(0, version - limit), -1):
        kinds = {k for k in ("zip", "snapshot", "changelog", "delta") if store.exists(f"{base}/{v}.{k}")}  # type: ignore[call-arg]
        if not kinds:
            break
        found[v] = kinds
        if kinds & set(_SNAPSHOT_KINDS):
            break
    return found


def check_state(store: CheckpointStore, state: dict[str, dict[str, dict[int, set[str]]]] | dict[str, list[str]],
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


def _metadata_files(store: CheckpointStore, state: dict[str, dict[str, Any]]) -> list[str]:
    """Operator and partition ``_metadata`` files (schemas, operator info) Spark reads on restart."""
    out: list[str] = []
    for op, parts in state.items():
        for sub in [f"state/{op}/_metadata", *(f"state/{op}/{p}/_metadata" for p in parts)]:
            dirs, files = store.list_dir(sub)
            out += [f"{sub}/{f}" for f in files if not f.endswith(".crc")]
            for d in dirs:  # e.g. _metadata/v2/... in newer Spark versions
                out += [f"{sub}/{d}/{f}" for f in store.list_dir(f"{sub}/{d}")[1] if not f.endswith(".crc")]
    return out


def _open(path: str | Path | CheckpointStore, s3_client: Any = None) -> CheckpointStore:
    store = path if hasattr(path, "list_dir") else open_store(path, s3_client)  # type: ignore[arg-type]
    if not store.exists():  # type: ignore[union-attr]
        raise NotACheckpoint(f"{store.location} is not a directory")  # type: ignore[union-attr]
    dirs, files = store.list_dir("")  # type: ignore[union-attr]
    if "offsets" not in dirs and "metadata" not in files:
        raise NotACheckpoint(f"{store.location} is not a Spark checkpoint (no 'metadata' file and no "  # type: ignore[union-attr]
                             "'offsets/' folder)")
    return store  # type: ignore[return-value]


def inspect_checkpoint(path: str | Path | CheckpointStore, recent: int = 10, s3_client: Any = None,
                       full: bool = False) -> CheckpointReport:
    """Report on a checkpoint (see the module docstring for what 'complete' means).

    By default the cost does not depend on the number of batches (ids by galloping, state files
    by exact names); ``full=True`` lists every file, as repair needs to move all of them.
    """
    store = _open(path, s3_client)
    problems: list[Problem] = []
    query_id = None
    try:
        query_id = json.loads(store.read_bytes("metadata")).get("id")
    except (OSError, ValueError) as exc:
        problems.append(Problem("metadata", "unparseable", f"query metadata unreadable: {exc}"))
    planned, committed = _log_ids(store, "offsets", full), _log_ids(store, "commits", full)
    state: Any = list_state(store) if full else list_state_dirs(store)
    window = sorted(set(planned[-recent:]) | set(committed[-recent:]))
    if isinstance(planned, range) or isinstance(committed, range):  # exact membership near the top
        exists = store.exists  # type: ignore[attr-defined]
        planned_set = {b for b in window if b in planned and exists(f"offsets/{b}")}
        committed_set = {b for b in window if b in committed and exists(f"commits/{b}")}
        window = sorted(planned_set | committed_set)
    else:
        planned_set, committed_set = set(planned), set(committed)
    infos: dict[int, BatchInfo] = {}
    good_offsets: set[int] = set()
    good_commits: set[int] = set()

    def read_offsets(bid: int) -> None:
        info = infos.setdefault(bid, BatchInfo(bid, committed=bid in committed_set))
        rel = f"offsets/{bid}"
        try:
            meta, sources = parse_offsets_file(store.read_bytes(rel).decode(errors="replace"))
            info.offsets, info.watermark_ms = sources, meta.get("batchWatermarkMs")
            good_offsets.add(bid)
        except (OSError, ValueError) as exc:
            problems.append(Problem(rel, _classify(exc), str(exc)))

    for bid in window:
        infos.setdefault(bid, BatchInfo(bid, committed=bid in committed_set))
        if bid in planned_set:
            read_offsets(bid)
        if bid in committed_set:
            rel = f"commits/{bid}"
            if bid not in planned_set:
                problems.append(Problem(rel, "commit_without_offsets",
                                        f"batch {bid} is committed but offsets/{bid} is missing"))
            try:
                parse_commit_file(store.read_bytes(rel).decode(errors="replace"))
                good_commits.add(bid)
            except (OSError, ValueError) as exc:
                problems.append(Problem(rel, _classify(exc), str(exc)))
    if window and window[0] > 0 and window[0] - 1 in planned and store.size(f"offsets/{window[0] - 1}") is not None:
        read_offsets(window[0] - 1)  # the start of the oldest batch in the window
    last_complete = None
    state_files: list[str] = []
    for bid in sorted(window, reverse=True):
        if bid not in good_offsets or bid not in good_commits:
            continue
        if bid > 0 and bid - 1 not in good_offsets:
            problems.append(Problem(f"offsets/{bid - 1}", "missing_offsets",
                                    f"batch {bid} cannot resume: Spark reads offsets/{bid - 1} to know where it "
                                    "began, and it is missing or unreadable"))
            continue
        files, state_problems = check_state(store, state, bid)
        if state_problems:
            problems.append(Problem(state_problems[0].split(":")[0], "missing_state",
                                    f"batch {bid} is committed but its state (version {bid + 1}) cannot load: "
                                    + "; ".join(state_problems[:4])
                                    + (f" (+{len(state_problems) - 4} more)" if len(state_problems) > 4 else "")))
            continue
        infos[bid].complete = True
        last_complete, state_files = bid, files
        break
    if planned and planned[-1] > max(committed, default=-1):
        bid = planned[-1]
        problems.append(Problem(f"offsets/{bid}", "uncommitted", f"batch {bid} is planned but not committed: "
                                "normal after a stop or crash; it re-runs with the same offsets on restart",
                                severity="info"))
    operators = _operators(store, state, planned[-1] + 1 if len(planned) else 0)
    return CheckpointReport(store.location, query_id, planned, committed, last_complete,
                            [infos[b] for b in window[-recent:]], operators, problems, state_files)


def _operators(store: CheckpointStore, state: Any, top: int) -> dict[str, dict[str, list[int]]]:
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
                last = next((x for x in range(top + 1, max(0, top - 20), -1)
                             if any(store.exists(f"{base}/{x}.{k}") for k in ("zip", "changelog", "delta", "snapshot"))),  # type: ignore[call-arg]
                            None)
                out[op][part] = [last] if last is not None else []
    return out


def resume_files(path: str | Path | CheckpointStore, batch_id: int | None = None,
                 s3_client: Any = None) -> list[str]:
    """Relative paths (no Hadoop ``.crc`` files) a checkpoint needs to resume after `batch_id`.

    Default: the last complete batch. Raises CheckpointError naming the reason when that
    batch is not complete.
    """
    store = _open(path, s3_client)
    report = inspect_checkpoint(store, s3_client=s3_client)
    if batch_id is None:
        batch_id = report.last_complete
    if batch_id is None:
        raise CheckpointError(f"{store.location} has no complete batch: "
                              + "; ".join(f"{p.file}: {p.detail}" for p in report.errors[:3]))
    if batch_id == report.last_complete:
        state_files = report.state_files
    else:
        state_files, problems = check_state(store, list_state_dirs(store), batch_id)
        if problems:
            raise CheckpointError(f"batch {batch_id} of {store.location} cannot load its state: {problems[0]}")
    needed = ["metadata", f"offsets/{batch_id}", f"commits/{batch_id}"]
    if batch_id > 0:
        needed.insert(1, f"offsets/{batch_id - 1}")
    for rel in needed:
        if not store.size(rel):
            raise CheckpointError(f"{store.location}{'' if store.location.endswith('/') else '/'}{rel} is missing or "
                                  f"empty; batch {batch_id} cannot be resumed")
    return needed + _source_files(store) + _metadata_files(store, list_state_dirs(store)) + state_files


def _source_files(store: CheckpointStore, rel: str = "sources") -> list[str]:
    """``sources/<n>/...``: initial offsets some sources (Spark's Kafka source) record once."""
    dirs, files = store.list_dir(rel)
    out = [f"{rel}/{f}" for f in files if not f.endswith(".crc")]
    for d in dirs:
        out += _source_files(store, f"{rel}/{d}")
    return out


def state_versions(report: CheckpointReport, batch_id: int) -> dict[str, dict[str, int]]:
    """op -> partition -> the state version a restore after `batch_id` loads."""
    return {op: {part: batch_id + 1 for part in parts} for op, parts in report.operators.items()}


def format_report(rep: CheckpointReport) -> str:
    """A short human table."""
    lines = [f"checkpoint {rep.path}", f"query id   {rep.query_id}",
             f"batches    planned {_span(rep.planned)['count']} (last {_span(rep.planned)['last']}), "
             f"committed {_span(rep.committed)['count']} (last {_span(rep.committed)['last']})",
             f"last complete batch: {rep.last_complete if rep.last_complete is not None else 'NONE'}", "",
             f"{'batch':>7}  {'committed':9}  {'complete':8}  offsets"]
    for b in rep.recent[-5:]:
        lines.append(f"{b.batch_id:>7}  {'yes' if b.committed else 'no':9}  {'yes' if b.complete else '':8}  "
                     f"{json.dumps(b.offsets[0]) if b.offsets else '-'}")
    if rep.operators:
        lines += ["", "state operators (partition: newest state version)"]
        for op, parts in rep.operators.items():
            lines.append(f"  op {op}: " + ", ".join(
                f"{p}: {v[0]}..{v[1]} ({v[2]})" if len(v) == 3 else f"{p}: latest {v[0]}" if v else f"{p}: none"
                for p, v in parts.items()))
    lines += ["", "problems: none" if not rep.problems else "problems:"]
    for p in rep.problems:
        lines.append(f"  [{p.severity}] {p.file}: {p.kind}: {p.detail}")
    return "\n".join(lines)
