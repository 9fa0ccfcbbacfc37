"""The foreachBatch function of the driver path: one collect, one sink transaction per batch.

Why its own module: the stream runner wires it, the staged writer (``staged_writer``) extends
it, and the replay job shares its Arrow conversion; none of them should import the runner.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rewind.driver.late_routing import keep_behind, late_events_watermark_ms, mark_behind
from rewind.driver.offset_log import OffsetLog
from rewind.faults import fault_point
from rewind.sink.errors import SinkRefused
from rewind.sink.unwritable import route_unwritable

log = logging.getLogger(__name__)

__all__ = ["BatchWriter", "arrow_to_pandas"]


def arrow_to_pandas(table: Any) -> Any:
    """A collected batch as pandas, integers kept exact: Arrow's default turns an integer column holding
    a null into float64, and a bigint past 2**53 (a version, an id) would come back rounded.

    Decimals need no mapping: Spark's ``toArrow()`` gives a ``decimal(P,S)`` column as Arrow
    ``decimal128(P,S)``, which pandas holds as an object column of ``decimal.Decimal`` at the scale
    (None for null), never float (tests/test_sink_types.py)."""
    import pandas as pd
    import pyarrow as pa

    ints = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
            pa.int64(): pd.Int64Dtype()}
    return table.to_pandas(types_mapper=ints.get)


@dataclass
class BatchWriter:
    """The foreachBatch function: one collect, one sink transaction per batch."""

    sink: Any
    split: Callable[[Any, int], dict[str, Any]]
    checkpoint: str | None = None  # where offsets/<batch> says which Kafka range the batch holds
    phases: list[dict[str, Any]] | None = None  # benchmarks: per batch, where foreachBatch's time went
    #: batch id -> (records routed as behind the watermark, that watermark in ms), for the check
    #: against Spark's own count when the batch's progress arrives (see ``late_check``).
    late: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: the transform's dead-letter table: rows a sink cannot take go there (``rewind.sink.unwritable``)
    dead_letter: str | None = None
    #: the driver lease's check (``LeaseKeeper.check``), asked before every commit: a driver that lost
    #: its lease commits nothing (the sink's own fence refuses it too, in the commit's transaction)
    lease_check: Callable[[str], None] | None = None
    #: ``offsets/N`` as this query's batches read it, each once (``rewind.driver.offset_log``)
    offset_log: OffsetLog | None = field(default=None, init=False, repr=False)
    #: told each batch's rows per table once the sink has it (``rewind.lineage``: OpenLineage's outputStatistics)
    on_rows: Callable[[int, dict[str, int]], None] | None = None

    def _log(self) -> OffsetLog:
        if self.offset_log is None:
            self.offset_log = OffsetLog(str(self.checkpoint))
        return self.offset_log

    def counted(self, batch_id: int, rows: dict[str, int]) -> None:
        if self.on_rows is not None:
            self.on_rows(batch_id, rows)

    def check_lease(self, batch_id: int) -> None:
        if self.lease_check is not None:
            self.lease_check(f"batch {batch_id}")

    def late_filtered(self, df: Any, batch_id: int) -> tuple[Any, int | None]:
        """The batch with, of the transform's late candidates, exactly those Spark's state operators
        drop, and the watermark that judged them (fault point ``batch.write`` first: a test's poison
        batch fails here). Both writers start here."""

        fault_point("batch.write", batch=batch_id)
        watermark = late_events_watermark_ms(self.checkpoint, batch_id, self._log()) if self.checkpoint else None
        if "kind" in df.columns and "event_time" in df.columns:  # without it, no late candidates (contract.py)
            df = keep_behind(df, watermark if watermark is not None else -1)
        return df, watermark

    def __call__(self, df: Any, batch_id: int) -> None:

        t0 = time.perf_counter()
        df, watermark = self.late_filtered(df, batch_id)
        table = df.toArrow()  # runs the micro-batch's Spark job (read, parse, state) and collects it
        t1 = time.perf_counter()
        frame = arrow_to_pandas(table)
        routed = mark_behind(frame, watermark)
        self.late[batch_id] = (routed, watermark or 0)
        tables = self.split(frame, batch_id)
        t2 = time.perf_counter()
        result = self.write(batch_id, tables)
        t3 = time.perf_counter()
        self.counted(batch_id, result.rows)
        if self.phases is not None:
            self.phases.append({"batch_id": batch_id, "rows": table.num_rows, "collect_s": t1 - t0,
                                "to_pandas_split_s": t2 - t1, "sink_write_s": t3 - t2})
        # a span per step: the batch's Spark job and collect, the hand-off, the sink's transaction
        log.info("batch %d %s rows=%s in %.2fs (spark job and collect %.2fs, to pandas and split %.2fs, sink %.2fs)",
                 batch_id, "skipped (already committed)" if result.skipped
                 else "re-planned, rewritten" if result.replanned else "committed", result.rows, result.seconds,
                 t1 - t0, t2 - t1, t3 - t2)

    def write(self, batch_id: int, tables: dict[str, Any]) -> Any:
        """The sink's write of the batch; if the sink refuses values some rows carry, those rows go to
        the dead-letter table and the rest is written (``rewind.sink.unwritable``)."""

        offsets = self.source_offsets(batch_id)
        self.check_lease(batch_id)
        try:
            return self.sink.write_batch(batch_id, tables, offsets)
        except SinkRefused as exc:
            routed = route_unwritable(self.sink.specs, tables, self.dead_letter, batch_id)
            if routed is None or self.dead_letter is None:
                raise
            moved = len(routed[self.dead_letter]) - len(tables.get(self.dead_letter, ()))
            log.warning("batch %d: %d rows the sink refused (%s) written as dead letters", batch_id, moved, exc)
            return self.sink.write_batch(batch_id, routed, offsets)

    def source_offsets(self, batch_id: int) -> str | None:
        """The batch's identity as the sink ledger stores it: start offsets (batch N-1's end), end
        offsets and watermark, from Spark's offset log (written before the batch runs).

        Why all three: a plain retry of batch N re-reads the same range under the same watermark and
        may be skipped, but after a savepoint restore the same id can be re-planned to *end* where the
        old batch N ended while starting elsewhere, and its watermark then closes other windows;
        skipping it lost those windows (chaos seed 7, 2026-11-23). Any difference means the batch is
        rewritten, which the idempotent table writes make safe.

        A state repartition's batch R (``rewind.upgrade.repartition``) never reaches the sink: its
        offsets file repeats batch R-1's, so batch R+1 starts exactly where R-1 ended, under R-1's
        watermark; after a rollback across it, Spark plans a new R, which the ledger never held."""
        if self.checkpoint is None:
            return None

        try:
            meta, sources = self._log().entry(batch_id)
        except (OSError, ValueError) as exc:
            log.warning("batch %d: offsets unreadable (%s); the ledger records no offsets", batch_id, exc)
            return None
        start: Any = None
        if batch_id > 0:
            try:
                start = _one_or_all(self._log().entry(batch_id - 1)[1])
            except (OSError, ValueError):
                start = "unknown"  # never equal to a recorded identity with a known start: rewritten
        return json.dumps({"start": start, "end": _one_or_all(sources),
                           "watermark_ms": meta.get("batchWatermarkMs")}, sort_keys=True)


def _one_or_all(sources: list[dict[str, Any]]) -> Any:
    unique = {json.dumps(s, sort_keys=True) for s in sources}
    return json.loads(unique.pop()) if len(unique) == 1 else sources
