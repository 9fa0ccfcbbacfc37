"""The watch's proof: the new version's first batches held to the stream's DQ proof before it counts as stable.

Why: a version whose output is wrong but that does not fail (a total off by one, a column mapped to
another) passed the pre-flight and the watch, which asked only "does it run and commit". Stable now
means healthy, keeping up and proven: once the new version has committed ``PROOF_BATCHES`` batches
of its own, the stream's own proof (``rewind.proof.dq.run_proof``, the one the hourly DQ DAG runs)
judges the range it wrote, from the stop's savepoint offsets to its last committed batch. A failed
proof rolls back like a crash loop; its failures (with the offending rows) stay in the upgrade's
record. A stream that commits nothing more within the wait (no records arriving) is proven on what
it committed; nothing committed is said, not failed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from rewind.checkpoints.watermark import committed_end_offsets
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


def prove_new_version(spec: Any, bootstrap: str, start: dict[str, dict[str, int]], after_batch: int | None,
                      run_dir: Path, wait_s: float = 120.0) -> ProofResult | None:
    """The DQ proof of what the new version wrote since ``start`` (the stop's savepoint offsets); None when
    it committed nothing there to prove."""
    target = (after_batch if after_batch is not None else -1) + PROOF_BATCHES
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        st = read_stream_status(spec)
        if st is not None and st.last_batch_id is not None and st.last_batch_id >= target:
            break
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
