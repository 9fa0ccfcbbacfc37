"""Roll a damaged checkpoint back to its last complete batch, moving (never deleting) the rest.

Why these rules: on restart Spark reads the newest ``offsets/N`` and ``commits/N``, plus
``offsets/N-1``, then loads state version N+1 (after a commit) or re-runs N. Rolling back
to the last complete batch C therefore means: no commit after C, no plan after C+1, no
state version after C+1. ``offsets/C+1`` stays when it parses, so Spark re-runs that batch
with exactly the range it had planned; when it does not parse, Spark plans C+1 afresh from
C's end and the sink's ledger, which records each batch's offsets, rewrites it idempotently
instead of skipping it (see ``ExactlyOnceSqlSink.write_batch``). The plan of a state repartition
(``rewind.upgrade.repartition``) at C+1 is moved too: re-run as a batch, it would read C's
state with another partitioning. Moved files keep their relative paths under
``<checkpoint>.quarantine/<time>-batch<C>/`` beside a ``record.json``, local or in S3 (``s3a://``: each
move a server-side copy proven equal to its source, then the source deleted; ``rewind.storage.s3``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rewind.checkpoints.inspection import CheckpointReport, inspect_checkpoint
from rewind.checkpoints.state_files import list_state
from rewind.errors import Refused
from rewind.storage.base import Storage
from rewind.storage.location import open_storage


class RepairRefused(Refused, RuntimeError):
    """Repair would be unsafe or cannot help; the message says what to do instead."""


@dataclass(frozen=True)
class Move:
    file: str
    reason: str


@dataclass
class RepairPlan:
    checkpoint: str
    rolled_back_to: int
    moves: list[Move]
    keeps_planned_batch: int | None  # C+1 when its offsets stay, so it re-runs with the same range
    problems: list[str] = field(default_factory=list)

    @property
    def needed(self) -> bool:
        return bool(self.moves)


def plan_repair(report: CheckpointReport, state: dict[str, dict[str, dict[int, set[str]]]]) -> RepairPlan:
    """Pure: which files to move to roll `report`'s checkpoint back to its last complete batch."""
    problems = [f"{p.file}: {p.kind}: {p.detail}" for p in report.errors]
    c = report.last_complete
    if c is None:
        raise RepairRefused(f"{report.path} has no complete batch to roll back to ("
                            + ("; ".join(problems[:3]) or "no committed batch") + "). Restore a savepoint instead: "
                            "`rewind savepoint list STREAM`, then `rewind savepoint restore STREAM ID`")
    if not report.errors:
        return RepairPlan(report.path, c, [], None, [])
    moves: list[Move] = []
    if any(p.file == "metadata" for p in report.errors):
        moves.append(Move("metadata", "unreadable query metadata; Spark writes a new one (new query id) on start"))
    next_info = report.batch(c + 1)
    # A state repartition's plan never re-runs: its state (version C+2, in the new partitions) is what
    # did not survive, and re-run as a batch it would read C's state with another partitioning.
    # Spark plans C+1 afresh, with C's partitions; the sink never saw the repartition batch.
    replanned = next_info is not None and next_info.repartition
    next_ok = next_info is not None and bool(next_info.offsets) and not replanned
    for bid in report.committed:
        if bid > c:
            moves.append(Move(f"commits/{bid}", f"commit of batch {bid}, after the last complete batch {c}"))
    for bid in report.planned:
        if bid > c + 1:
            moves.append(Move(f"offsets/{bid}", f"plan of batch {bid}, after the last complete batch {c}"))
        elif bid == c + 1 and replanned:
            moves.append(Move(f"offsets/{bid}", f"plan of batch {bid}, a state repartition whose state cannot "
                                                f"load; Spark plans batch {bid} again with batch {c}'s partitions"))
        elif bid == c + 1 and not next_ok:
            moves.append(Move(f"offsets/{bid}", f"plan of batch {bid} is unreadable; Spark plans it again from "
                                                f"the end of batch {c}"))
    for op, parts in state.items():
        for part, versions in parts.items():
            for version in sorted(v for v in versions if v > c + 1):
                for kind in sorted(versions[version]):
                    moves.append(Move(f"state/{op}/{part}/{version}.{kind}",
                                      f"state version {version} (after batch {version - 1}), newer than the last "
                                      f"complete batch {c}"))
    keeps = c + 1 if next_ok and c + 1 in report.planned else None
    return RepairPlan(report.path, c, moves, keeps, problems)


def orphan_checksums(store: Storage, state: dict[str, dict[str, Any]], moving: set[str]) -> list[Move]:
    """Hadoop ``.N.crc`` files whose data file is gone (or moving): Spark's atomic rename of a new
    ``offsets/N`` fails on them with "Multiple streaming queries are concurrently using ..."."""
    dirs = ["offsets", "commits"] + [f"state/{op}/{part}" for op, parts in state.items() for part in parts]
    out: list[Move] = []
    for d in dirs:
        files = set(store.list_dir(d)[1])
        for name in sorted(files):
            data = name[1:-4]
            if name.startswith(".") and name.endswith(".crc") and data not in files and f"{d}/{data}" not in moving:
                out.append(Move(f"{d}/{name}", f"checksum of {d}/{data}, which is missing: Spark could not "
                                               "write that file again"))
    return out


