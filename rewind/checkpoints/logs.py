"""Spark's checkpoint logs, ``offsets/`` and ``commits/``: parse one file, find the batch ids.

Layout (Spark 4): ``offsets/N`` is "v1", the batch metadata JSON (``batchWatermarkMs`` among it),
then one line of offsets per source scan ('-' for none); ``commits/N`` is "v1" and the commit
metadata JSON. A file that does not parse is named by what is wrong with it (`problem_kind`:
empty, truncated or unparseable), as inspection reports it.

Finding the ids (`log_ids`): Spark's logs hold contiguous ids (new ones at the top, cleanup
from the bottom), so on a local store the range is found by galloping and bisecting on file
existence from any one id -- O(log n) stats instead of listing thousands of names -- which keeps
inspection from growing with the age of the stream (docs/benchmarks.md, "Checkpoint inspection
at 2,000 batches vs 10").
"""

from __future__ import annotations

import json
from typing import Any

from rewind.storage.base import Storage


def v1_lines(text: str, min_lines: int, missing: str) -> list[str]:
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
    lines = v1_lines(text, 3, "batch metadata or offsets")
    meta = json.loads(lines[1])
    sources = [json.loads(line) for line in lines[2:] if line.strip() and line.strip() != "-"]
    if not sources:
        raise ValueError("truncated: no source offsets")
    return meta, sources


def parse_commit_file(text: str) -> dict[str, Any]:
    """'v1', then the commit metadata JSON; raises ValueError."""
    return json.loads(v1_lines(text, 2, "commit metadata")[1])


def problem_kind(exc: Exception) -> str:
    """What is wrong with a log file that did not parse: empty, truncated or unparseable."""
    msg = str(exc)
    if msg.startswith("empty"):
        return "empty"
    if msg.startswith("truncated") or isinstance(exc, json.JSONDecodeError) and "Unterminated" in msg:
        return "truncated"
    return "unparseable"


def _ids(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def has_batches(store: Storage, d: str) -> bool:
    """Whether ``offsets/`` or ``commits/`` holds any batch: on a local store from the first numeric entry met,
    without listing the whole log."""
    probe = getattr(store, "any_batch_id", None)
    return probe(d) is not None if probe is not None else bool(_ids(store.list_dir(d)[1]))


def log_ids(store: Storage, d: str, full: bool) -> list[int] | range:
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
    has = lambda i: i >= 0 and store.exists(f"{d}/{i}")  # noqa: E731

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
