"""The figures of a batch's progress that the status keeps for the metrics endpoint (``rewind.ops.metrics``).

Why: the status file had the batch id, the offsets and a record count; an operator's dashboard also
wants what Spark reports with each batch: the input and processing rates, how long the batch took,
the watermark, and the rows the state operators hold. Kept as plain JSON in ``StreamStatus.progress``
so that the page's process, which has no Spark, can export them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


def watermark_seconds(text: str | None) -> float | None:
    """Spark's ``eventTime.watermark`` (ISO 8601, ``Z``) as epoch seconds; None before the first one."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def progress_figures(progress: Any, state_rows_tracked: bool) -> dict[str, Any]:
    """One ``StreamingQueryProgress`` as ``{"batch_id", "input_rows_per_second", "processed_rows_per_second",
    "batch_duration_ms", "num_input_rows", "watermark", "state_operators", "state_rows"}``.

    ``state_rows`` is None unless the RocksDB store counts its rows
    (``spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows``): Spark reports 0 otherwise, which
    a dashboard would read as an empty state."""
    ops = list(progress.stateOperators or [])
    return {"batch_id": progress.batchId,
            "input_rows_per_second": float(progress.inputRowsPerSecond or 0.0),
            "processed_rows_per_second": float(progress.processedRowsPerSecond or 0.0),
            "batch_duration_ms": int(progress.batchDuration or 0),
            "num_input_rows": int(progress.numInputRows or 0),
            "watermark": watermark_seconds((progress.eventTime or {}).get("watermark")),
            "state_operators": len(ops),
            "state_rows": sum(int(op.numRowsTotal or 0) for op in ops) if ops and state_rows_tracked else None}
