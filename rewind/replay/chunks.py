"""A replay's chunks: read, transform, write each one; learn which aggregate groups it touches.

Each chunk is one Spark job over ``[start, end)`` per partition (``rewind.replay.setup.plan_chunks``),
the transform's own: the records it read are Spark's count of its scan (``rewind.replay.scanned``). The
transform's aggregate rows are never written (partial totals of the range: ``rewind.replay.aggregates``);
they only name the groups the chunk touches, or the identity rows do when the aggregate declares
its measures (then Spark drops the aggregate branch from the plan: ``without_kinds``).

A record the live stream routed behind the watermark is a dead letter; the batch (no watermark)
finds it valid. Unless the replay brings late records back (``late``), its row is left out and it
is counted as late, not as a duplicate.

The sink write of chunk i overlaps the Spark work of chunk i+1: one writer thread takes each
chunk's Arrow result (pandas conversion, split, dead-letter check, ``write_rows``) while this
thread runs the next chunk's job. At most two chunks are in memory, the sink is only touched by
the writer (one chunk at a time, in order), and a failure waits for the write in flight, so whole
chunks are written or none.
"""

from __future__ import annotations

import logging
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from rewind.api.contract import identity_of
from rewind.api.late import BEHIND_WATERMARK
from rewind.driver.batch_writer import arrow_to_pandas
from rewind.driver.outputs import output_frame
from rewind.driver.source import bounded_options, bounded_read
from rewind.replay.recompute import from_identity_rows, touched_groups
from rewind.replay.report import ReplayReport
from rewind.replay.scanned import rows_scanned
from rewind.replay.setup import Ranges, ReplaySetup, plan_chunks
from rewind.sink.dialects import coordinates_in

log = logging.getLogger("rewind.replay.run")


def replay_chunks(setup: ReplaySetup, bootstrap: str, spark: Any, target: Any, transform: Any, report: ReplayReport,
                  *, earliest: dict[Any, int], late: set[tuple[str, int, int]], progress: bool,
                  chunk_offsets: int) -> dict[str, dict[str, Any]]:
    """Read, transform and write each chunk; returns the aggregate groups touched (table -> group -> start).

    A record sent twice whose copies fall in different chunks leaves a row in each chunk's output:
    the second is counted as a duplicate collapsed, not as a row already present (``_repeats``).
    """
    from tqdm import tqdm


    spec, plan = setup.spec, setup.plan
    aggregated = {a.table for a in transform.aggregates}
    written = [t for t in target.specs if t not in aggregated]
    counts: dict[str, Any] = {"records_planned": plan.total_records, "records_planned_exact": plan.exact,
                              "records_read": 0, "events_out": 0, "dead_letters_out": 0, "late": 0,
                              "late_reprocessed": 0, "written": {t: 0 for t in written},
                              "already_present": {t: 0 for t in written}}
    report.counts = counts
    topics = sorted({p.topic for p in plan.partitions})
    padding = {tp: (off, off) for tp, off in earliest.items() if tp.topic in topics and tp not in setup.ranges}
    options = bounded_options(spec, bootstrap, topics)
    chunks = plan_chunks(setup.ranges, chunk_offsets)
    touched: dict[str, dict[str, Any]] = {}
    by_identity = from_identity_rows(transform, target.specs)
    skipped_kinds = [a.output_kind for a in by_identity]
    identity = identity_of(transform)
    earlier = np.empty(0, dtype=np.uint64)  # hashes of the identities earlier chunks output
    bar = tqdm(total=plan.total_records, unit="rec", unit_scale=True, disable=not progress, file=sys.stderr,
               desc=f"replay {setup.replay_id}")

    def write(i: int, chunk: Ranges, arrow: Any, read: int, read_s: float, count_s: float, t: float) -> None:
        w = time.perf_counter()
        tables = transform.split(arrow_to_pandas(arrow), None)  # batch_id NULL: written by a replay
        touched_groups(transform, spec, tables, by_identity, touched)  # late rows too: their groups are touched
        tables, left_dead, back = keep_dead_letters_dead(target, tables, chunk, transform, late)
        nonlocal earlier
        repeats, earlier = _repeats(tables.get(identity.table), identity.columns, earlier)
        inserted: dict[str, int] = {}
        target.write_rows({t: tables[t] for t in written if t in tables}, replay_id=setup.replay_id,
                          inserted=inserted)
        out = {t: int(len(tables.get(t, ()))) for t in written}
        again = {identity.table: repeats}
        row = {"chunk": i, "offsets": sum(e - s for s, e in chunk.values()), "records": read, "out": out,
               "inserted": inserted, "repeats_of_earlier_chunks": repeats, "late": left_dead + back,
               "read_s": round(read_s, 3), "count_s": round(count_s, 3), "write_s": round(time.perf_counter() - w, 3),
               "seconds": round(time.perf_counter() - t, 3)}
        report.chunks.append(row)
        counts["records_read"] += read
        counts["events_out"] += out.get(identity.table, 0) - repeats
        counts["dead_letters_out"] += out.get(transform.dead_letter_table, 0)
        counts["late"] += left_dead + back
        counts["late_reprocessed"] += back
        for name in written:
            new = inserted.get(name, out.get(name, 0))
            counts["written"][name] += new
            counts["already_present"][name] += max(0, out.get(name, 0) - new - again.get(name, 0))
        bar.update(read)
        log.info("replay %s chunk %d/%d: %d offsets, %d records read in %.2fs, written in %.2fs (beside the next "
                 "chunk's read), out %s, new %s", setup.replay_id, i, len(chunks), row["offsets"], read,
                 row["read_s"], row["write_s"], out, inserted)

    pending: Future[None] | None = None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"replay-{setup.replay_id}-writer")
    try:
        for i, chunk in enumerate(chunks, 1):
            t = time.perf_counter()
            spark.sparkContext.setJobDescription(f"rewind replay {setup.replay_id} chunk {i}/{len(chunks)}")
            src = bounded_read(spark, spec, options, {**padding, **chunk})
            frame = without_kinds(output_frame(transform, src, spec), skipped_kinds)
            arrow = frame.toArrow()
            c = time.perf_counter()
            read = rows_scanned(frame, src)
            if read is None:  # no row count on the source's scan: count it with a read of its own
                read = int(src.count())
            count_s = time.perf_counter() - c
            read_s = time.perf_counter() - t
            if pending is not None:
                pending.result()  # the previous chunk is written (or its error raised) before the next starts
            pending = pool.submit(write, i, chunk, arrow, read, read_s, count_s, t)
        if pending is not None:
            pending.result()
    finally:
        pool.shutdown(wait=True)  # a failed read still lets the write in flight finish: whole chunks only
        bar.close()
    counts["duplicates_collapsed"] = max(0, counts["records_read"] - counts["events_out"] - counts["dead_letters_out"]
                                         - counts["late"] + counts["late_reprocessed"])
    return touched


