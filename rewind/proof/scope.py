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

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rewind.checkpoints.pointer import active_checkpoint
from rewind.checkpoints.watermark import last_commit, stream_watermark
from rewind.control.status_store import read_stream_status
from rewind.runtime.s3a import is_url
from rewind.supervision.process_control import stream_running


@dataclass(frozen=True)
class Committed:
    """What a stream had committed when a proof began: everything the proof may hold it to.

    ``batch``: its last committed batch (None: none yet); ``end_offsets``: where that batch ended per
    (topic, partition); ``watermark``: the event-time watermark that batch ran with (groups whose
    window ends at or before it are closed); ``running``: a driver holds the lease; ``source``:
    ``checkpoint`` (``commits/N`` and ``offsets/N``), ``status`` (the control store's, when the
    checkpoint cannot be read) or ``none``.
    """

    batch: int | None
    end_offsets: dict[tuple[str, int], int] | None
    watermark: datetime | None
    running: bool
    source: str
    status: Any = None

    def describe(self, stream: str) -> str:
        state = "running" if self.running else "not running"
        if self.batch is None:
            return f"{stream} is {state} and has committed no batch"
        return (f"{stream} is {state}: proving what it had committed when the proof began, batch {self.batch} "
                f"(from its {self.source}; later batches' rows are not judged)")


def committed_position(spec: Any) -> Committed:
    """Read first, before Kafka and the sink: the last committed batch, its end offsets and watermark.

    Why first: a proof of a running stream reads Kafka and the sink after this, while the stream
    keeps committing; it must judge only records below these offsets and only rows of this batch
    or earlier (later rows may hold records it did not read), or it alarms on a correct sink.
    The checkpoint is the truth (Spark writes ``commits/N`` after the sink committed batch N); the
    status in the control store stands in when the checkpoint cannot be read from here.
    """

    running, status = stream_running(spec)
    commit = last_commit(spec)
    if commit is not None:
        return Committed(commit.batch, commit.end_offsets, commit.watermark, running, "checkpoint", status)
    if status is not None and status.last_batch_id is not None:

        ends = {(t, int(p)): int(o) for t, parts in (status.end_offsets or {}).items() for p, o in parts.items()}
        return Committed(int(status.last_batch_id), ends or None, stream_watermark(spec, status.last_batch_id)[0],
                         running, "status", status)
    return Committed(None, None, None, running, "none", status)


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

        status = read_stream_status(spec)
    if status is not None and status.last_batch_id is not None:
        return int(status.last_batch_id)

    checkpoint = active_checkpoint(spec)
    if is_url(checkpoint):
        return None
    try:
        ids = [int(p.name) for p in (Path(checkpoint) / "commits").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return max(ids) if ids else None
