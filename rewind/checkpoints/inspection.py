"""Read a Spark streaming checkpoint and decide what is complete.

A checkpoint (Spark 4) is ``metadata`` (the query id), the logs ``offsets/N`` and ``commits/N``
(`rewind.checkpoints.logs` parses them and finds their ids) and the state store
``state/<operator>/<partition>/``, where state version N+1 holds the state after batch N
(`rewind.checkpoints.state_files` knows its files).

Batch N is *complete* (resumable) when ``offsets/N``, ``offsets/N-1`` (Spark reads it on
restart to know where N began) and ``commits/N`` parse, and every state partition can load
version N+1 (the newest snapshot at or below it, every change file after it, the SST files
a RocksDB snapshot names, none empty or unreadable).

Only directory names are listed; contents are read for the newest ``recent`` batches and
for the state files of the batch judged complete, so inspection does not grow with the
age of the stream.

A state rescale (Spark's offline repartition, ``rewind checkpoint repartition``) writes a batch
that reads no data: ``offsets/R`` repeats ``offsets/R-1`` with another
``spark.sql.shuffle.partitions``, ``commits/R`` repeats ``commits/R-1``, and every new partition
gets state version R+1. Inspection names it (an info problem, ``repartition``), and judges each
batch on the state partitions it ran with (a batch before R never had the new partitions), so
a repair can still roll back across it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rewind.checkpoints.logs import log_ids, parse_commit_file, parse_offsets_file, problem_kind
from rewind.checkpoints.partitions import partitions_at, shuffle_partitions, within
from rewind.checkpoints.state_files import check_state, list_state, list_state_dirs, metadata_files, operator_versions
from rewind.errors import Refused
from rewind.storage.base import Storage
from rewind.storage.location import open_storage


class NotACheckpoint(Refused, ValueError):
    """The path is not a Spark checkpoint; the message says what is missing."""


class CheckpointError(Refused, ValueError):
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
    partitions: int | None = None  # spark.sql.shuffle.partitions in offsets/N: its state partitions
    repartition: bool = False  # a state rescale: no data, the previous batch's offsets, other partitions


@dataclass
class CheckpointReport:
    path: str
    query_id: str | None
    planned: Sequence[int]  # a list, or a range when the ids were found by galloping
    committed: Sequence[int]
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


def _span(ids: Sequence[int]) -> dict[str, int | None]:
    return {"count": len(ids), "first": ids[0] if ids else None, "last": ids[-1] if ids else None}


def _open(path: str | Path | Storage) -> Storage:
    store = path if isinstance(path, Storage) else open_storage(path)
    if not store.exists():
        raise NotACheckpoint(f"{store.location} is not a directory")
    dirs, files = store.list_dir("")
    if "offsets" not in dirs and "metadata" not in files:
        raise NotACheckpoint(f"{store.location} is not a Spark checkpoint (no 'metadata' file and no "
                             "'offsets/' folder)")
    return store


def inspect_checkpoint(path: str | Path | Storage, recent: int = 10, full: bool = False) -> CheckpointReport:
    """Report on a checkpoint (see the module docstring for what 'complete' means).

    By default the cost does not depend on the number of batches (ids by galloping, state files
    by exact names); ``full=True`` lists every file, as repair needs to move all of them. ``path``: a
    location (``rewind.storage.location.open_storage`` opens it) or an open storage.
    """
    store = _open(path)
    problems: list[Problem] = []
    query_id = None
    try:
        query_id = json.loads(store.read_bytes("metadata")).get("id")
    except (OSError, ValueError) as exc:
        problems.append(Problem("metadata", "unparseable", f"query metadata unreadable: {exc}"))
    planned, committed = log_ids(store, "offsets", full), log_ids(store, "commits", full)
    state: Any = list_state(store) if full else list_state_dirs(store)
    window = sorted(set(planned[-recent:]) | set(committed[-recent:]))
    if isinstance(planned, range) or isinstance(committed, range):  # exact membership near the top
        exists = store.exists
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
            info.partitions = shuffle_partitions(meta)
            good_offsets.add(bid)
        except (OSError, ValueError) as exc:
            problems.append(Problem(rel, problem_kind(exc), str(exc)))

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
                problems.append(Problem(rel, problem_kind(exc), str(exc)))
    if window and window[0] > 0 and window[0] - 1 in planned and store.size(f"offsets/{window[0] - 1}") is not None:
        read_offsets(window[0] - 1)  # the start of the oldest batch in the window
    for bid in sorted(infos):
        prev = infos.get(bid - 1)
        info = infos[bid]
        if prev is not None and is_repartition(prev, info):
            info.repartition = True
            problems.append(Problem(f"offsets/{bid}", "repartition", f"batch {bid} is a state repartition (Spark's "
                                    f"offline repartition, no data): {prev.partitions} -> {info.partitions} state "
                                    "partitions", severity="info"))
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
        files, state_problems = check_state(store, within(state, infos[bid].partitions), bid)
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
    operators = operator_versions(store, state, planned[-1] + 1 if len(planned) else 0)
    return CheckpointReport(store.location, query_id, planned, committed, last_complete,
                            [infos[b] for b in window[-recent:]], operators, problems, state_files)


def resume_files(path: str | Path | Storage, batch_id: int | None = None) -> list[str]:
    """Relative paths (no Hadoop ``.crc`` files) a checkpoint needs to resume after `batch_id`.

    Default: the last complete batch. Raises CheckpointError naming the reason when that
    batch is not complete.
    """
    store = _open(path)
    report = inspect_checkpoint(store)
    if batch_id is None:
        batch_id = report.last_complete
    if batch_id is None:
        raise CheckpointError(f"{store.location} has no complete batch: "
                              + "; ".join(f"{p.file}: {p.detail}" for p in report.errors[:3]))
    if batch_id == report.last_complete:
        state_files = report.state_files
    else:
        state_files, problems = check_state(store, within(list_state_dirs(store), partitions_at(store, batch_id)),
                                            batch_id)
        if problems:
            raise CheckpointError(f"batch {batch_id} of {store.location} cannot load its state: {problems[0]}")
    needed = ["metadata", f"offsets/{batch_id}", f"commits/{batch_id}"]
    if batch_id > 0:
        needed.insert(1, f"offsets/{batch_id - 1}")
    for rel in needed:
        if not store.size(rel):
            raise CheckpointError(f"{store.url(rel)} is missing or "
                                  f"empty; batch {batch_id} cannot be resumed")
    return needed + _source_files(store) + metadata_files(store, list_state_dirs(store)) + state_files


def is_repartition(prev: BatchInfo, info: BatchInfo) -> bool:
    """Pure: ``info`` is Spark's repartition batch after ``prev`` (same offsets and watermark, other partitions)."""
    return (prev.partitions is not None and info.partitions is not None and prev.partitions != info.partitions
            and bool(info.offsets) and prev.offsets == info.offsets and prev.watermark_ms == info.watermark_ms)


def _source_files(store: Storage, rel: str = "sources") -> list[str]:
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