def without_kinds(out: Any, kinds: list[str]) -> Any:
    """The transform's output without rows of ``kinds``: Spark then plans no branch for them.

    Why: a replay throws the transform's aggregate rows away (partial aggregates of the range); when
    the identity rows name the groups they touch, it needs none of them. The filter on the constant
    ``kind`` of each branch of the union is folded by Spark's optimizer, which drops that branch (for
    the demo: its second deduplication, its aggregation and their shuffles) from the plan
    (``tests/test_demo_plan.py``).
    """
    from pyspark.sql import functions as F

    return out.filter(~F.col("kind").isin(kinds)) if kinds and "kind" in out.columns else out


def _repeats(rows: Any, columns: tuple[str, ...], earlier: Any) -> tuple[int, Any]:
    """How many ``rows`` carry an identity an earlier chunk output, and the hashes seen so far.

    Counting only: every row is still written (a ``latest`` table may need the later copy). The
    identities are kept as 64-bit hashes (8 bytes each, 8 MB for a million): a collision would
    count one row as a repeat instead of already present, never drop it.
    """
    import pandas as pd

    if rows is None or not len(rows) or not set(columns) <= set(rows.columns):
        return 0, earlier
    hashes = pd.util.hash_pandas_object(rows[list(columns)], index=False).to_numpy(dtype=np.uint64)
    return int(np.isin(hashes, earlier).sum()), np.concatenate([earlier, hashes])


def keep_dead_letters_dead(target: Any, tables: dict[str, Any], chunk: Ranges, transform: Any,
                           late: set[tuple[str, int, int]]) -> tuple[dict[str, Any], int, int]:
    """Rows of records the sink already holds as dead letters are not written again as rows (of the
    identity table, when it carries the Kafka coordinates), except the late ones this replay brings
    back (``late``). Returns the tables, how many late records were left dead letters, how many brought back.

    Why: the live stream routes a record that arrived behind the watermark to the dead-letter table
    (``behind_watermark``); a replay, a batch read without a watermark, would find it valid and
    write it as an event too, and the record would then be in two places. A replay repairs what is
    missing; it does not overturn the stream's verdicts unless asked to (``rewind.replay.late``).
    """

    name, dead_table = identity_of(transform).table, transform.dead_letter_table
    events = tables.get(name)
    if events is None or not len(events) or dead_table not in target.specs \
            or not {"topic", "partition", "offset"} <= set(events.columns):
        return tables, 0, 0

    dead = target.read_rows(dead_table, where=coordinates_in(chunk), columns=["topic", "partition", "offset",
                                                                               "reason"])
    if not len(dead):
        return tables, 0, 0
    reason = {(t, int(p), int(o)): r for t, p, o, r in zip(dead["topic"], dead["partition"], dead["offset"],
                                                           dead["reason"])}
    coords = [(t, int(p), int(o)) for t, p, o in zip(events["topic"], events["partition"], events["offset"])]
    keep = [c not in reason or c in late for c in coords]
    left = sum(1 for c in coords if reason.get(c) == BEHIND_WATERMARK and c not in late)
    back = sum(1 for c in coords if c in late and c in reason)
    if not all(keep):
        log.info("replay: %d row(s) left out: their records are dead letters already (%d behind the watermark)",
                 keep.count(False), left)
    return {**tables, name: events[keep]}, left, back