def crc_of(rel: str) -> str:
    """The Hadoop checksum file beside ``rel`` (``offsets/7`` -> ``offsets/.7.crc``)."""
    head, _, name = rel.rpartition("/")
    return f"{head}/.{name}.crc" if head else f".{name}.crc"


def quarantine_location(checkpoint: str, stamp: str, batch: int, attempt: int = 1) -> str:
    """``<checkpoint>.quarantine/<stamp>-batch<C>`` (``-2``, ``-3``... when taken), beside the checkpoint."""
    return f"{checkpoint.rstrip('/')}.quarantine/{stamp}-batch{batch}{'' if attempt == 1 else f'-{attempt}'}"


class Quarantine:
    """A fresh ``<checkpoint>.quarantine/<time>-batch<C>/`` beside the checkpoint (a folder, or a prefix in S3):
    files move in under their checkpoint-relative paths, beside a ``record.json``."""

    def __init__(self, checkpoint: str, stamp: str, batch: int) -> None:
        attempt = 1
        while (folder := open_storage(quarantine_location(checkpoint, stamp, batch, attempt))).list_dir() != ([], []):
            attempt += 1
        self.folder = folder
        self.location = folder.url()

    def write_record(self, record: dict[str, Any]) -> None:
        self.folder.write_bytes("record.json", json.dumps(record, indent=1).encode(), "application/json")

    def move(self, store: Storage, rel: str) -> None:
        store.move(rel, self.folder, rel)


def _open_checkpoint(path: str | Path) -> Storage:
    if str(path).startswith("s3://"):
        raise RepairRefused("repair works on a stream's checkpoint (a local path or s3a://); a checkpoint under "
                            "s3:// is a savepoint's copy: restore it with `rewind savepoint restore`")
    return open_storage(path)


def repair_checkpoint(path: str | Path, *, running: str | None = None, dry_run: bool = False) -> dict[str, Any]:
    """Plan and (unless `dry_run`) carry out a repair of a checkpoint; returns the record.

    `running` is the caller's finding that the stream is running (refused: Spark would keep
    writing into what is being moved). A checkpoint in S3 (``s3a://``) is repaired the same way, its
    files moved into a quarantine prefix by proven server-side copies.
    """
    store = _open_checkpoint(path)
    where = store.location.rstrip("/") if "://" in store.location else str(Path(path).resolve())
    report = inspect_checkpoint(store, full=True)
    if running:
        raise RepairRefused(f"{running}: stop it first (it writes into {path}); repair never touches a "
                            "checkpoint in use")
    state = list_state(store)
    plan = plan_repair(report, state)
    if plan.needed:
        plan.moves += orphan_checksums(store, state, {m.file for m in plan.moves})
    record: dict[str, Any] = {
        "checkpoint": where, "query_id": report.query_id, "rolled_back_to_batch": plan.rolled_back_to,
        "reruns_batch_with_same_offsets": plan.keeps_planned_batch, "problems": plan.problems,
        "moved": [asdict(m) for m in plan.moves], "dry_run": dry_run,
    }
    if not plan.needed:
        record["result"] = "healthy: nothing to repair"
        return record
    if dry_run:
        record["result"] = f"would move {len(plan.moves)} file(s)"
        return record
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    quarantine = Quarantine(where, stamp, plan.rolled_back_to)
    record.update(quarantine=quarantine.location, repaired_at=stamp, result="in progress")
    quarantine.write_record(record)  # first, so an interrupted repair still says what it was doing
    for move in plan.moves:
        for rel in (move.file, crc_of(move.file)):
            if store.size(rel) is not None:
                quarantine.move(store, rel)
    after = inspect_checkpoint(_open_checkpoint(path))
    record["result"] = "repaired" if not after.errors and after.last_complete == plan.rolled_back_to else \
        "incomplete: " + "; ".join(f"{p.file}: {p.detail}" for p in after.errors[:3])
    quarantine.write_record(record)
    return record


def format_record(record: dict[str, Any]) -> str:
    lines = [f"checkpoint {record['checkpoint']}", f"result     {record['result']}",
             f"rolled back to batch {record['rolled_back_to_batch']}"]
    if record.get("reruns_batch_with_same_offsets") is not None and record["moved"]:
        lines.append(f"batch {record['reruns_batch_with_same_offsets']} re-runs with the offsets it had planned")
    if record["moved"]:
        verb = "would move" if record["dry_run"] else f"moved to {record.get('quarantine')}"
        lines.append(f"{verb}:")
        lines += [f"  {m['file']}: {m['reason']}" for m in record["moved"][:20]]
        if len(record["moved"]) > 20:
            lines.append(f"  ... and {len(record['moved']) - 20} more (see record.json)")
    return "\n".join(lines)


__all__ = ["Move", "Quarantine", "RepairPlan", "RepairRefused", "format_record", "plan_repair", "repair_checkpoint"]
