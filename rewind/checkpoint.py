"""Read a Spark streaming checkpoint and decide what is complete (issue 3, inspection part).

Layout (Spark 4): ``metadata`` (query id), ``offsets/N`` ("v1", batch metadata JSON, one
line of offsets per source scan), ``commits/N`` ("v1", commit metadata JSON), and
``state/<operator>/<partition>/<version>.zip|.changelog|.delta|.snapshot`` where state version
N+1 holds the state after batch N. Batch N is *complete* when ``offsets/N`` and ``commits/N``
parse and every state partition has a readable version N+1 file.

Only directory names are listed (cheap); file contents are read for the newest ``recent``
batches only, so inspection does not grow with the age of the stream.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_STATE_FILE = re.compile(r"^(\d+)\.(zip|changelog|delta|snapshot)$")


class NotACheckpoint(ValueError):
    """The path is not a Spark checkpoint; the message says what is missing."""


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

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["planned"] = _span(self.planned)
        out["committed"] = _span(self.committed)
        return out


def _span(ids: list[int]) -> dict[str, int | None]:
    return {"count": len(ids), "first": ids[0] if ids else None, "last": ids[-1] if ids else None}


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(e.name) for e in os.scandir(directory) if e.name.isdigit())


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


def _state_versions(root: Path) -> dict[str, dict[str, dict[int, int]]]:
    """op -> partition -> {version: size of its file}."""
    out: dict[str, dict[str, dict[int, int]]] = {}
    state = root / "state"
    if not state.is_dir():
        return out
    for op in sorted(e.name for e in os.scandir(state) if e.is_dir() and e.name.isdigit()):
        parts: dict[str, dict[int, int]] = {}
        for part in sorted((e for e in os.scandir(state / op) if e.is_dir() and e.name.isdigit()),
                           key=lambda e: int(e.name)):
            versions: dict[int, int] = {}
            for f in os.scandir(part.path):
                m = _STATE_FILE.match(f.name)
                if m:
                    v = int(m.group(1))
                    versions[v] = max(versions.get(v, 0), f.stat().st_size)
            parts[part.name] = versions
        out[op] = parts
    return out


def inspect_checkpoint(path: str | Path, recent: int = 10) -> CheckpointReport:
    """Report on a local checkpoint (see the module docstring for what 'complete' means)."""
    root = Path(path)
    if not root.is_dir():
        raise NotACheckpoint(f"{root} is not a directory")
    if not (root / "offsets").is_dir() and not (root / "metadata").exists():
        raise NotACheckpoint(f"{root} is not a Spark checkpoint (no 'metadata' file and no 'offsets/' folder)")
    problems: list[Problem] = []
    query_id = None
    try:
        query_id = json.loads((root / "metadata").read_text()).get("id")
    except (OSError, ValueError) as exc:
        problems.append(Problem("metadata", "unparseable", f"query metadata unreadable: {exc}"))
    planned, committed = _batch_ids(root / "offsets"), _batch_ids(root / "commits")
    state = _state_versions(root)
    window = sorted(set(planned[-recent:]) | set(committed[-recent:]))
    infos: dict[int, BatchInfo] = {}
    good_offsets: set[int] = set()
    good_commits: set[int] = set()
    for bid in window:
        info = infos.setdefault(bid, BatchInfo(bid, committed=bid in committed))
        if bid in planned:
            rel = f"offsets/{bid}"
            try:
                meta, sources = parse_offsets_file((root / rel).read_text(errors="replace"))
                info.offsets = sources
                info.watermark_ms = meta.get("batchWatermarkMs")
                good_offsets.add(bid)
            except (OSError, ValueError) as exc:
                problems.append(Problem(rel, _classify(exc), str(exc)))
        if bid in committed:
            rel = f"commits/{bid}"
            if bid not in planned:
                problems.append(Problem(rel, "commit_without_offsets", f"batch {bid} is committed but offsets/{bid} "
                                                                      "is missing"))
            try:
                parse_commit_file((root / rel).read_text(errors="replace"))
                good_commits.add(bid)
            except (OSError, ValueError) as exc:
                problems.append(Problem(rel, _classify(exc), str(exc)))
    last_complete = None
    for bid in sorted(window, reverse=True):
        if bid not in good_offsets or bid not in good_commits:
            continue
        missing = [f"state/{op}/{part}/{bid + 1}.*" for op, parts in state.items()
                   for part, versions in parts.items() if versions.get(bid + 1, 0) == 0]
        if missing:
            problems.append(Problem(missing[0], "missing_state",
                                    f"batch {bid} is committed but {len(missing)} state file(s) for version "
                                    f"{bid + 1} are missing or empty: {', '.join(missing[:4])}"))
            continue
        infos[bid].complete = True
        last_complete = bid
        break
    if planned and planned[-1] > max(committed, default=-1):
        bid = planned[-1]
        problems.append(Problem(f"offsets/{bid}", "uncommitted", f"batch {bid} is planned but not committed: "
                                "normal after a stop or crash; it re-runs with the same offsets on restart",
                                severity="info"))
    operators = {op: {part: [min(v), max(v), len(v)] if v else [] for part, v in parts.items()}
                 for op, parts in state.items()}
    return CheckpointReport(str(root), query_id, planned, committed, last_complete,
                            [infos[b] for b in window[-recent:]], operators, problems)


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
        lines += ["", "state operators (partition: first..last version, count)"]
        for op, parts in rep.operators.items():
            lines.append(f"  op {op}: " + ", ".join(f"{p}: {v[0]}..{v[1]} ({v[2]})" if v else f"{p}: none"
                                                  for p, v in parts.items()))
    lines += ["", "problems: none" if not rep.problems else "problems:"]
    for p in rep.problems:
        lines.append(f"  [{p.severity}] {p.file}: {p.kind}: {p.detail}")
    return "\n".join(lines)
