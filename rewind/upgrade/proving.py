"""The watch's proof: the new version's first batches held to the stream's DQ proof before it counts stable.

Why: a version whose output is wrong but that does not fail (a total off by one, a column mapped to
another) passed the pre-flight and the watch, which asked only "does it run and commit". Stable now
means healthy, keeping up and proven: once the new version has committed ``PROOF_BATCHES`` batches of
its own and, when the stream has aggregate tables, its watermark has moved a window further (so a window
it wrote is closed: a proof judges closed windows only, and a version whose totals are wrong would
otherwise pass before writing one), the stream's own proof (``rewind.proof.dq.run_proof``, the one the
hourly DQ DAG runs) judges the range it wrote, from the stop's savepoint offsets to its last committed
batch. A failed proof rolls back like a crash loop; its failures (with the offending rows) stay in the
upgrade's record. A stream that commits nothing more within the wait (no records arriving) is proven on
what it committed; nothing committed is said, not failed.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from rewind.api.contract import load_transform
from rewind.checkpoints.watermark import committed_end_offsets, stream_watermark
from rewind.control.status_store import read_stream_status
from rewind.proof.dq import run_proof
from rewind.proof.report import ProofResult, format_proof

log = logging.getLogger(__name__)

__all__ = ["PROOF_BATCHES", "new_version_range", "prove_new_version", "proof_record"]

#: The new version's own batches the proof waits for (at most ``wait_s``) before it judges them.
PROOF_BATCHES = 2


def new_version_range(start: dict[str, dict[str, int]], ends: dict[tuple[str, int], int]
                      ) -> dict[tuple[str, int], tuple[int, int]]:
    """``[savepoint offset, committed end)`` of every partition the new version advanced (pure)."""
    out = {}
    for (topic, part), end in sorted(ends.items()):
        lo = int((start.get(topic) or {}).get(str(part), 0))
        if int(end) > lo:
            out[(topic, int(part))] = (lo, int(end))
    return out


def proof_wait_s(spec: Any) -> float:
    """How long the watch waits for output worth proving: two minutes, or three times a window and its
    watermark delay when that is longer (at most 15 minutes)."""
    d = spec.durations()
    return min(900.0, max(120.0, 3 * (d["window"] + d["watermark_delay"]).total_seconds()))


def _ready(spec: Any, target: int, windows: bool, closed_from: list[datetime]) -> bool:
    """The new version has committed ``target`` and, for a stream with aggregate tables, its watermark has
    moved a window past where it was then, so at least one window it wrote is closed and judged."""
    st = read_stream_status(spec)
    if st is None or st.last_batch_id is None or st.last_batch_id < target:
        return False
    if not windows:
        return True
    watermark = stream_watermark(spec, None)[0]
    if watermark is None:
        return False
    if not closed_from:
        closed_from.append(watermark + spec.durations()["window"])
    return watermark >= closed_from[0]


def prove_new_version(spec: Any, bootstrap: str, start: dict[str, dict[str, int]], after_batch: int | None,
                      run_dir: Path, wait_s: float | None = None) -> ProofResult | None:
    """The DQ proof of what the new version wrote since ``start`` (the stop's savepoint offsets); None when
    it committed nothing there to prove."""
    target = (after_batch if after_batch is not None else -1) + PROOF_BATCHES
    windows = bool(load_transform(spec).aggregates)
    closed_from: list[datetime] = []
    deadline = time.monotonic() + (proof_wait_s(spec) if wait_s is None else wait_s)
    while time.monotonic() < deadline and not _ready(spec, target, windows, closed_from):
        time.sleep(0.5)
    bounds = new_version_range(start, committed_end_offsets(spec) or {})
    if not bounds:
        log.info("%s: the new version committed no record past the savepoint yet: nothing to prove", spec.name)
        return None
    result = run_proof(spec, bootstrap, bounds=bounds, run_dir=run_dir)
    log.info("%s: the new version's first batches: %s", spec.name, format_proof(result).splitlines()[0])
    return result


def proof_record(result: ProofResult) -> dict[str, Any]:
    """What the upgrade's record keeps of the proof: verdict, range, counts, each failure with its rows."""
    doc = result.to_json()
    return {k: doc[k] for k in ("run_id", "ok", "range", "counts", "failures", "local")}
