"""Has a stream committed anything to prove? The rule that keeps a fresh stream from paging anyone.

Why: a proof of a stream's default range answers for what the stream has *committed*. Before its
first committed batch it has committed nothing, so there is nothing to prove. Proving anyway reads
the whole topic and reports every record as "missing" (the records the stream has not reached
yet): a red FAIL on every fresh start, and at 3 a.m. a false page. So a proof with no committed
batch says so and succeeds: the DQ DAG skips, the page shows "nothing to prove", the command line
prints it and exits 0. An explicit range (a replay's, ``--all``) is proved as asked: whoever gave
it meant it.

``nothing_to_prove`` is pure; ``committed_batch`` reads the status file and, when the status has
no batch (a driver that has not reported yet, a status file lost), the checkpoint's commit log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def nothing_to_prove(stream: str, last_batch: int | None, explicit_range: bool) -> str | None:
    """Why a proof of ``stream`` has nothing to prove, or None when it has something.

    ``last_batch``: the stream's last committed batch (None: none yet); ``explicit_range``: the
    caller named the range (a replay's bounds, ``--all``), which is proved whatever the stream did.
    """
    if explicit_range or last_batch is not None:
        return None
    return (f"nothing to prove: {stream} has not committed a batch yet, so no Kafka record is its to answer "
            "for; the first proof after its first committed batch covers everything from the start")


def committed_batch(spec: Any, status: Any = None) -> int | None:
    """The stream's last committed batch: its status's (in the control store), else the newest
    ``commits/N`` of its active checkpoint (local checkpoints; an ``s3a://`` one without a status counts
    as none committed)."""
    if status is None:
        from rewind.stream.status_store import read_stream_status

        status = read_stream_status(spec)
    if status is not None and status.last_batch_id is not None:
        return int(status.last_batch_id)
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.platform.s3a import is_url

    checkpoint = active_checkpoint(spec)
    if is_url(checkpoint):
        return None
    try:
        ids = [int(p.name) for p in (Path(checkpoint) / "commits").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return max(ids) if ids else None
