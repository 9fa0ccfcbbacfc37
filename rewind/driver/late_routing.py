"""Records behind the watermark go to the dead-letter table: exactly the ones Spark drops.

Why: Spark's watermark is global (the maximum event time seen over all partitions, minus the
delay). When partitions are read unevenly (a lagging partition caught up a slice per batch, a
restart after an outage), the watermark runs past a lagging partition's records, and every
stateful operator (``dropDuplicatesWithinWatermark``, windowed aggregations) drops them with
nothing but a count (``numRowsDroppedByWatermark``). Seen: 587 of 39,620 events (1.5 %) lost
that way with 7 partitions and keyless records from an idempotent producer.

How: a transform tags the rows that enter its first stateful operator as candidates
(``candidates``) and puts them into its output beside its real rows; the batch writer keeps,
of the candidates, exactly those Spark's own lateness predicate drops (``keep_behind``), with
the watermark Spark uses for late events in that batch (``late_events_watermark_ms``), and
the sink writes them as dead letters in the same transaction as the batch. Spark pushes the
filter into the candidates' branch, so only late rows leave the executors.

Spark's rule (``WatermarkPropagator``, multiple stateful operators, Spark 3.4+): in batch N an
operator drops input rows whose event time is ``<=`` its input watermark *of batch N-1*
(``getInputWatermarkForLateEvents(N) = getInputWatermark(N - 1)``); for the first operator
after ``withWatermark`` that is the global watermark of batch N-1, which the offset log
records as ``batchWatermarkMs`` in ``offsets/N-1`` (0 for batch 0). Timestamps compare in
microseconds against ``watermark_ms * 1000``. ``check_batch`` holds the routed count against
what Spark reports as dropped, in every batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from rewind.api.contract import TransformRefused
from rewind.api.late import BEHIND_WATERMARK, LATE_CANDIDATE
from rewind.checkpoints.logs import parse_offsets_file
from rewind.driver.offset_log import OffsetLog
from rewind.errors import Failed

log = logging.getLogger(__name__)



class WatermarkUnknown(Failed, RuntimeError):
    """The offset log does not say which watermark batch N judges lateness by."""


def late_events_watermark_ms(checkpoint: str | Path, batch_id: int, log: OffsetLog | None = None) -> int:
    """The watermark (ms) Spark's stateful operators use for late rows in ``batch_id``:
    ``batchWatermarkMs`` of ``offsets/<batch_id - 1>``, 0 for the first batch. ``log``: the query's
    ``rewind.driver.offset_log.OffsetLog`` (each entry read once), else the file is read."""

    if batch_id <= 0:
        return 0
    path = f"{str(checkpoint).rstrip('/')}/offsets/{batch_id - 1}"
    try:
        meta, _ = (log if log is not None else OffsetLog(checkpoint)).entry(batch_id - 1)
    except (OSError, ValueError) as exc:
        raise WatermarkUnknown(f"batch {batch_id}: cannot read the previous batch's watermark from {path} ({exc}); "
                               "records behind the watermark could not be told apart") from exc
    return max(0, int(meta.get("batchWatermarkMs") or 0))




def empty_stream(spark: Any) -> Any:
    """A streaming DataFrame with Spark's Kafka columns that is never started: ``build`` plans on it
    as it does in the stream (``source.isStreaming``), and nothing is read."""
    from pyspark.sql import functions as F

    return spark.readStream.format("rate").load().select(
        F.lit(None).cast("binary").alias("key"), F.lit(None).cast("binary").alias("value"),
        F.lit("").alias("topic"), F.lit(0).cast("int").alias("partition"), F.col("value").alias("offset"),
        F.col("timestamp"), F.lit(0).cast("int").alias("timestampType"))


def streaming_candidates(transform: Any, spark: Any, spec: Any) -> list[tuple[str, str]] | None:
    """The columns (name, Spark type) of the late candidates ``build`` outputs in a streaming query, or
    None when it outputs none (or the plan cannot be read): ``build`` planned over ``empty_stream``
    (Spark analyses the plan; nothing runs). A stream's driver reads them from the output it runs
    instead (``late_candidate_fields``): one plan less to analyse before its first batch."""
    try:
        out = transform.build(empty_stream(spark), spec)
    except Exception as exc:  # noqa: BLE001 - a check, not the stream: its own start reports a plan error
        log.warning("%s: build() could not be planned on an empty streaming source (%s); its late candidates "
                    "are checked when it runs", type(transform).__name__, exc)
        return None
    return late_candidate_fields(out)


def late_candidate_fields(out: Any) -> list[tuple[str, str]] | None:
    """The late candidates' columns (name, Spark type) in ``build``'s streaming output ``out``, or None when
    it has none (or the plan cannot be read). A dict from ``build`` has them under ``LATE_CANDIDATE``; a
    single tagged DataFrame has them when its plan holds the kind ``LATE_CANDIDATE`` (the columns are
    then the frame's own: every kind shares them)."""
    if isinstance(out, Mapping):
        frame = out.get(LATE_CANDIDATE)
    else:
        try:
            plan = str(out._jdf.queryExecution().logical().toString())
        except Exception:  # noqa: BLE001 - a client without the JVM plan (Spark Connect): cannot tell
            return None
        frame = out if LATE_CANDIDATE in plan else None
    if frame is None:
        return None
    return [(f.name, f.dataType.typeName()) for f in frame.schema.fields if f.name != "kind"]


def keep_behind(df: Any, watermark_ms: int, event_time_column: str = "event_time",
                kind_column: str = "kind") -> Any:
    """All non-candidate rows, and the candidates Spark drops as late: ``event_time <= watermark``
    (Spark's predicate: microseconds against ``watermark_ms * 1000``)."""
    from pyspark.sql import functions as F

    behind = F.col(event_time_column) <= F.timestamp_micros(F.lit(int(watermark_ms) * 1000))
    return df.filter((F.col(kind_column) != F.lit(LATE_CANDIDATE)) | behind)


@dataclass(frozen=True)
class LateCheck:
    """One batch: records routed as behind the watermark vs rows each stateful operator dropped.

    Every operator that reads the candidates' rows (a plan may hold several: the demo
    deduplicates once for its events and once more under its windows) must have dropped
    exactly ``routed``; an operator that reads another operator's output drops none.
    """

    batch_id: int
    routed: int
    dropped: tuple[int, ...]  # numRowsDroppedByWatermark per stateful operator, by operator id
    watermark_ms: int

    @property
    def ok(self) -> bool:
        return all(d in (0, self.routed) for d in self.dropped) and (self.routed == 0 or self.routed in self.dropped)

    def describe(self) -> str:
        if self.ok:
            return (f"batch {self.batch_id}: {self.routed} record(s) behind watermark {self.watermark_ms} ms "
                    f"routed to the dead-letter table; Spark's stateful operators dropped {list(self.dropped)}")
        return (f"batch {self.batch_id}: {self.routed} record(s) routed to the dead-letter table as behind watermark "
                f"{self.watermark_ms} ms, but Spark's stateful operators dropped {list(self.dropped)} by watermark; "
                "the transform's late candidates are not the rows its stateful operators read")


def dropped_by_watermark(state_operators: Iterable[Any]) -> tuple[int, ...]:
    """``numRowsDroppedByWatermark`` of each stateful operator of a progress report (objects or dicts)."""
    out = []
    for op in state_operators:
        value = op.get("numRowsDroppedByWatermark") if isinstance(op, Mapping) else \
            getattr(op, "numRowsDroppedByWatermark", 0)
        out.append(int(value or 0))
    return tuple(out)


def check_batch(batch_id: int, routed: int, state_operators: Iterable[Any], watermark_ms: int) -> LateCheck:
    """Pure: hold what the writer routed against what Spark reported for the same batch."""
    return LateCheck(batch_id, routed, dropped_by_watermark(state_operators), watermark_ms)


def mark_behind(frame: Any, watermark_ms: int | None, kind_column: str = "kind") -> int:
    """In a collected batch (pandas), give the kept candidates their dead-letter reason and the
    watermark they were behind; returns how many there are."""
    import pandas as pd

    if kind_column not in frame.columns:
        return 0
    late = frame[kind_column] == LATE_CANDIDATE
    n = int(late.sum())
    if n and "event_time" not in frame.columns:  # the start's check could not read the plan (contract.py)
        raise TransformRefused(f"{n} late candidates ({LATE_CANDIDATE}) without an 'event_time' column: they cannot "
                               "be judged against the watermark; give the rows you tag with it your withWatermark "
                               "column, named event_time")
    if "watermark" not in frame.columns:
        frame["watermark"] = pd.Series(pd.NaT, index=frame.index, dtype="datetime64[us, UTC]")
    if n:
        frame.loc[late, "reason"] = BEHIND_WATERMARK
        frame.loc[late, "watermark"] = pd.Timestamp(int(watermark_ms or 0), unit="ms", tz="UTC")
    return n


def check_progress(late: dict[int, tuple[int, int]], progress: Any) -> LateCheck | None:
    """The check of the batch a progress report is about (``late``: batch id -> (routed,
    watermark ms), filled by the batch writer); None when the writer did not run that batch."""
    routed = late.pop(int(progress.batchId), None)
    if routed is None:
        return None
    return check_batch(int(progress.batchId), routed[0], progress.stateOperators or [], routed[1])


def batch_ranges(
        checkpoint: str | Path) -> list[tuple[int, dict[tuple[str, int], int], dict[tuple[str, int], int], int]]:
    """Every batch still in the offset log as (batch id, start offsets, end offsets, the watermark
    its stateful operators judged lateness by); a batch's start is the previous batch's end."""

    folder = Path(checkpoint) / "offsets"
    logged: dict[int, tuple[dict[str, Any], dict[tuple[str, int], int]]] = {}
    for f in folder.iterdir() if folder.is_dir() else []:
        if not f.name.isdigit():
            continue
        try:
            meta, sources = parse_offsets_file(f.read_text())
        except (OSError, ValueError):
            continue
        logged[int(f.name)] = (meta, {(t, int(p)): int(o) for t, parts in sources[0].items() for p, o in parts.items()})
    out = []
    for batch in sorted(logged):
        prev = logged.get(batch - 1)
        start = prev[1] if prev else {}
        wm = int(prev[0].get("batchWatermarkMs") or 0) if prev else 0
        out.append((batch, start, logged[batch][1], wm))
    return out


def explain(missing: Iterable[tuple[tuple[str, int, int], int | None]], checkpoint: str | Path | None,
            limit: int = 50) -> list[dict[str, Any]]:
    """For missing records ((topic, partition, offset), event time in us): which batch read each one
    and whether its event time was behind the watermark that batch's state operators dropped by."""
    from datetime import datetime

    def iso(us: int | None) -> str | None:
        return None if us is None else datetime.fromtimestamp(us / 1e6, UTC).isoformat()

    ranges = batch_ranges(checkpoint) if checkpoint else []
    out = []
    for (topic, part, offset), us in list(missing)[:limit]:
        found = next(((b, wm) for b, start, end, wm in ranges
                      if start.get((topic, part), 0) <= offset < end.get((topic, part), -1)), None)
        row: dict[str, Any] = {"topic": topic, "partition": part, "offset": offset, "event_time": iso(us)}
        if found is None:
            row["why"] = ("not read by any batch still in the offset log (ahead of the stream, or read by a batch "
                          "Spark has since purged)")
        else:
            b, wm = found
            behind = us is not None and us <= wm * 1000
            row.update(batch=b, watermark=iso(wm * 1000), behind_watermark=behind,
                       why=(f"read by batch {b} behind its watermark: Spark's stateful operators dropped it"
                            if behind else f"read by batch {b}, not behind its watermark"))
        out.append(row)
    return out
